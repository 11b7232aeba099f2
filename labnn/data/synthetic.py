"""Small synthetic tasks that isolate one ability of a model.

Dimension letters: `N` examples, `T` tokens per example.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import is_int


def order_task(
    n: int,
    seq_len: int = 12,
    vocab_size: int = 8,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences holding token 1 and token 2 once each among filler tokens; label 1 iff
    1 comes before 2.

    Every sequence has the same multiset of tokens as its mirror image with opposite
    label, so a model that ignores order (mean pooling without positions) cannot beat
    chance, while one that sees positions can.

    Args:
        n: number of examples.
        seq_len: tokens per example (at least 2).
        vocab_size: ids; 0 is unused, 1 and 2 are the markers, the rest are fillers (at
            least 4).
        generator: random stream.

    Shape:
        x `[N, T]` (long), y `[N]` (long, 0 or 1).
    """
    if not all(is_int(v) for v in (n, seq_len, vocab_size)):
        raise TypeError(
            f"n, seq_len and vocab_size must be ints, got n={n!r}, seq_len={seq_len!r}, "
            f"vocab_size={vocab_size!r}"
        )
    if seq_len < 2 or vocab_size < 4 or n <= 0:
        raise ValueError(
            f"need n > 0, seq_len >= 2 and vocab_size >= 4, got n={n}, "
            f"seq_len={seq_len}, vocab_size={vocab_size}"
        )
    x = torch.randint(3, vocab_size, (n, seq_len), generator=generator)
    pos = torch.rand(n, seq_len, generator=generator).argsort(dim=1)[
        :, :2
    ]  # two distinct positions
    rows = torch.arange(n)
    x[rows, pos[:, 0]] = 1
    x[rows, pos[:, 1]] = 2
    y = (pos[:, 0] < pos[:, 1]).long()
    return x, y
