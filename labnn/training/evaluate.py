r"""Evaluation: the next-token loss of a language model over held-out text, read the way
the trainer reads it (`evaluate`) or as long streams segment by segment (`stream_loss`).

Dimension letters (the package legend): `B` batch, `T` tokens per row (a segment), `V`
vocabulary, `N` ids of a corpus.

Every model is called as `logits, state = model(x, state)`, past its door
(`past_the_door`): both functions check the ids of their corpus once, where they enter
(`labnn.data.batching.check_in_vocab`, one read back to the host), not every batch in the
model's `forward`. A model that carries a memory from one segment of a stream to the next
(Transformer-XL, both Feedback Transformers) also provides
`stream_logits(x, state, mem_len=...) -> (logits, state)` (XL lets an evaluation choose
how much it remembers; a feedback model's reach is fixed when it is built); `stream_loss`
reads any other model (the transformer, whose learned positions end with its window) one
segment at a time, alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from labnn.data.batching import (check_id_tensor, check_in_vocab, num_stream_batches,
                                 random_batch, stream_batch)
from labnn.nn.arguments import check_int
from labnn.nn.layers import evaluating, past_the_door

if TYPE_CHECKING:
    from labnn.training.trainer import TrainConfig


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy. Shape: logits `[B, T, V]`, targets `[B, T]` ->
    scalar."""
    # long: the models take int32 ids too, which cross_entropy refuses as targets
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten().long())


def mean_of(losses: list[torch.Tensor]) -> float:
    """The mean of scalar losses left on their device, read with one host synchronisation:
    summed in float64 in their order, as Python sums their floats (the same value; float32
    on Apple's MPS, which has no float64)."""
    wide = torch.float32 if losses[0].device.type == "mps" else torch.float64
    total = losses[0].to(wide)
    for loss in losses[1:]:
        total = total + loss.to(wide)
    return total.item() / len(losses)


def check_corpus(model: nn.Module, ids: torch.Tensor) -> None:
    """The door of `evaluate` and `stream_loss`: ids of a dtype the models take, each in
    the vocabulary of `model` (where its config names one: else its own `forward` checks
    each batch).

    Shape:
        ids `[N]`.
    """
    check_id_tensor(ids)  # a 1-D integer tensor
    check_in_vocab(ids, getattr(getattr(model, "config", None), "vocab_size", None))


def evaluate(
    model: nn.Module,
    ids: torch.Tensor,
    config: TrainConfig,
    device: torch.device | None = None,
) -> float:
    """Mean loss over `config.eval_iters` batches of `ids`, the same batches every time.

    With `config.stream` the model reads the first `eval_iters` contiguous batches (all
    of them when `ids` holds fewer) with its state carried; otherwise windows at offsets
    drawn from a generator seeded with `config.seed`. The losses stay on the device until
    the end (`mean_of`): one host synchronisation per evaluation, and one at the door
    (`check_corpus`), which spares the model's own scan of every batch's ids.
    """
    check_corpus(model, ids)
    return evaluate_checked_ids(model, ids, config, device)


@torch.no_grad()
def evaluate_checked_ids(
    model: nn.Module,
    ids: torch.Tensor,
    config: TrainConfig,
    device: torch.device | None = None,
) -> float:
    """`evaluate` less the check of its corpus, for ids checked where they entered (the
    `Trainer` checks its corpus once, not at every evaluation)."""
    device = device or next(model.parameters()).device
    losses, state = [], None
    b, t = config.batch_size, config.seq_len
    if config.stream:
        n = min(config.eval_iters, num_stream_batches(ids, b, t))
        batches = (stream_batch(ids, b, t, i) for i in range(n))
    else:
        g = torch.Generator().manual_seed(config.seed)
        batches = (random_batch(ids, b, t, g) for _ in range(config.eval_iters))
    call = past_the_door(model)
    with evaluating(model):
        for x, y in batches:
            if config.stream:
                logits, state = call(x.to(device), state)
            else:
                logits, _ = call(x.to(device))
            losses.append(lm_loss(logits, y.to(device)))  # read once, by mean_of
    return mean_of(losses)


def read_segment(model: nn.Module, x: torch.Tensor, state, mem_len: int | None):
    """One segment of a stream: through the model's `stream_logits` when it has one (its
    state carried, `mem_len` states remembered), else through `model(x)` alone (no
    state). Both past the model's door (`past_the_door`, its `stream_logits_checked_ids`):
    the ids of `x` are not scanned (`stream_loss` checks its corpus once).

    Shape:
        x `[B, T]` -> `(logits [B, T, V], state)`.
    """
    if getattr(model, "stream_logits", None) is None:
        if mem_len is not None:  # else silently ignored
            raise ValueError(f"mem_len must be None for a {type(model).__name__}, got "
                             f"{mem_len!r}: it reads each segment alone (no memory)")
        return past_the_door(model)(x)[0], None
    return past_the_door(model, "stream_logits")(x, state, mem_len=mem_len)


@torch.no_grad()
def stream_loss(
    model: nn.Module,
    ids: torch.Tensor,
    *,
    batch_size: int,
    seq_len: int,
    mem_len: int | None = None,
    skip: int = 0,
    max_batches: int | None = None,
) -> float:
    """Mean next-token loss over contiguous streams read segment by segment
    (`labnn.data.stream_batch`).

    A model with `stream_logits` carries its memory from segment to segment (a
    `TransformerXL` keeps `mem_len` states, default its own; a feedback model its
    `attn_len`, and `mem_len` must be None); any other model sees each segment alone
    (context fragmentation). The first `skip` segments are read but not scored, so
    that every memory length is scored on the same tokens.

    Shape:
        ids `[N]` -> a float.
    """
    n = num_stream_batches(ids, batch_size, seq_len)
    check_int("max_batches", max_batches, allow_none=True)
    n = n if max_batches is None else min(n, max_batches)
    check_int("skip", skip, low=0)
    if not skip < n:  # checked before the model is switched to eval mode
        raise ValueError(f"skip must be in [0, {n}) (segments available), got {skip!r}")
    check_corpus(model, ids)
    device = next(model.parameters()).device
    state, losses = None, []
    with evaluating(model):
        for i in range(n):
            x, y = (z.to(device) for z in stream_batch(ids, batch_size, seq_len, i))
            logits, state = read_segment(model, x, state, mem_len)
            if i >= skip:
                losses.append(lm_loss(logits, y))  # read once, by mean_of
    return mean_of(losses)
