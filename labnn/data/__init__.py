"""Data: the Tiny Shakespeare corpus, a character tokenizer, batchers, synthetic tasks
and the program-tracking and delayed-recall tasks (their training loops are
`labnn.training.tasks`)."""

from labnn.data.batching import (num_stream_batches, random_batch, stream_batch,
                                 stream_batches, train_val_split)
from labnn.data.programs import ProgramData, ProgramTokenizer, printed_accuracy, program_task
from labnn.data.recall import (IGNORE, RecallVocab, accuracy_by_distance, make_recall,
                               recall_batch, value_distances)
from labnn.data.shakespeare import data_dir, load_tiny_shakespeare
from labnn.data.synthetic import order_task
from labnn.data.tokenizer import CharTokenizer

__all__ = [
    "IGNORE",
    "RecallVocab",
    "accuracy_by_distance",
    "make_recall",
    "recall_batch",
    "value_distances",
    "CharTokenizer",
    "ProgramData",
    "ProgramTokenizer",
    "data_dir",
    "load_tiny_shakespeare",
    "num_stream_batches",
    "order_task",
    "printed_accuracy",
    "program_task",
    "random_batch",
    "stream_batch",
    "stream_batches",
    "train_val_split",
]
