"""Training: the run's configuration, the optimiser step, the trainer, evaluation,
checkpoints, several processes, progress bars, the stand-in accelerator, and the
notebooks' task loops (`tasks`).

One optimiser step (`optim.update`) serves every loop here.
"""

from labnn.training.config import TrainConfig
from labnn.training.distributed import pick_device
from labnn.training.evaluate import evaluate, stream_loss
from labnn.training.tasks import train_on_programs, train_recall
from labnn.training.optim import TrainingDiverged
from labnn.training.trainer import Trainer

__all__ = ["TrainConfig", "Trainer", "TrainingDiverged", "evaluate", "pick_device", "stream_loss",
           "train_on_programs", "train_recall"]
