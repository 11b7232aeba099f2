"""Cutting a long sequence of token ids into training batches.

Dimension letters: `N` ids in the corpus, `B` batch, `T` tokens per row.

Two batchers:

* `random_batch`: windows at random offsets, each on its own (plain transformers);
* `stream_batches`: `B` contiguous streams read left to right, so row `b` of batch
  `i + 1` continues row `b` of batch `i` — what models with memory (Transformer-XL,
  Feedback) need to carry state across batches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from labnn.nn.arguments import check_int, is_int, is_number


def _check(ids: torch.Tensor, batch_size: int, seq_len: int) -> None:
    """Raise a clear error unless `ids` is a 1-D integer tensor and the sizes are
    positive ints."""
    check_id_tensor(ids)
    check_int("batch_size", batch_size)
    check_int("seq_len", seq_len)


def check_id_tensor(ids: torch.Tensor, name: str = "ids") -> None:
    """Raise a clear error unless `ids` (called `name` in it) is a 1-D integer tensor."""
    integer = isinstance(ids, torch.Tensor) and not (
        ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
    if not integer or ids.dim() != 1:
        got = type(ids).__name__
        if isinstance(ids, torch.Tensor):
            got = f"{ids.dtype} {list(ids.shape)}"
        raise TypeError(f"{name} must be a 1-D integer tensor, got {got}")


def check_in_vocab(ids: torch.Tensor, vocab_size: int | None, name: str = "ids") -> None:
    """Raise a clear error unless `ids` holds ids of a dtype the models take
    (`torch.long` or `torch.int32`), each in `[0, vocab_size)` (when given): the check of
    a corpus where it enters (the `Trainer`, `evaluate`, `stream_loss`), one read back to
    the host for all of it, so that the batches cut from it go to a model past its own
    scan of the ids (its `forward_checked_ids`).

    Shape:
        ids `[N]`.
    """
    if ids.dtype not in (torch.long, torch.int32):
        raise TypeError(f"{name} must hold torch.long (or torch.int32) ids, got {ids.dtype}: "
                        "convert them with .long()")
    if vocab_size is None or ids.numel() == 0:
        return
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one read for both ends
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} hold ids in [{low}, {high}], outside the model's "
                         f"vocabulary [0, {vocab_size})")


def train_val_split(
    ids: torch.Tensor, val_fraction: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """First `1 - val_fraction` of the ids for training, the rest for validation (no
    shuffling: text is ordered)."""
    check_id_tensor(ids)
    if not is_number(val_fraction) or not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    # rounded first: 10 * (1 - 0.8) is 1.9999999999999996 in floats, and 2 ids are meant
    n = math.floor(round(len(ids) * (1 - val_fraction), 6))
    if n == 0 or n == len(ids):
        raise ValueError(
            f"ids hold {len(ids)} tokens: too few to split with "
            f"val_fraction={val_fraction} "
            "(one part would be empty)"
        )
    return ids[:n], ids[n:]


def random_batch(
    ids: torch.Tensor,
    batch_size: int,
    seq_len: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of windows at random offsets; targets are the inputs shifted by one.

    Shape:
        ids `[N]` -> x `[B, T]`, y `[B, T]`.
    """
    _check(ids, batch_size, seq_len)
    if len(ids) <= seq_len:
        raise ValueError(f"ids hold {len(ids)} tokens, need more than seq_len={seq_len}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__} (to seed one: "
                        "torch.Generator().manual_seed(seed))")
    starts = torch.randint(len(ids) - seq_len, (batch_size,), generator=generator)
    offsets = starts[:, None] + torch.arange(seq_len + 1)  # [B, T + 1]
    rows = ids[offsets]
    return rows[:, :-1], rows[:, 1:]


def num_stream_batches(ids: torch.Tensor, batch_size: int, seq_len: int) -> int:
    """How many batches one pass of `stream_batches` yields."""
    _check(ids, batch_size, seq_len)
    n = (len(ids) - 1) // batch_size // seq_len
    if n == 0:
        raise ValueError(
            f"ids hold {len(ids)} tokens: too few for {batch_size} streams of at least "
            f"seq_len={seq_len} + 1"
        )
    return n


def stream_batch(
    ids: torch.Tensor, batch_size: int, seq_len: int, index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch `index` of one pass of `stream_batches` (for resuming mid-pass).

    Shape:
        ids `[N]` -> x `[B, T]`, y `[B, T]`.
    """
    n = num_stream_batches(ids, batch_size, seq_len)
    if not is_int(index) or not 0 <= index < n:
        raise ValueError(f"index must be an int in [0, {n}), got {index!r}")
    stream_len = (len(ids) - 1) // batch_size
    streams = ids[: batch_size * stream_len + 1]
    starts = torch.arange(batch_size) * stream_len + index * seq_len
    offsets = starts[:, None] + torch.arange(seq_len + 1)
    rows = streams[offsets]
    return rows[:, :-1], rows[:, 1:]


def stream_batches(
    ids: torch.Tensor, batch_size: int, seq_len: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, bool]]:
    """One pass over `ids` as `batch_size` contiguous streams.

    Yields `(x, y, reset)`; `reset` is True on the first batch, where any carried memory
    must be dropped. Row `b` of batch `i + 1` starts exactly where row `b` of batch `i`
    ended.

    Shape:
        ids `[N]` -> x `[B, T]`, y `[B, T]`.
    """
    for i in range(num_stream_batches(ids, batch_size, seq_len)):
        x, y = stream_batch(ids, batch_size, seq_len, i)
        yield x, y, i == 0
