"""Two CPU processes (gloo) train exactly like one process with the same global batch; on a
machine with two GPUs, two CUDA processes (NCCL, one per GPU) too."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from labnn.feedback import FeedbackKVConfig, FeedbackTransformerKV
from labnn.training import distributed
from labnn.training.trainer import TrainConfig, Trainer
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLConfig

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="needs torch.distributed")

# fork starts a process in a second (torch already imported), but a process forked after
# CUDA ran in its parent cannot use autograd ("Unable to handle autograd's threading in
# combination with fork-based multiprocessing"): where CUDA exists, spawn.
START = "spawn" if torch.cuda.is_available() or "fork" not in mp.get_all_start_methods() else "fork"


def make(name):
    torch.manual_seed(0)
    if name == "xl":
        return TransformerXL(XLConfig(vocab_size=13, d_model=16, n_heads=2, n_layers=2, mem_len=8))
    if name == "feedback":
        return FeedbackTransformerKV(FeedbackKVConfig(vocab_size=13, d_model=16, n_heads=2, n_layers=2,
                                                      attn_len=8))
    return TransformerLM(TransformerConfig(vocab_size=13, seq_len=16, d_model=16, n_heads=2, n_layers=2))


def run_training(name, checkpoint=None, crash_at=None, resume=False, device="cpu"):
    """Train 8 steps (global batch 4); returns per-step losses of this process's rows, weights, history."""
    base = torch.randint(0, 13, (40,), generator=torch.Generator().manual_seed(0))
    ids = base.repeat(60)
    config = TrainConfig(max_iters=8, batch_size=4, seq_len=16, lr=3e-3, warmup_iters=2, eval_interval=4,
                         eval_iters=2, stream=name != "transformer", device=device, show_progress=False, checkpoint=checkpoint)
    model = make(name)
    trainer = Trainer(model, ids[:2000], ids[2000:], config)
    losses, step = [], trainer.train_step

    def logged():
        if trainer.iter == crash_at:
            raise KeyboardInterrupt  # the last checkpoint is from iteration 4
        losses.append(step())
        return losses[-1]

    trainer.train_step = logged
    try:
        trainer.fit(resume=resume)
    except KeyboardInterrupt:
        pass
    weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return torch.tensor(losses), weights, trainer.history


def worker(rank, world, port, out, args):
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.save(run_training(*args), f"{out}.{rank}")
    dist.destroy_process_group()
    os._exit(0)  # skip the interpreter's slow teardown

def in_two_processes(tmp_path, *args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "result"
    mp.start_processes(worker, args=(2, port, str(out), args), nprocs=2, start_method=START)
    return [torch.load(f"{out}.{rank}", weights_only=False) for rank in range(2)]


@pytest.mark.parametrize("name", ["transformer", "xl"])
def test_two_processes_equal_one_with_the_same_global_batch(tmp_path, name):
    losses, weights, history = run_training(name)
    (losses0, weights0, history0), (losses1, weights1, history1) = in_two_processes(tmp_path, name)
    # each process's loss is the mean over its 2 rows: their mean is the loss over all 4
    torch.testing.assert_close((losses0 + losses1) / 2, losses, rtol=1e-5, atol=1e-6)
    for k in weights:
        torch.testing.assert_close(weights0[k], weights[k], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(weights1[k], weights0[k], rtol=0, atol=0)  # replicas stay identical
    assert history0["iter"] == history["iter"] == [0, 4, 8]
    torch.testing.assert_close(history0["val_loss"], history["val_loss"], rtol=1e-5, atol=1e-6)
    assert history1["iter"] == []  # only rank 0 evaluates
    print(f"{name}: max |loss diff| {((losses0 + losses1) / 2 - losses).abs().max():.2e}, max |weight diff| "
          f"{max((weights0[k] - weights[k]).abs().max().item() for k in weights):.2e}")


@pytest.mark.parametrize("name", ["xl", "feedback"])
def test_checkpoints_resume_under_another_number_of_processes(tmp_path, name):
    """XL and the Feedback Transformer carry memory across batches: a checkpoint holds all
    rows' memory, whoever wrote it (docs/distributed.md says so of both)."""
    _, straight, _ = run_training(name)
    two = str(tmp_path / "two.pt")
    in_two_processes(tmp_path, name, two, 6)  # two processes, killed at iteration 6
    _, resumed, history = run_training(name, two, None, True)  # one process continues
    assert history["iter"] == [0, 4, 8]
    one = str(tmp_path / "one.pt")
    run_training(name, one, 6)  # one process, killed at iteration 6
    (_, resumed0, _), _ = in_two_processes(tmp_path, name, one, None, True)  # two processes continue
    for k in straight:
        torch.testing.assert_close(resumed[k], straight[k], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(resumed0[k], straight[k], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason=f"needs 2 CUDA devices (NCCL runs one process per GPU); this machine "
                           f"has {torch.cuda.device_count()}")
def test_two_gpus_equal_one_gpu(tmp_path):
    losses, weights, _ = run_training("transformer", device="cuda")
    (losses0, weights0, _), (losses1, weights1, _) = in_two_processes(
        tmp_path, "transformer", None, None, False, "cuda")
    torch.testing.assert_close((losses0 + losses1) / 2, losses, rtol=1e-4, atol=1e-5)
    for k in weights:
        torch.testing.assert_close(weights0[k], weights[k], rtol=1e-3, atol=1e-4)
        torch.testing.assert_close(weights1[k], weights0[k], rtol=0, atol=0)


def test_one_indexed_gpu_for_every_process_on_a_machine_is_refused_at_the_door(monkeypatch):
    """`--device cuda:1` under `torchrun --nproc_per_node 2` would put both processes on GPU
    1, which NCCL refuses later with "Duplicate GPU detected": refused before any CUDA call
    (so on a CPU machine too), naming the device, the process count and what to give."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ValueError, match=r"cuda:1 .*2 processes.*'cuda'"):
        distributed.setup(torch.device("cuda", 1), batch_size=4)


def test_each_rank_keeps_and_gets_back_its_own_cuda_random_state(monkeypatch):
    """Rank 0 saved `torch.cuda.get_rng_state_all()`: every GPU's state as rank 0's process
    sees them (the other ranks' GPUs never advanced there), and every rank restored that
    whole list, so rank 1's dropout started over on resume. A checkpoint now keeps each
    rank's own state (gathered), and each rank takes back its own. (No GPU here: torch's
    calls are replaced by recorders.)"""
    from labnn.training import distributed

    set_calls = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([device.index]))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device: set_calls.append((s, device)))
    gpu1 = torch.device("cuda", 1)
    assert distributed.device_rng_states(distributed.Ranks(), gpu1)[0].tolist() == [1]
    assert distributed.device_rng_states(distributed.Ranks(), torch.device("cpu")) is None
    states = [torch.tensor([10]), torch.tensor([11])]
    distributed.restore_device_rng(states, distributed.Ranks(rank=1, world_size=2), gpu1)
    assert set_calls == [(states[1], gpu1)]
    with pytest.raises(ValueError, match=r"random states of 2 process\(es\), this run has 4"):
        distributed.restore_device_rng(states, distributed.Ranks(rank=1, world_size=4), gpu1)
