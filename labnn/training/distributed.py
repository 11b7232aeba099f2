r"""Data-parallel training under `torchrun`: the few things that change when several
processes train one model.

    torchrun --standalone --nproc_per_node 2 -m labnn train \
        --model transformer --batch-size 12 --out m.pt

`torchrun` starts `P` copies of the same program and tells each its rank `r` (and its
`LOCAL_RANK` on the machine) in environment variables. Every copy seeds the same way and
draws the same global batch of `B` rows; rank `r` keeps rows $[rB/P, (r+1)B/P)$.
`DistributedDataParallel` averages the gradients over ranks:

$$\frac{1}{P}\sum_{r} \nabla \frac{1}{|b_r|}\sum_{i \in b_r} \ell_i
= \nabla \frac{1}{B}\sum_{i=1}^{B} \ell_i$$

so the run equals one process training on all `B` rows, up to float rounding (dropout
masks differ). Only rank 0 evaluates, logs, reads the checkpoint it resumes from (under
its lock; the others get its copy, `from_main`) and writes checkpoints. A checkpoint holds
the whole batch's carried state (`gather_state`), which any number of processes can
share out again (`state_rows` takes each rank's part back); on CUDA it also holds every
rank's random state, so it resumes only under as many processes as wrote it
(`restore_device_rng` refuses others). Without `torchrun` nothing here does anything:
`Ranks()` is rank 0 of 1.

Dimension letters (the package legend): `B` rows of a global batch, `P` processes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """`device` if given, else `$LABNN_DEVICE` when set, else CUDA, then Apple's MPS, then
    the CPU. `"audit"` starts `labnn.training.device_audit` (a stand-in accelerator on the CPU,
    for tests) and returns its device.

    Raises:
        ValueError: `device` is not a device name, or names a kind of device this machine
            does not have.
    """
    device = device or os.environ.get("LABNN_DEVICE")
    mps = getattr(torch.backends, "mps", None)
    has_mps = mps is not None and mps.is_available()
    if device == "audit":
        from labnn.training.device_audit import start

        return start()
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if has_mps else torch.device("cpu")
    try:
        picked = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"device {device!r} is not a device name (expected 'cpu', 'cuda', "
            "'cuda:N', 'mps')"
        ) from None
    if picked.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} was asked for, but CUDA is not available "
                "here; use 'cpu'"
            )
        if picked.index is not None and picked.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} was asked for, but there are "
                             f"{torch.cuda.device_count()} GPUs")
    if picked.type == "mps" and not has_mps:
        raise ValueError(f"device {device!r} was asked for, but Apple's MPS is not "
                         "available here; use 'cpu'")
    return picked


# The batch dimension of a carried state's tensors is 0, except these (state class,
# field) pairs.
BATCH_DIMS = {("KVState", "kv"): 1}  # labnn.feedback.kv.KVState.kv is [2, B, H, M, D_h]


@dataclass(frozen=True)
class Ranks:
    """This process's place among the processes of one run (rank 0 of 1 without
    `torchrun`)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that evaluates, logs and saves."""
        return self.rank == 0

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's share of a global batch. Shape: `[B, ...]` -> `[B / P, ...]`."""
        b = x.size(0) // self.world_size
        return x[self.rank * b : (self.rank + 1) * b]


def setup(device: torch.device, batch_size: int) -> tuple[Ranks, torch.device]:
    """Join the process group that `torchrun` describes (`WORLD_SIZE`, `RANK`,
    `LOCAL_RANK`), if any.

    A CUDA device without an index becomes `cuda:LOCAL_RANK`; the backend is NCCL on
    GPUs, gloo on CPUs.

    Returns:
        This process's `Ranks` and the device it trains on.

    Raises:
        ValueError: a CUDA device with an index while several processes run on this
            machine (`LOCAL_WORLD_SIZE`): all of them would share one GPU, which NCCL
            refuses. Checked before any CUDA call. The meta device (no values to train).
            A `batch_size` that the number of processes does not divide.
    """
    if device.type == "meta":
        raise ValueError(f"device {str(device)!r} holds shapes but no values, so nothing "
                         "can be trained on it; use 'cpu' or 'cuda'")
    if not dist.is_available() or (
        int(os.environ.get("WORLD_SIZE", "1")) == 1 and not dist.is_initialized()
    ):
        return Ranks(), device
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if device.type == "cuda" and device.index is not None and local > 1:
        raise ValueError(
            f"device {device} for each of the {local} processes on this machine: NCCL "
            "needs a GPU per process; give 'cuda' (process LOCAL_RANK on cuda:LOCAL_RANK)"
        )
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    ranks = Ranks(dist.get_rank(), dist.get_world_size())
    if batch_size % ranks.world_size:
        raise ValueError(
            f"batch_size={batch_size} must be divisible by the number of processes, "
            f"{ranks.world_size}"
        )
    return ranks, device


def memory_rows(ranks: Ranks, device: torch.device, batch_size: int) -> int | None:
    """The rows of a global batch that one process's memory holds, for
    `labnn.training.config.check_memory`: each GPU its share, `B / P`; None (all `B`) on
    a CPU, whose memory the processes of one machine share."""
    return batch_size // ranks.world_size if device.type == "cuda" else None


def wrap(model: nn.Module, ranks: Ranks, device: torch.device) -> nn.Module:
    """The module training calls: `model` itself in one process, its
    `DistributedDataParallel` wrapper in several."""
    if ranks.world_size == 1:
        return model
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )


def from_main(read: Callable[[], Any], ranks: Ranks) -> Any:
    """`read()` in rank 0 alone, and its result in every rank (pickled through the process
    group, from this run's own rank 0). A collective: every rank must call it.

    Rank 0 reads a checkpoint it holds locked (`labnn.training.checkpoint.exclusive`): a
    rank reading the file itself could meet another run's save in between, or another
    machine's file, and start elsewhere; every rank then holds the checkpoint's bytes once.

    Raises:
        RuntimeError: in the other ranks, when `read` raised in rank 0 (which raises it).
    """
    if ranks.world_size == 1:
        return read()
    box: list = [None]
    if ranks.is_main:
        try:
            box[0] = (True, read())
        except BaseException as err:  # the others wait for an answer: say what happened
            dist.broadcast_object_list([(False, f"{type(err).__name__}: {err}")], src=0)
            raise
    dist.broadcast_object_list(box, src=0)
    ok, value = box[0]
    if not ok:
        raise RuntimeError(f"rank 0 could not read the checkpoint: {value}")
    return value


def _map(
    state: Any, fn: Callable[[torch.Tensor, int], torch.Tensor], dim: int = 0
) -> Any:
    """Apply `fn(tensor, batch_dim)` to every tensor of a state (tensors, lists, tuples,
    dataclasses)."""
    if isinstance(state, torch.Tensor):
        return fn(state, dim)
    if isinstance(state, (list, tuple)):
        return type(state)(_map(s, fn, dim) for s in state)
    if dataclasses.is_dataclass(state):
        name = type(state).__name__
        mapped = {
            f.name: _map(getattr(state, f.name), fn, BATCH_DIMS.get((name, f.name), 0))
            for f in dataclasses.fields(state)
        }
        return dataclasses.replace(state, **mapped)
    return state  # ints (offsets), None


def gather_state(state: Any, ranks: Ranks) -> Any:
    """The whole batch's state from every rank's rows. A collective: every rank must
    call it."""
    if ranks.world_size == 1 or state is None:
        return state

    def cat(t: torch.Tensor, dim: int) -> torch.Tensor:
        parts = [torch.empty_like(t) for _ in range(ranks.world_size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim)

    return _map(state, cat)


def state_rows(state: Any, ranks: Ranks, device: torch.device | None = None) -> Any:
    """This rank's rows of a whole-batch state (as `gather_state` wrote it), moved to
    `device` when given (a checkpoint is read on the CPU)."""
    if device is not None and state is not None:
        state = _map(state, lambda t, dim: t.to(device))
    if ranks.world_size == 1 or state is None:
        return state
    return _map(
        state,
        lambda t, dim: ranks.rows(t.transpose(0, dim)).transpose(0, dim).contiguous(),
    )


def device_rng_states(ranks: Ranks, device: torch.device) -> list[torch.Tensor] | None:
    """Each rank's own CUDA generator state, by rank (None off CUDA): what a checkpoint keeps
    so that every rank's dropout goes on where it was. A collective: every rank must call
    it. (`torch.cuda.get_rng_state_all` in rank 0 holds the states of every GPU as rank 0
    sees them: the other ranks' GPUs there were never advanced.)"""
    if device.type != "cuda":
        return None
    mine = torch.cuda.get_rng_state(device)
    if ranks.world_size == 1:
        return [mine]
    states: list = [None] * ranks.world_size
    dist.all_gather_object(states, mine)
    return states


def restore_device_rng(states: list[torch.Tensor] | None, ranks: Ranks,
                       device: torch.device) -> None:
    """Give this rank's CUDA generator the state `device_rng_states` kept for its rank.

    Raises:
        ValueError: the checkpoint holds the states of another number of processes.
    """
    if states is None or device.type != "cuda":
        return
    if len(states) != ranks.world_size:
        raise ValueError(
            f"the checkpoint holds the CUDA random states of {len(states)} process(es), this "
            f"run has {ranks.world_size}: resume with as many processes as it was saved from")
    torch.cuda.set_rng_state(states[ranks.rank], device)
