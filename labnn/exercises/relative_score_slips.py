"""The slips of notebook 02's relative scores that put the biases on the wrong side: `u`
added to the keys, `v` added to the position encodings `r`, either left out, or the two
swapped; named for `labnn.exercises.relative_scores`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `S` keys,
`D_h` head width.
"""

from __future__ import annotations

import itertools

import torch

from labnn.xl.relative_attention import relative_shift

QUERY, KEY, OUT = "on the query side", "on the key side", "left out"
_DONE = {("u", KEY): "adds u to the keys (k + u)", ("u", OUT): "leaves u out",
         ("v", KEY): "adds v to r (r + v)", ("v", OUT): "leaves v out"}


def bias_side_slips(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
                    v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with the content bias `u` and the position bias `v` each on the query
    side (right), on the key side (added to `k`, or to `r`) or left out, every wrong
    combination with its diagnosis; then the two biases swapped.

    Args:
        q: `[B, H, T, D_h]`; k: `[B, H, S, D_h]`; r: `[S, H, D_h]`; u, v: `[H, D_h]`.

    Returns:
        `(scores [B, H, T, S], message)` pairs.
    """
    by_key = {QUERY: (q + u[:, None]) @ k.mT, KEY: q @ (k + u[:, None]).mT, OUT: q @ k.mT}
    by_distance = {QUERY: (q + v[:, None]) @ r.permute(1, 2, 0),
                   KEY: q @ (r + v).permute(1, 2, 0), OUT: q @ r.permute(1, 2, 0)}
    scale = q.size(-1) ** 0.5
    slips = []
    for side_u, side_v in itertools.product(by_key, by_distance):
        done = [_DONE[bias] for bias in (("u", side_u), ("v", side_v)) if bias in _DONE]
        if done:
            scores = (by_key[side_u] + relative_shift(by_distance[side_v])) / scale
            slips.append((scores, "u and v are query-side biases: (q + u) k^T and "
                                  "(q + v) r^T, with u[:, None] and v[:, None]; yours "
                                  f"{' and '.join(done)}."))
    swapped = (q + v[:, None]) @ k.mT + relative_shift((q + u[:, None]) @ r.permute(1, 2, 0))
    slips.append((swapped / scale,
                  "the biases are swapped: u (the content bias) goes with the content "
                  "keys k, v (the position bias) with the position keys r: (q + u) k^T "
                  "+ shift((q + v) r^T)."))
    return slips
