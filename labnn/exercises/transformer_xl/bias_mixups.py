"""The slips of notebook 02's relative scores (Exercise 5) that give a term the wrong bias
on the query side: the position bias `v` in the content term (or both biases, or none),
the content bias `u` in the position term, one bias shared by every head (averaged or
summed over the heads), one number (the mean of all of it) or one number per head (any
reduction over the features, `u.mean(-1)`, `u.amax(-1)`: `per_head_number` fits it), or r
added to the keys; heads read from other heads (`mixed_heads`: u, v or r reversed,
`u.flip(0)`, one head's for all, `r[:, :1]`, rolled or mixed up); r^T made by a reshape
after any permutation of r (`reshaped_r`);
and the crash of a relative shift whose `F.pad` added more than one zero column (both
sides, `(1, 1)`) or that read T and S from axes 1 and 2 (`sizes_from_axes_1_2`, in
Exercise 4's shift or one inline in Exercise 5), or of a k^T on other axes or none (`k_axes`),
and torch's broadcast error of a bias on q's query axis (`u[None, None]`) or of a term made
[B, H, S, T] (`broadcast_axes`). Named for `labnn.exercises.transformer_xl.relative_scores`.

Dimension letters (the package legend): `B` batch, `H` heads, `T` queries, `S` keys,
`D_h` head width.
"""

from __future__ import annotations

import itertools
import re
from typing import Callable

import torch

from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import relative_shift
from labnn.exercises.grading import fail


def _choices(own: torch.Tensor, other: torch.Tensor, name: str, other_name: str,
             term: str) -> dict[str, tuple[torch.Tensor | int, str]]:
    """The biases a learner may add to the queries of one term, each with what it says
    of that term (empty for the right one)."""
    return {
        "right": (own, ""),
        "other": (other, f"the {term} term adds {other_name} to the queries where "
                         f"{name} belongs"),
        "both": (own + other, f"the {term} term adds both u and v to the queries"),
        "none": (0, f"the {term} term has no bias {name}"),
        "mean": (own.mean(0, keepdim=True), f"the {term} term shares one bias among the "
                                            f"heads, {name}.mean(0)"),
        "sum": (own.sum(0, keepdim=True), f"the {term} term shares one bias among the "
                                          f"heads, {name}.sum(0)"),
        "number": (own.mean().expand(1, own.size(-1)),
                   f"the {term} term adds one number, {name}.mean(), to every feature"),
        **{f"features {how}": (getattr(own, how)(-1, keepdim=True).expand_as(own),
                               f"the {term} term adds one number per head, "
                               f"{name}.{how}(-1), to every feature") for how in ("mean", "sum")},
    }


def bias_mixups(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
                v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with each term's query-side bias right, swapped for the other one,
    both, none, averaged or summed over the heads, one number, or one number per head
    (averaged or summed over the features), every wrong combination
    with its diagnosis.

    Args:
        q: `[B, H, T, D_h]`; k: `[B, H, S, D_h]`; r: `[S, H, D_h]`; u, v: `[H, D_h]`.

    Returns:
        `(scores [B, H, T, S], message)` pairs.
    """
    content = _choices(u, v, "u", "v (the position bias)", "content")
    position = _choices(v, u, "v", "u (the content bias)", "position")
    rt, scale = r.permute(1, 2, 0), q.size(-1) ** 0.5  # [H, D_h, S]
    slips = []
    for (c_bias, c_said), (p_bias, p_said) in itertools.product(content.values(),
                                                                  position.values()):
        said = "; ".join(s for s in (c_said, p_said) if s)
        if not said:
            continue
        bias_c = c_bias[:, None] if isinstance(c_bias, torch.Tensor) else 0
        bias_p = p_bias[:, None] if isinstance(p_bias, torch.Tensor) else 0
        scores = (q + bias_c) @ k.mT + relative_shift((q + bias_p) @ rt)
        slips.append((scores / scale,
                      f"{said}: u and v [H, D_h] hold one row per head, u for the content "
                      "keys k, v for the position keys r: (q + u[:, None]) k^T + "
                      "shift((q + v[:, None]) r^T), divided by sqrt(D_h)."))
    keys_plus_r = (q + u[:, None]) @ (k + r.transpose(0, 1)).mT  # r's row j on key j
    slips.append((keys_plus_r / scale,
                  "you added r to the keys, k + r, as absolute positions are added: r's row j "
                  "then meets key j whatever the query; r is by distance and has its own "
                  "product: (q + u[:, None]) k^T + shift((q + v[:, None]) r^T)."))
    return slips


_REDUCED = {"mean(-1)": lambda b: b.mean(-1), "sum(-1)": lambda b: b.sum(-1),
            "amax(-1)": lambda b: b.amax(-1), "amin(-1)": lambda b: b.amin(-1),
            "norm(dim=-1)": lambda b: b.norm(dim=-1)}


def per_head_number(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, r: torch.Tensor,
                    u: torch.Tensor, v: torch.Tensor) -> None:
    """Fail when `got` (scores `[B, H, T, S]`) adds to the queries of the content term, the
    position term or both one number per head on every feature, however u's (v's) row was
    reduced to it: the numbers are fitted per head by least squares on the entries a query
    may see, then named by the reduction that gives them, when one of `_REDUCED` does."""
    q, k, r, u, v, got = (x.detach().double() for x in (q, k, r, u, v, got))
    rt, ones, seen = r.permute(1, 2, 0), torch.ones_like(q), causal_mask(*got.shape[-2:])
    if not got[..., seen].isfinite().all():  # lstsq fails on a NaN; the checks after name it
        return
    right = {"u": (u[:, None] @ k.mT).expand_as(got),
             "v": relative_shift((v[:, None] @ rt).expand_as(got))}
    each = {"u": (ones @ k.mT), "v": relative_shift(ones @ rt)}  # one number's product
    rest = got * q.size(-1) ** 0.5 - q @ k.mT - relative_shift(q @ rt)
    for names in (("u",), ("v",), ("u", "v")):
        y = rest - sum(right[n] for n in right if n not in names)
        x = torch.stack([each[n] for n in names], -1).transpose(0, 1)[:, :, seen]
        x, y = x.flatten(1, 2), y.transpose(0, 1)[:, :, seen].flatten(1)[..., None]
        c = torch.linalg.lstsq(x, y).solution  # [H, len(names), 1]
        if not torch.allclose(x @ c, y, rtol=1e-4, atol=1e-4) or not c.abs().max() > 1e-6:
            continue
        said = []
        for n, numbers in zip(names, c[..., 0].unbind(1)):
            bias, term = (u, "content") if n == "u" else (v, "position")
            how = next((f"{n}.{how}" for how, reduce in _REDUCED.items()
                        if torch.allclose(reduce(bias), numbers, rtol=1e-4, atol=1e-5)),
                       f"a reduction of {n}'s row over its features")
            said.append(f"the {term} term adds one number per head, {how}, to every feature")
        fail(f"{'; '.join(said)}: u and v [H, D_h] hold one row per head, u for the content "
             "keys k, v for the position keys r: (q + u[:, None]) k^T + shift((q + "
             "v[:, None]) r^T), divided by sqrt(D_h).")


def padded_columns(run: Callable[[], object], err: Exception, what: str) -> None:
    """Name a shift that raised on a reshape after `F.pad` added more than one column to
    the last axis (`(1, 1)`: both sides): `run` reruns the learner's function silently
    with `F.pad` recording its padding."""
    if not isinstance(err, RuntimeError) or "is invalid for input of size" not in str(err):
        return
    functional, pads = torch.nn.functional, []
    pad = functional.pad

    def recording(input, pad_=None, *args, **kwargs):
        widths = kwargs.pop("pad", pad_)
        pads.append(tuple(widths))
        return pad(input, widths, *args, **kwargs)
    functional.pad = recording
    try:
        run()
    except Exception:
        pass
    finally:
        functional.pad = pad
    for widths in pads:
        left, right = widths[:2]
        if left + right < 2:
            continue
        if left and right:
            fail(f"{what}: F.pad(x, {widths}) pads a zero column on BOTH sides of the key "
                 "axis (its pairs are (left, right)): [..., T, S + 2] cannot be read as "
                 "[..., S + 1, T]. Pad one column, on the left only: F.pad(x, (1, 0)).")
        fail(f"{what}: F.pad(x, {widths}) pads {left + right} zero columns: [..., T, S + "
             f"{left + right}] cannot be read as [..., S + 1, T]. Pad one column, on the "
             "left: F.pad(x, (1, 0)).")


def index_slips(err: Exception, what: str, s: int) -> None:
    """Name a shift by indices that raised: a gather index without x's leading axes, or an
    index past the `s` columns of x (the future keys' t - 1 - i + j, unclamped)."""
    text = str(err)
    if any(f"{words} the same number of dimensions" in text for words in (
            "Index tensor must have", "input and indices should have")):  # take_along_dim
        fail(f"{what}: x.gather's index must have x's dimensions (torch.take_along_dim's "
             "too), [*lead, T, S]: expand your [T, S] index over the leading axes, "
             "idx.expand_as(x).")
    past = re.search(r"index (\d+) is out of bounds for dimension \d+ with size (\d+)", text)
    if past and int(past[2]) == s and int(past[1]) >= s:
        fail(f"{what}: an index into the S = {s} columns of x reaches {past[1]}: for a future "
             "key (j > M + i) the column T - 1 - i + j lies past the last one; those entries "
             "are masked later, so clamp the index, .clamp(max=s - 1), or wrap it, % s.")


def sizes_from_axes_1_2(err: Exception, what: str, shape: tuple) -> None:
    """Name a shift's crash on scores `[B, H, T, S]` (`shape`) reshaped to `[B, H, T + 1, H]`,
    the `[*lead, s + 1, t]` that T and S read from `x.size(1), x.size(2)` (H and T) give:
    Exercise 4's `relative_shift`, or one written inline in Exercise 5's scores."""
    b, h, t = shape[:3]
    if f"shape '[{b}, {h}, {t + 1}, {h}]' is invalid" in str(err):
        fail(f"{what}: a shift reshapes the scores [B, H, T, S] to [{b}, {h}, {t + 1}, {h}]"
             " = [*lead, s + 1, t] with t, s = x.size(1), x.size(2) (H and T here), sizes "
             "right for a 3-D x only: T and S are the LAST two axes, *lead, t, s = x.shape "
             "(or x.size(-2), x.size(-1)).")


def k_axes(run: Callable[..., object], k: torch.Tensor, want: torch.Tensor,
           einsum: bool) -> None:
    """Fail when the scores come out right (`run(k)`, the learner's function rerun with k
    replaced, or None) with k's axes permuted: a k^T taken on other axes than the last two
    (`k.T` reverses all four, `k.transpose(1, 2)` swaps heads and keys), or an einsum that
    reads k's axes in another order (`einsum`: the error was einsum's)."""
    for p in itertools.permutations(range(4)):
        got = run(k.permute(*p))
        if p != (0, 1, 2, 3) and isinstance(got, torch.Tensor) and got.shape == want.shape and (
                torch.allclose(got.detach(), want, rtol=1e-4, atol=1e-5)):
            right = f"(the scores come out right with k.permute{p} given instead)"
            if p == (0, 1, 3, 2) and not einsum:
                fail("k is used as it comes: (q + u) @ k meets q's D_h features with k's S "
                     "keys; the content term is (q + u[:, None]) @ k.mT (k^T: "
                     "k.transpose(-2, -1)).")
            if einsum:
                fail(f"k is [B, H, S, D_h], but your einsum reads its axes in another order "
                     f"{right}: give k's subscripts in its own order, e.g. "
                     "einsum('bhid,bhjd->bhij', q + u[:, None], k).")
            fail(f"k [B, H, S, D_h] is transposed on other axes than its last two {right}: "
                 "k.T reverses all four, k.transpose(1, 2) swaps heads and keys; k^T is "
                 "k.transpose(-2, -1), or k.mT.")


def broadcast_axes(err: Exception, q: torch.Tensor, k: torch.Tensor) -> None:
    """Name torch's broadcast error (`must match the size of tensor b ... at non-singleton
    dimension n`) of a bias met on q's query axis (`u[None, None]`, `u.unsqueeze(-1)`) or
    of a term made [B, H, S, T] added to one [B, H, T, S]."""
    found = re.search(r"tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at "
                      r"non-singleton dimension (\d)", str(err))
    if not found:
        return
    a, b, dim = map(int, found.groups())
    _, h, t, d = q.shape
    if dim == 2 and a == t and b in (h, d):
        how = "two leading axes, u[None, None]" if b == h else "a trailing axis, u.unsqueeze(-1)"
        fail(f"a tensor with {'H' if b == h else 'D_h'} = {b} met q's query axis T = {t} "
             f"(q [B, H, T, D_h]): u or v with "
             f"{how}? Give them one axis for the queries: q + u[:, None] ([H, 1, D_h]).")
    if dim in (2, 3) and {a, b} == {t, k.size(2)}:
        fail("a term of [B, H, S, T] (keys before queries: an einsum to '...->bhji', or a "
             "transpose?) met one of [B, H, T, S]: both are by query, then key: "
             "einsum('bhid,bhjd->bhij', q + u[:, None], k), and the position term's "
             "'bhid,rhd->bhir', shifted.")


_PARTS = {"u": ("content bias u", 0), "v": ("position bias v", 0),
          "r": ("position encodings r", 1)}  # each name's what, and its heads' axis


def _and(words: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join(filter(None, (", ".join(words[:-1]), words[-1])))


def _head_map(heads: tuple[int, ...]) -> tuple[str, str]:
    """How a map of heads `heads` (head h reads heads[h]) is made, as a kind of mistake and
    the expression of it, with `{n}` for the tensor and `{a}` for its heads' axis."""
    n = len(heads)
    if len(set(heads)) == 1:
        return f"head {heads[0]}", f"{{n}}[{{a}}{heads[0] or ''}:{heads[0] + 1}]"
    if heads == tuple(range(n))[::-1]:
        return "reversed", "{n}.flip({a})?"
    shift = next((s for s in range(1, n) if heads == tuple((h - s) % n for h in range(n))), 0)
    if shift:
        return f"rolled by {shift}", f"{{n}}.roll({shift}, {{a}})?"
    return f"read {list(heads)}", f"{{n}}[{{a}}{list(heads)}]"


def mixed_heads(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor, r: torch.Tensor,
                u: torch.Tensor, v: torch.Tensor, seen: torch.Tensor) -> None:
    """Fail when each head h of `got` (scores `[B, H, T, S]`, on the entries `seen`) is the
    scores of head h with another head's u, v or r (u[g], r[:, g]) and the heads so read
    are not 0..H-1: reversed (`u.flip(0)`), all one head's (`r[:, :1]`), rolled or mixed
    up, each named; arguments as `bias_mixups`."""
    got, heads, reads = got.detach(), range(u.size(0)), []
    for h in heads:
        fits = [g for g in itertools.product(heads, repeat=3) if torch.allclose(
            got[:, h][..., seen], (((q[:, h] + u[g[0]]) @ k[:, h].mT + relative_shift(
                (q[:, h] + v[g[1]]) @ r[:, g[2]].T)) / q.size(-1) ** 0.5)[..., seen],
            rtol=1e-4, atol=1e-5)]
        if len(fits) != 1:
            return
        reads.append(fits[0])
    kinds: dict[str, list[str]] = {}
    for name, read in zip(_PARTS, zip(*reads)):
        if read != tuple(heads):
            kind, expr = _head_map(read)
            kinds.setdefault(kind, []).append(
                expr.format(n=name, a=":, " * _PARTS[name][1] if "[" in expr else
                            _PARTS[name][1]))
    if kinds:
        said = [f"every head uses {kind}'s {_and([_PARTS[e[0]][0] for e in exprs])}"
                f" ({', '.join(exprs)})" if kind.startswith("head") else
                f"{_and([e[0] + chr(39) + 's' for e in exprs])} heads are {kind} "
                f"({', '.join(e.rstrip('?') for e in exprs)}{'?' * exprs[0].endswith('?')})"
                for kind, exprs in kinds.items()]
        fail(f"{'; '.join(said)}: head h's own are u[h], v[h] and r[:, h]; use each as it "
             "comes, (q + u[:, None]) k^T + shift((q + v[:, None]) r^T).")


def reshaped_r(q: torch.Tensor, k: torch.Tensor, r: torch.Tensor, u: torch.Tensor,
               v: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """The scores with r^T `[H, D_h, S]` made by a reshape after any permutation of r's
    axes (`r.permute(2, 0, 1).reshape(H, D_h, S)`, or `.reshape(H, S, D_h).mT`), each with
    its diagnosis; arguments as `bias_mixups`."""
    (s, h, d), slips = r.shape, []
    content, right = (q + u[:, None]) @ k.mT, r.permute(1, 2, 0)
    for order in itertools.permutations(range(3)):
        moved = r.permute(order)
        said = "" if order == (0, 1, 2) else f".permute({', '.join(map(str, order))})"
        for r_t, to in ((moved.reshape(h, d, s), "D_h, S)"), (moved.reshape(h, s, d).mT,
                                                              "S, D_h).mT")):
            if torch.equal(r_t, right):
                continue
            scores = content + relative_shift((q + v[:, None]) @ r_t)
            slips.append((scores / d ** 0.5,
                          f"r^T is made with reshape: r{said}.reshape(H, {to} regroups the "
                          "numbers in memory order, which mixes distances, heads and features; "
                          "reshape is not a transpose: move the axes, r.permute(1, 2, 0) "
                          "([H, D_h, S])."))
    return slips
