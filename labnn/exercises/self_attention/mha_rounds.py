"""Rounds of notebook 01's Exercise 5 (multi-head attention) with other modules and dtypes
than the check's float32 `MultiHeadAttention(D, H)`: float64 (the one dtype rule), a module
whose queries and keys make a future key score 200 above the allowed ones (the mask applied
after the softmax, then renormalised), float16 and bfloat16 (`half_rounds`: a fill that
does not fit them, an eps they lose, the values), one whose every score lies near -1e5 (a finite
fill of the masked scores above that), a module without biases (`bias=False`, as
`TransformerConfig(bias=False)` builds it), one with dropout 0.5 in eval mode (`F.dropout`'s
`training=True` default), and a module whose weights change between two
calls, as a training step changes them; and `expect_mask_used`, mask=None and a padding
mask (not causal): a mask ignored, or None turned into a causal mask, named.

Dimension letters (the package legend): `B` batch, `T` tokens, `D` width, `H` heads,
`D_h` head width; masks `[T, T]`, True = may attend.
"""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch

from labnn.exercises.grading import (call, close, expect_close, expect_like, expect_tensor,
                                     fail, first_line, first_position)
from labnn.exercises.self_attention.half_rounds import expect_half_rounds
from labnn.exercises.self_attention.multi_head_order_slips import expect_mha_float64
from labnn.exercises.self_attention.padding_rounds import (expect_all_false_mha,
                                                          expect_none_unmasked)
from labnn.exercises.self_attention.score_clamps import expect_unclamped
from labnn.exercises.self_attention.softmax_mask_slips import DIAGONAL, with_diagonal
from labnn.exercises.self_attention.zero_scores import expect_mha_zero_score
from labnn.exercises.grading.slips import MASK_NONE_CAUSAL
from labnn.exercises.self_attention.masked_attention import SIZES
from labnn.nn.attention import MultiHeadAttention, causal_mask

WHAT = "multi_head_attention(x, mha, mask)"


def expect_more_rounds(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                       mask: torch.Tensor) -> None:
    """The rounds of this module for an answer right on the check's float32 module: the
    module changed between calls first, then the others in the order above."""
    expect_weights_read(fn, x, mask)  # first: a cache keyed by id(mha) meets other modules
    expect_mha_float64(fn, mha, x, mask)
    empty = mask.index_fill(0, torch.tensor([2]), False)  # query 2 may attend no key

    def reference(dtype: torch.dtype) -> torch.Tensor:
        with torch.no_grad():  # the module and x rounded to dtype, then computed in float32
            return copy.deepcopy(mha).to(dtype).float()(x.detach().to(dtype).float(), empty)[0]

    expect_future_far_above(fn, mha, x, mask)  # before float16: a mask applied after the
    # softmax, then renormalised by a sum clamped to 1e-12 (0 in float16), is named here
    expect_half_rounds(fn, WHAT, lambda dtype: (x.detach().to(dtype),
                                                copy.deepcopy(mha).to(dtype), empty.clone()),
                       reference, empty=(2,))
    expect_future_far_above(fn, mha, x, mask, level=1e12)
    expect_fill_far_below(fn, mha, x, mask)
    expect_without_bias(fn, mha, x, mask)
    expect_no_dropout_in_eval(fn, mha, x, mask)
    expect_all_false_mha(fn, mha, x)  # a batch of pure padding: no key allowed at all


def expect_future_far_above(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                            mask: torch.Tensor, level: float = 200.0) -> None:
    """Run `fn` with a copy of `mha` whose every head scores the last token 200 above the
    others for every query (its queries a constant, its keys feature 0 of x, which only
    the last token has): with a causal mask the last token is masked for all queries
    but itself, and a softmax taken before masking (then renormalised) keeps nothing of
    the allowed keys there. At `level` 1e12 (float64): a row's max over every key subtracted
    before a finite fill leaves the allowed scores below that fill (`_shifted_then_filled`)."""
    if level > 200:
        return _shifted_then_filled(fn, mha, x, mask, level)
    d, dh = x.size(-1), mha.d_head
    far = copy.deepcopy(mha)
    x2 = x.detach().clone()
    x2[..., 0] = 0.0
    x2[:, -1, 0] = 1.0
    with torch.no_grad():
        far.qkv.weight[: 2 * d].zero_()
        far.qkv.bias[: 2 * d].zero_()
        far.qkv.bias[0:d:dh] = 10.0  # every head's query: 10 in its first feature
        far.qkv.weight[d:2 * d:dh, 0] = 20.0 * math.sqrt(dh)  # its key: 20 sqrt(D_h) x_0
        want = far(x2, mask)[0]
    what = f"{WHAT} with the last token scoring 200 above the others (masked for them)"
    got = expect_tensor(call(fn, what, x2.clone(), far, mask.clone()), WHAT)
    expect_like(got, want, what)
    if close(got.detach(), want):
        return
    expect_mha_zero_score(got, what, x2, far, mask)  # the other keys are 0: so their scores
    off = ~torch.isclose(got.detach(), want, atol=1e-5, rtol=1e-4)
    fail(f"{what} gives other values (at {first_position(off, 'b i d')}): a softmax over "
         "every key (or one max for the whole tensor) loses the allowed keys there, their "
         "exp underflowing next to the masked key's. Mask the scores before the softmax: "
         "masked_fill(~mask, float('-inf')).")


def _shifted_then_filled(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                         mask: torch.Tensor, level: float) -> None:
    """`expect_future_far_above`'s module in float64, the last token scoring `level` above
    the others: fail when the masked keys take all the weight."""
    d, dh = x.size(-1), mha.d_head
    far, x2 = copy.deepcopy(mha).double(), x.detach().double()
    x2[..., 0] = 0.0
    x2[:, -1, 0] = 1.0
    with torch.no_grad():
        far.qkv.weight[: 2 * d].zero_()
        far.qkv.bias[: 2 * d].zero_()
        far.qkv.bias[0:d:dh] = 10.0
        far.qkv.weight[d:2 * d:dh, 0] = level / 10.0 * math.sqrt(dh)
        b, t, _ = x2.shape  # each row's weight spread over its masked keys (the last
        w = (~mask).double()  # key's, where none is masked), as a finite fill gives
        w[mask.all(-1), -1] = 1.0
        v = far.qkv(x2)[..., 2 * d:].view(b, t, mha.n_heads, dh).transpose(1, 2)
        merged = (w / w.sum(-1, keepdim=True) @ v).transpose(1, 2).reshape(b, t, d)
        wrong = far.out_proj(merged)
    try:
        got = fn(x2.clone(), far, mask.clone())
    except Exception:
        return  # the learner's code, rerun: the rounds that follow report it
    if isinstance(got, torch.Tensor) and close(got.detach(), wrong):
        said = f"{level:.0e}".replace("e+", "e")
        fail(f"{WHAT} with the last token scoring {said} above the others (masked for "
             "them) gives the masked keys all the weight: you subtracted the row's max over "
             "every key, the masked one too, then filled with a finite number, which now lies "
             "above the allowed scores. Fill with float('-inf'), or take the max after "
             "masking.")


def expect_without_bias(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                        mask: torch.Tensor) -> None:
    """Run `fn` with a `MultiHeadAttention(D, H, bias=False)`: its `qkv.bias` and
    `out_proj.bias` are None, which an answer adding them by hand cannot take."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        plain = MultiHeadAttention(x.size(-1), mha.n_heads, bias=False).eval()
    with torch.no_grad():
        want = plain(x, mask)[0]
    what = f"{WHAT} with mha = MultiHeadAttention({x.size(-1)}, {mha.n_heads}, bias=False)"

    def no_bias(err: Exception) -> None:
        if isinstance(err, TypeError) and "NoneType" in str(err):
            fail(f"{what} raised {type(err).__name__} ({first_line(err, 70)}): a module built "
                 "with bias=False has mha.qkv.bias = None; call the layers, mha.qkv(x) and "
                 "mha.out_proj(y) (or F.linear(x, w, b), which takes b = None).")

    got = expect_tensor(call(fn, what, x.detach().clone(), plain, mask.clone(),
                             diagnose=no_bias), WHAT)
    expect_like(got, want, what)
    expect_close(got, want, what, dims="b i d")


def expect_no_dropout_in_eval(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                              mask: torch.Tensor) -> None:
    """Run `fn` with the module given dropout 0.5 and put in eval mode, as a trained model
    is evaluated: its output is the one without dropout. `F.dropout(w, p)` defaults to
    training=True and drops weights here too (the check's own module has no dropout)."""
    dropping = copy.deepcopy(mha).eval()
    dropping.dropout, dropping.out_dropout.p = 0.5, 0.5
    with torch.no_grad():
        want = dropping(x, mask)[0]
    what = f"{WHAT} with a module of dropout 0.5 in eval mode"
    got = expect_tensor(call(fn, what, x.detach().clone(), dropping, mask.clone()), WHAT)
    if got.shape == want.shape and not close(got.detach(), want):
        fail(f"{what}: your result differs from mha(x, mask): F.dropout defaults to "
             "training=True and drops weights in eval mode too; pass training=mha.training "
             "(or leave dropout out).")


def _scores(x: torch.Tensor, mha: MultiHeadAttention):
    """The scaled scores `[B, H, T, T]` of `mha` on `x`, and `after`: the weights ->
    the module's output (times the values, heads merged, `out_proj`)."""
    b, t, d = x.shape
    q, k, v = (z.view(b, t, mha.n_heads, mha.d_head).transpose(1, 2)
               for z in mha.qkv(x).chunk(3, dim=-1))
    return (q @ k.transpose(-2, -1) / math.sqrt(mha.d_head),
            lambda w: mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d)))


def _filled(x: torch.Tensor, mha: MultiHeadAttention, mask: torch.Tensor,
            fill: float) -> torch.Tensor:
    """`mha(x, mask)[0]` with the masked scores filled with `fill` (empty rows zeroed)."""
    scores, after = _scores(x, mha)
    w = scores.masked_fill(~mask, fill).softmax(-1)
    return after(w.masked_fill(~mask.any(-1, keepdim=True), 0.0))


def expect_fill_far_below(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor,
                          mask: torch.Tensor) -> None:
    """Run `fn` in float64 with a copy of `mha` whose every score is shifted by -1e5 (feature
    0 of every head's queries and keys a constant: the same shift for a whole row, which
    leaves the softmax unchanged): masked scores filled with a finite number above that
    (-1e4, float16's -65504) win the softmax there, and the fill is named."""
    far, dh = copy.deepcopy(mha).double(), mha.d_head
    d = x.size(-1)
    with torch.no_grad():
        for rows, value in ((slice(0, d, dh), 100.0), (slice(d, 2 * d, dh), -1e3 * dh ** 0.5)):
            far.qkv.weight[rows] = 0.0
            far.qkv.bias[rows] = value  # every score: 100 * -1e3 sqrt(D_h) / sqrt(D_h)
        want = far(x.double(), mask)[0]
    what = f"{WHAT} with every score shifted by -1e5 (float64)"
    got = expect_tensor(call(fn, what, x.detach().double(), far, mask.clone()), WHAT)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or close(got, want):
        return
    with torch.no_grad():
        if any(close(got, _filled(x.double(), far, mask, f)) for f in (-1e4, -3e4, -65504.0)):
            fail(f"{what}, a constant per query, which leaves the softmax unchanged, gives the "
                 "masked keys the weight: your finite fill of the masked scores lies above "
                 "those scores. Fill with float('-inf') (or torch.finfo(s.dtype).min).")
        scores, after = _scores(x.double(), far)
        expect_unclamped(got, scores, mask, what, after)
    expect_close(got, want, what, dims="b i d")


def expect_weights_read(fn: Callable, x: torch.Tensor, mask: torch.Tensor) -> None:
    """Call `fn` with a module, change the module's weights in place (as `optimizer.step()`
    does), call it again: an answer that kept copies of the weights from the first call
    (a dict keyed by the module) gives the old result, and is named."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(13)
        module = MultiHeadAttention(x.size(-1), 3).eval()
    what = f"{WHAT} with mha = MultiHeadAttention({x.size(-1)}, 3)"
    before = copy.deepcopy(module)
    got = expect_tensor(call(fn, what, x.detach().clone(), module, mask.clone()), WHAT)
    with torch.no_grad():
        if not close(got, before(x, mask)[0]):  # right on every module so far
            fail(f"{what}, a new module, gives other values, though right for the modules "
                 "before: does your function keep weights between calls (a dict keyed by "
                 "the module or id(mha))? Read mha.qkv and mha.out_proj on every call.")
        for p in module.parameters():
            p.mul_(-0.5).add_(0.1)
        want = module(x, mask)[0]
        stale = [before(x, mask)[0]]  # every weight old, or those of one layer
        for layer in ("qkv", "out_proj"):
            mixed = copy.deepcopy(module)
            setattr(mixed, layer, getattr(before, layer))
            stale.append(mixed(x, mask)[0])
    what += " after its weights changed in place"
    got = expect_tensor(call(fn, what, x.detach().clone(), module, mask.clone()), WHAT)
    if any(close(got, old) for old in stale) and not close(got, want):
        fail(f"{what} (as optimizer.step() changes them) gives the result of old "
             "weights: your function keeps them between calls (a dict keyed by the module or "
             "id(mha)?); read mha.qkv and mha.out_proj on every call.")
    expect_close(got, want, what, dims="b i d")


def _unscaled(mha: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """`mha(x)[0]` with the scores not divided by sqrt(D_h): its queries multiplied by it."""
    plain, d = copy.deepcopy(mha), x.size(-1)
    with torch.no_grad():
        plain.qkv.weight[:d] *= math.sqrt(mha.d_head)
        if plain.qkv.bias is not None:
            plain.qkv.bias[:d] *= math.sqrt(mha.d_head)
        return plain(x)[0]


def expect_mask_used(fn: Callable, mha: MultiHeadAttention, x: torch.Tensor) -> None:
    """Call `fn` with mask=None and with a padding mask (not causal): an answer that
    ignores `mask`, or turns None into a causal mask, is named."""
    t = x.size(-2)
    pad = torch.ones(t, t, dtype=torch.bool)
    pad[:, -2:] = False  # the last two keys are padding
    with torch.no_grad():
        causal = mha(x, causal_mask(t))[0]
    for mask, said in ((pad, "a padding mask"), (None, "mask=None")):
        what = f"multi_head_attention(x, mha, {'None' if mask is None else 'mask'})"
        got = expect_tensor(call(fn, f"{what} with {said}", x.clone(), mha, mask,
                                 advice="mask=None means no mask: every query attends "
                                        "every key"), what)
        with torch.no_grad():
            want = mha(x, mask)[0]
        if close(got, causal) and not close(got, want):
            fail(MASK_NONE_CAUSAL if mask is None else
                 "with a padding mask your answer gives the causal mask's result, the mask of "
                 "the check's earlier calls: the mask argument is ignored (a causal mask "
                 "always), or an earlier call's mask is kept between calls (a cache by "
                 "shape?). Use the mask each call is given.")
        if mask is None:
            expect_none_unmasked(got, lambda m: mha(x, m)[0].detach(), t, t)
        if mask is None and close(got, _unscaled(mha, x)):  # right with a mask, earlier
            fail("with mask=None your scores are not divided by sqrt(D_h), with a mask they "
                 "are: the scale sits under `if mask is not None:`. Divide by sqrt(D_h) on "
                 "every call, before that `if`; only the mask belongs under it.")
        if mask is not None and close(got, mha(x, with_diagonal(mask))[0].detach()):
            fail(f"{what}: {DIAGONAL}")
        for op in ("&", "|") if mask is not None else ():  # | : padding keys attended
            both = mask & causal_mask(t) if op == "&" else mask | causal_mask(t)
            if close(got, mha(x, both)[0].detach()):
                fail(f"{what}: the mask is combined with a causal mask (mask {op} causal): use "
                     "the mask it is given as it is; it is causal only when the caller says so.")
        expect_like(got, want, what, sizes=SIZES)
        expect_close(got, want, f"{what} ({said})", dims="b i d")
