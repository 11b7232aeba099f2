"""Sinusoidal position encodings (Vaswani et al. 2017), shared by the absolute and
relative models.

Dimension letters: `D` encoding width; `...` any leading shape of the positions.
"""

from __future__ import annotations

import math

import torch

from labnn.nn.arguments import int_error, is_int


def sinusoidal_encoding(positions: torch.Tensor, d: int) -> torch.Tensor:
    r"""Encode (possibly negative or fractional) positions as sines and cosines of
    geometric frequencies.

    $$PE(p)_{2i} = \sin\!\left(p / 10000^{2i/d}\right), \qquad
    PE(p)_{2i+1} = \cos\!\left(p / 10000^{2i/d}\right)$$

    Args:
        positions: positions or distances, any shape.
        d: encoding width, even.

    Shape:
        positions `[...]` -> `[..., D]`.
    """
    if not isinstance(positions, torch.Tensor):
        got = type(positions).__name__
        raise TypeError(f"positions must be a torch.Tensor, got {got}")
    if not is_int(d) or d <= 0 or d % 2:
        raise int_error(d)(f"d must be a positive even int, got {d!r}")
    even = torch.arange(0, d, 2, device=positions.device, dtype=torch.float32)  # 2i
    freqs = torch.exp(even * (-math.log(10000.0) / d))  # 1 / 10000^(2i/d)
    angles = positions.to(torch.float32)[..., None] * freqs  # [..., D/2]
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)
