"""Review 68 of the package (training), each test written failing first."""

import socket

import pytest
import torch
import torch.multiprocessing as mp

from labnn.training import checkpoint as ckpt
from test_host_sync import count_reads  # noqa: F401 (a fixture: host reads of tensor values)
from test_review67_pkg import config, training_ids


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Trainer.load called directly under torchrun (gloo, two processes)

def load_in_rank(rank, port, folder, other):
    """One process of two calling `Trainer.load(folder/m.pt)` itself; rank 1 meets `other`
    (another save of the file, made between two reads) if it reads the file itself."""
    import os

    import torch.distributed as dist

    from test_ddp import make
    from labnn.training.trainer import Trainer

    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    path = f"{folder}/m.pt"
    if rank == 1:
        stale, real = ckpt.load(other), ckpt.load
        ckpt.load = lambda p, *a, **k: stale if str(p) == path else real(p, *a, **k)
    trainer = Trainer(make("transformer"), *training_ids(), config(path))
    trainer.load(path)
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.save((trainer.iter, weights), f"{folder}/{rank}")
    dist.destroy_process_group()
    os._exit(0)


def test_a_direct_load_under_torchrun_gives_every_rank_rank_0s_copy(tmp_path):
    """`Trainer.load(path)` (not through `fit`) read the file in every rank: a save by
    another run between two reads gave the replicas different weights. Rank 0 reads it now
    and the others restore its copy, as `fit(resume=True)` does."""
    from test_ddp import START, make
    from labnn.training.trainer import Trainer

    path = tmp_path / "m.pt"
    first = Trainer(make("transformer"), *training_ids(), config(str(path)))
    first.fit()
    other = ckpt.load(path)
    other["model"] = {k: v + 1 for k, v in other["model"].items()}  # another save
    other["iter"] = 4
    ckpt.save_atomic(other, tmp_path / "other.pt")
    mp.start_processes(load_in_rank, args=(free_port(), str(tmp_path),
                                           str(tmp_path / "other.pt")),
                       nprocs=2, start_method=START)
    (iter0, weights0), (iter1, weights1) = (torch.load(tmp_path / str(r)) for r in range(2))
    assert iter0 == iter1 == 8
    for k in weights0:
        torch.testing.assert_close(weights1[k], weights0[k], rtol=0, atol=0)


# save_atomic: one copy of the checkpoint in memory, the file still verified

def test_a_save_holds_one_copy_of_the_checkpoint_in_memory(tmp_path):
    """`save_atomic` held the buffer, `header + data` and the file read back at once: about
    three times the checkpoint (for a 20 MB payload a 60 MB peak), which for a large
    model can exhaust memory. It writes the header and the data apart and verifies the
    file in chunks now."""
    import tracemalloc

    payload = {"w": torch.zeros(5 * 2**20)}  # 20 MB
    ckpt.save_atomic({"w": torch.zeros(1)}, tmp_path / "warm.pt")
    tracemalloc.start()
    try:
        ckpt.save_atomic(payload, tmp_path / "m.pt")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * 20 * 2**20, f"peak {peak / 2**20:.0f} MB for a 20 MB checkpoint"
    torch.testing.assert_close(ckpt.load(tmp_path / "m.pt")["w"], payload["w"])


@pytest.mark.parametrize("damage", ["a byte of the data", "a byte of the header",
                                    "the last byte lost", "a byte more"])
def test_a_file_that_differs_from_what_was_written_is_refused(tmp_path, monkeypatch, damage):
    """The read-back check, now by chunks and by the header's sha256, still refuses a file
    whose bytes differ from those written; the file there is left unchanged."""
    import os
    import stat

    out = tmp_path / "m.pt"
    ckpt.save_atomic({"w": torch.zeros(3)}, out)
    before = out.read_bytes()
    fsync = os.fsync

    def damaged(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            size = os.fstat(fd).st_size
            if damage == "a byte of the data":
                os.pwrite(fd, b"\xff" * 8, size - 30)  # in the zip's directory
            elif damage == "a byte of the header":
                os.pwrite(fd, b"L", 1)
            elif damage == "the last byte lost":
                os.ftruncate(fd, size - 1)
            else:
                os.pwrite(fd, b"\x00", size)
        fsync(fd)

    monkeypatch.setattr(ckpt.os, "fsync", damaged)
    with pytest.raises(OSError, match="the bytes read back differ from those written"):
        ckpt.save_atomic({"w": torch.ones(3)}, out)
    monkeypatch.setattr(ckpt.os, "fsync", fsync)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


# evaluate / stream_loss: one host read per evaluation

def own_reads(counts, run, model, calls):
    """The host reads of `run()`. (A model read its tokens' range once per call, which
    this subtracted; the loops now call it past that check, `forward_checked_ids`, and
    check the ids of their corpus once at their door instead: one read more per
    evaluation, whatever its batches.)"""
    counts["n"] = 0
    value = run()
    return value, counts["n"] - 1


def reference_mean(model, batches, score=lambda i: True):
    """The mean loss as `evaluate` and `stream_loss` read it before: a float per batch,
    summed by Python."""
    from labnn.training.evaluate import lm_loss

    losses, state = [], None
    with torch.no_grad():
        for i, (x, y) in enumerate(batches):
            logits, state = model(x, state)
            if score(i):
                losses.append(lm_loss(logits, y).item())
    return sum(losses) / len(losses)


@pytest.mark.parametrize("stream", [False, True])
def test_evaluate_reads_the_device_once_per_evaluation(count_reads, stream):
    """`evaluate` called `.item()` at every batch: a host synchronisation per evaluation
    batch on a GPU. It sums on the device and reads once (besides the model's own door
    check of its tokens, once per call); the value is the same float (summed in float64 in
    the same order: equal, not merely close)."""
    from dataclasses import replace

    from test_ddp import make
    from labnn.data.batching import random_batch, stream_batch
    from labnn.training.evaluate import evaluate

    model = make("xl" if stream else "transformer").eval()
    ids = training_ids()[1]
    reads = []
    for eval_iters in (2, 6):
        c = replace(config(None), stream=stream, eval_iters=eval_iters)
        got, n = own_reads(count_reads, lambda: evaluate(model, ids, c), model, eval_iters)
        reads.append(n)
        g = torch.Generator().manual_seed(c.seed)
        batches = [stream_batch(ids, 4, 16, i) if stream else random_batch(ids, 4, 16, g)
                   for i in range(eval_iters)]
        step = (lambda x, s: model(x, s)) if stream else (lambda x, s: (model(x)[0], None))
        assert got == reference_mean(step, batches)
    assert reads == [1, 1], f"{reads[0]} host reads for 2 batches, {reads[1]} for 6"


@pytest.mark.parametrize("name", ["transformer", "xl"])
def test_stream_loss_reads_the_device_once_per_evaluation(count_reads, name):
    from test_ddp import make
    from labnn.data.batching import stream_batch
    from labnn.training.evaluate import read_segment, stream_loss

    model = make(name).eval()
    ids = training_ids()[1]
    reads = []
    for n in (3, 6):
        got, r = own_reads(count_reads, lambda: stream_loss(
            model, ids, batch_size=4, seq_len=16, skip=1, max_batches=n), model, n)
        reads.append(r)
        batches = [stream_batch(ids, 4, 16, i) for i in range(n)]
        want = reference_mean(lambda x, s: read_segment(model, x, s, None), batches,
                              score=lambda i: i >= 1)
        assert got == want
    assert reads == [1, 1], f"{reads[0]} host reads for 3 segments, {reads[1]} for 6"
