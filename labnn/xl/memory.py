r"""The memory of Transformer-XL: what each layer keeps from one segment for the next,
and the mask under which reading segment by segment equals one pass over the whole text
(with relative positions).

Dimension letters (the package legend): `B` batch, `T` tokens of the current segment,
`M` remembered positions, `D` model width; `n` a text's length in `segment_mask`.

Each layer keeps the hidden states it received for the last `mem_len` positions,
detached, so no gradient reaches an earlier segment. The next segment's queries attend
to them as to extra keys and values before their own.
"""

from __future__ import annotations

import torch

from labnn.nn.arguments import check_int


def check_mem_len(mem_len: int) -> None:
    """Raise a clear error unless `mem_len` is a non-negative int."""
    check_int("mem_len", mem_len, low=0)


def update_memory(
    mem: torch.Tensor | None, h: torch.Tensor, mem_len: int
) -> torch.Tensor:
    r"""The next memory of one layer: the last `mem_len` of its remembered and new input
    states, detached.

    $$m_{\tau+1} = \mathrm{SG}\big([m_\tau \circ h_\tau]_{-\mathrm{mem\_len}:}\big)$$

    `SG` (stop-gradient, `detach`) keeps backpropagation inside the current segment.

    Shape:
        mem `[B, M, D]` (or None), h `[B, T, D]` -> `[B, min(M + T, mem_len), D]`.
    """
    check_mem_len(mem_len)
    if not isinstance(h, torch.Tensor) or h.dim() != 3:
        got = list(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
        raise ValueError(f"h must be the layer's input states [B, T, D], got {got}")
    if mem is not None and (not isinstance(mem, torch.Tensor) or mem.dim() != 3
                            or (mem.size(0), mem.size(2)) != (h.size(0), h.size(2))):
        got = list(mem.shape) if isinstance(mem, torch.Tensor) else type(mem).__name__
        raise ValueError(f"mem has shape {got}, expected [B={h.size(0)}, M, "
                         f"D={h.size(2)}] like h {list(h.shape)} (or None)")
    if mem is not None and (mem.dtype, mem.device) != (h.dtype, h.device):
        raise ValueError(f"mem is {mem.dtype} on {mem.device}, but h is {h.dtype} on "
                         f"{h.device}")
    states = h if mem is None else torch.cat([mem, h], dim=1)
    first = states.size(1) - min(mem_len, states.size(1))  # [:, -0:] keeps everything
    return states[:, first:].detach()


def segment_mask(
    n: int, seg_len: int, mem_len: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    r"""The mask under which one pass over `n` tokens equals reading them segment by
    segment with memory, for a model with relative positions: absolute ones restart at 0
    in every segment (`XLConfig(positions="absolute")`), and one pass numbers 0 to n - 1.

    Query $i$ sees key $j$ iff $\mathrm{start}(i) - \mathrm{mem\_len} \le j \le i$,
    where $\mathrm{start}(i) = \lfloor i / \mathrm{seg\_len} \rfloor \cdot
    \mathrm{seg\_len}$ is the first position of $i$'s segment: its own segment up to
    itself, plus the `mem_len` positions before the segment.

    Returns:
        `[n, n]` boolean tensor, True = may attend.
    """
    check_int("n", n, low=0)
    check_int("seg_len", seg_len)
    check_mem_len(mem_len)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def check_mems(mems: list[torch.Tensor] | None, n_layers: int, x: torch.Tensor) -> None:
    """Raise a clear error unless `mems` fits `x [B, T, D]`: one `[B, M, D]` per
    layer, same `M`, device and dtype."""
    if mems is None:
        return
    n = n_layers
    if hasattr(mems, "_fields"):  # a NamedTuple: the XLCache of `step`
        raise ValueError(f"mems is a {type(mems).__name__}, the cache step() returns: "
                         "forward takes the list of memories forward returns, one [B, M, D] "
                         "per layer; go on decoding with step(tokens, cache), or start "
                         "forward with mems=None")
    if not isinstance(mems, (list, tuple)) or len(mems) != n:
        got = len(mems) if isinstance(mems, (list, tuple)) else type(mems).__name__
        raise ValueError(
            f"mems must be a list of {n} tensors (one per layer), got {got}"
        )
    b, _, d = x.shape
    first = mems[0]
    shaped = isinstance(first, torch.Tensor) and first.dim() == 3
    m = first.size(1) if shaped else None
    for i, mem in enumerate(mems):
        if (not isinstance(mem, torch.Tensor) or mem.dim() != 3 or mem.shape[0] != b
                or mem.shape[1:] != (m, d)):
            is_tensor = isinstance(mem, torch.Tensor)
            got = list(mem.shape) if is_tensor else type(mem).__name__
            # the others follow mems[0]'s M; mems[0] itself can be any length
            length, like = ("M", "the tokens") if i == 0 else (f"M={m}", "the tokens and mems[0]")
            raise ValueError(
                f"mems[{i}] has shape {got}, expected [B={b}, {length}, D={d}] like {like}")
        if mem.device != x.device or mem.dtype != x.dtype:
            raise ValueError(
                f"mems[{i}] is {mem.dtype} on {mem.device}, but the model runs "
                f"{x.dtype} on {x.device}"
            )
