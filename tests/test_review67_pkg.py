"""Review 67 of the package, each test written failing first."""

import threading

import pytest
import torch

from labnn.feedback.layer import RelativeBias
from labnn.training import checkpoint as ckpt


def test_a_second_thread_of_the_process_that_holds_a_lock_is_refused(tmp_path):
    """The lock was re-entrant for the whole process (its pid in the lock file): a notebook
    training in a background thread and calling `fit` again in its main thread on the same
    checkpoint had two writers, each save replacing the other's. Only the thread that holds
    it takes it again now."""
    out, held, done = tmp_path / "m.pt", threading.Event(), threading.Event()

    def hold():
        with ckpt.exclusive(out):
            held.set()
            done.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        with pytest.raises(ckpt.CheckpointBusy, match="another thread of this process"):
            with ckpt.exclusive(out):
                pass
    finally:
        done.set()
        holder.join(60)
    with ckpt.exclusive(out):  # free again once that thread's block ended
        with ckpt.exclusive(out):  # and still re-entrant in one thread
            pass


@pytest.mark.parametrize("s, error", [(-1, ValueError), (2.0, TypeError), (True, TypeError),
                                      (torch.tensor(3), TypeError)])
def test_a_relative_bias_of_a_bad_key_count_is_refused_at_the_door(s, error):
    """`RelativeBias(h, m)(s)` with `s = -1` returned an empty bias, and a float or a tensor
    an error from inside torch.arange."""
    rel = RelativeBias(n_heads=2, max_distance=3)
    with pytest.raises(error, match=r"\bs must be a non-negative int"):
        rel(s)
    with pytest.raises(error, match=r"\bs must be a non-negative int"):
        RelativeBias.lookup(rel.bias, s)


@pytest.mark.parametrize("distance", [[0], [2, 0, 1], [-1]])
def test_distance_zero_is_refused_not_read_as_the_last_entry(distance):
    """Distances start at 1 (the previous step); `at` read distance 0 as index -1, the entry
    of the farthest keys."""
    table = torch.arange(6.0).view(2, 3)
    with pytest.raises(ValueError, match=r"distance must hold distances >= 1 .*got .*"):
        RelativeBias.at(table, torch.tensor(distance))


def test_distances_must_be_integers():
    table = torch.zeros(2, 3)
    with pytest.raises(TypeError, match=r"distance must be a tensor of integer"):
        RelativeBias.at(table, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"distance must be a tensor of integer"):
        RelativeBias.at(table, [1, 2])
    torch.testing.assert_close(RelativeBias.at(torch.arange(6.0).view(2, 3),
                                               torch.tensor([5, 1, 3])),
                               torch.tensor([[2.0, 0.0, 2.0], [5.0, 3.0, 5.0]]))


# torchrun: every rank resumes from what rank 0 read under its lock (gloo, two processes)

def resume_in_rank(rank, port, folder, other):
    """One process of two resuming `folder/m.pt`; rank 1 meets `other` (another save of
    the file, made between two reads) if it reads the file itself, and is handed it as
    `saved`, as its own `train --resume` check would. Writes its start and weights."""
    import os

    import torch.distributed as dist

    from test_ddp import make
    from labnn.training.trainer import TrainConfig, Trainer

    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    path = f"{folder}/m.pt"
    saved = None
    if rank == 1:
        stale = ckpt.load(other)
        real = ckpt.load
        ckpt.load = lambda p, *a, **k: stale if str(p) == path else real(p, *a, **k)
        saved = stale
    trainer = Trainer(make("transformer"), *training_ids(), config(path))
    started = []
    step = trainer.train_step
    trainer.train_step = lambda: (started.append(trainer.iter) if not started else None,
                                  step())[1]
    trainer.fit(resume=True, saved=saved)
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.save((started, weights), f"{folder}/{rank}")
    dist.destroy_process_group()
    os._exit(0)


def training_ids():
    ids = torch.randint(0, 13, (40,), generator=torch.Generator().manual_seed(0)).repeat(60)
    return ids[:2000], ids[2000:]


def config(path):
    from labnn.training.trainer import TrainConfig

    return TrainConfig(max_iters=8, batch_size=4, seq_len=16, lr=3e-3, warmup_iters=2,
                       eval_interval=4, eval_iters=2, device="cpu", show_progress=False,
                       checkpoint=path)


def test_every_rank_resumes_from_what_rank_0_read_under_its_lock(tmp_path):
    """Ranks other than 0 read `--out` themselves, without the lock rank 0 holds: a save
    by another run between two reads gave the ranks different weights to start from, and
    the replicas went on apart. Rank 0 reads it now, and the others get its copy."""
    import socket

    import torch.multiprocessing as mp

    from test_ddp import START, make
    from labnn.training.trainer import Trainer

    path = tmp_path / "m.pt"
    first = Trainer(make("transformer"), *training_ids(), config(str(path)))
    step = first.train_step

    def stopped():  # a run stopped at iteration 6: its checkpoint is from iteration 4
        if first.iter == 6:
            raise KeyboardInterrupt
        return step()

    first.train_step = stopped
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    other = ckpt.load(path)
    other["model"] = {k: v + 1 for k, v in other["model"].items()}  # another save
    ckpt.save_atomic(other, tmp_path / "other.pt")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(resume_in_rank, args=(port, str(tmp_path), str(tmp_path / "other.pt")),
                       nprocs=2, start_method=START)
    (start0, weights0), (start1, weights1) = (torch.load(tmp_path / str(r)) for r in range(2))
    assert start0 == start1 == [4]
    for k in weights0:
        torch.testing.assert_close(weights1[k], weights0[k], rtol=0, atol=0)


def read_in_rank(rank, port, folder):
    """`distributed.from_main` of a read that fails in rank 0; writes what each rank raised."""
    import os

    import torch.distributed as dist

    from labnn.training import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)

    def read():
        raise ValueError("checkpoint m.pt is corrupted")

    try:
        distributed.from_main(read, distributed.Ranks(rank, 2))
        raised = None
    except Exception as err:  # noqa: BLE001 (what each rank raised is the point)
        raised = f"{type(err).__name__}: {err}"
    torch.save(raised, f"{folder}/{rank}")
    dist.destroy_process_group()
    os._exit(0)


def test_a_read_that_fails_in_rank_0_is_named_in_every_rank(tmp_path):
    """The other ranks wait for rank 0's copy: they are told when there is none."""
    import socket

    import torch.multiprocessing as mp

    from test_ddp import START

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(read_in_rank, args=(port, str(tmp_path)), nprocs=2, start_method=START)
    assert torch.load(tmp_path / "0") == "ValueError: checkpoint m.pt is corrupted"
    assert torch.load(tmp_path / "1") == ("RuntimeError: rank 0 could not read the checkpoint: "
                                          "ValueError: checkpoint m.pt is corrupted")


@pytest.mark.parametrize("attn_len", [None, 3])
def test_transformer_generation_checks_its_cache_at_the_door_not_per_token(monkeypatch,
                                                                           attn_len):
    """`generate` ran `check_cache` (the cache's layers, shapes, dtypes, devices, and the
    new token's type) at every token, on the cache it had built itself: ~10 us of a
    ~250 us step on a 2-core CPU. `forward` checks a cache it is given, once per call."""
    from labnn.transformer import TransformerConfig, TransformerLM

    model = TransformerLM(TransformerConfig(11, seq_len=32, d_model=16, n_heads=2,
                                            n_layers=2, attn_len=attn_len)).eval()
    calls = []
    checked = TransformerLM.check_cache
    monkeypatch.setattr(TransformerLM, "check_cache",
                        lambda self, *a: calls.append(1) or checked(self, *a))
    prompt = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(0))
    out = model.generate(prompt, 6, temperature=0.0)
    assert calls == []
    monkeypatch.setattr(TransformerLM, "check_cache", checked)
    want = model.generate(prompt, 6, temperature=0.0, use_cache=False)
    assert torch.equal(out, want)
    _, cache = model(prompt, use_cache=True)
    monkeypatch.setattr(TransformerLM, "check_cache",
                        lambda self, *a: calls.append(1) or checked(self, *a))
    with pytest.raises(ValueError, match=r"cache\[0\] has keys"):
        model(prompt[:1, -1:], cache)  # a cache of 2 rows for 1: refused at the door
    assert calls == [1]
