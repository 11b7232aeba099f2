"""Slips of notebook 04's key/value sharing exercises that take more than one line to
recognise: keys cut from the projection in pieces of the wrong size (`split(2, -1)`),
heads other than `n_heads`, a module converted in place (`kv.float()`), a float32 tensor
meeting the float64 modules, a fresh LayerNorm made in the answer, the memory vector
normalized another way than norm(m) (over the batch axis, never centred, norm twice, ...),
modules other than the arguments (the notebook's own), keys or values projected from
another input than norm(m) or mixed within a memory vector, a `.view` of a half that is not
contiguous, one weight gradient per step (or example) never summed.

Dimension letters as in `kv_sharing`: `T` steps, `B` batch, `H` heads,
`D` model width, `D_h` head width, `D_in`/`D_out` the widths of the Linear layer.

Every helper fails (`fail`) with one sentence naming the slip and the fix, or returns
when the answer does not show it.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from typing import Iterator

import torch
from torch import nn

from labnn.exercises.grading import close, describe_shape, fail, name_axes
from labnn.exercises.grading.reference_calls import closure_values, globals_read
from labnn.exercises.grading.slips import gives
from labnn.exercises.kv_sharing_stack.custom_backward import _randn


def expect_key_width(k: torch.Tensor, flat: torch.Tensor, heads: int, fn=None) -> None:
    """Fail when `k` holds the first w != D of kv(norm(m))'s 2D outputs (`flat` `[B, 2D]`):
    the outputs were cut in pieces of size w (`y.split(w, -1)`), not in two halves; or,
    where `fn`'s source shows no split, sliced at a width written as a number."""
    batch, d = flat.size(0), flat.size(1) // 2
    if k.dim() == 0 or k.size(0) != batch or k.numel() % batch:
        return
    w = k.numel() // batch
    if w in (0, d) or w >= 2 * d or not close(k.detach().reshape(batch, w), flat[:, :w]):
        return
    try:
        sliced = fn is not None and "split" not in inspect.getsource(fn)
    except (OSError, TypeError):
        sliced = False
    if sliced:
        fail(f"k holds the first {w} of kv(norm(m))'s 2D = {2 * d} outputs, not the first "
             f"D = {d}, the keys: cut at D = m.size(-1), never a width written as a number "
             "(the notebook's model has other sizes), or use .chunk(2, -1).")
    # a 2 may be H or "two pieces": said as the number, right either way
    letter = None if w == 2 else {heads: "H", d // heads: "D_h"}.get(w)
    size = f"{letter} = {w}" if letter else str(w)
    arg = letter or w
    fail(f"k holds the first {w} of kv(norm(m))'s 2D = {2 * d} outputs, not the first "
         f"D = {d}, the keys (split({arg}, -1) makes pieces of size {size}, not {arg} "
         "pieces): to cut kv(norm(m)) into keys and values use .chunk(2, -1), "
         "two halves of D, each viewed as [B, H, D_h].")


def split_unpacked(err: Exception, fn) -> None:
    """`k, v = y.split(2, -1)`: D pieces of size 2 where two halves were meant, read off
    Python's unpacking error and `fn`'s source."""
    if not (isinstance(err, ValueError) and "too many values to unpack" in str(err)):
        return
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return
    if re.search(r"split\((?:[^\n]*,\s*)?2\s*[,)]", source):
        fail("k, v = kv(norm(m)).split(2, -1): split(2, -1) makes pieces of size 2, not "
             "2 pieces, too many to unpack. Use .chunk(2, -1): two halves of D, the keys "
             f"then the values. (Python said: {err})")


def module_cast(what: str, **modules: nn.Module) -> None:
    """A module converted in place (`kv.float()`, `.half()`, `.to(dtype)`): its
    parameters are no longer float64 (the guard compares values only, and a float64
    parameter made from float32 numbers keeps them)."""
    for name, module in modules.items():
        dtype = next(module.parameters()).dtype
        if dtype != torch.float64:
            method = {torch.float32: "float", torch.float16: "half"}.get(dtype, "to")
            fail(f"{what}: {name}.{method}() converts the module itself to "
                 f"{str(dtype).split('.')[-1]}, in place (it is the caller's): keep the "
                 "modules as they are; the inputs are float64 already, no cast needed.")


def reshape_width(err: Exception, xs: torch.Tensor, gs: torch.Tensor, fn=None) -> None:
    """Name a reshape of X (or G) to the OTHER tensor's width, read off torch's error
    "shape '[-1, w]' is invalid for input of size n" (n = numel of xs or gs): the other's
    size, or (where `fn`'s source shows `(-1, w)`) a width written as a number."""
    found = re.search(r"shape '\[(.*?)\]' is invalid for input of size (\d+)", str(err))
    if not isinstance(err, RuntimeError) or not found:
        return
    width, size = found.group(1).split(",")[-1].strip(), int(found.group(2))
    d_in, d_out = xs.size(-1), gs.size(-1)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = ""
    for t, name, own, other, letters in ((xs, "xs", d_in, d_out, ("D_in", "D_out")),
                                         (gs, "gs", d_out, d_in, ("D_out", "D_in"))):
        if size == t.numel() and width == str(other) and own != other:
            twin = "gs" if name == "xs" else "xs"
            number = re.search(rf"\(\s*-1\s*,\s*{other}\s*\)", source)
            how = (f"{name}.reshape(-1, {other}), a width written as a number, " if number
                   else f"{name}.reshape(-1, {twin}.size(-1)) (or a {other} written as a "
                   "number) ")
            fail(f"{how}gives {name} the width of {twin} "
                 f"({letters[1]} = {other}); {name}'s rows are {letters[0]} = {own} wide: "
                 f"{name}.reshape(-1, {name}.size(-1)) (or {name}.flatten(0, 1)). "
                 f"(torch said: {str(err).strip().splitlines()[0]})")


def width_batch(err: Exception, fn, what: str) -> None:
    """`gs.reshape(-1, gs.shape[1])`: the rows cut at the batch size's width, not the
    features'. Rerun where D_in = D_out, so that both sides come out B wide and multiply."""
    xs, gs = _randn(3, 2, 4, seed=32), _randn(3, 2, 4, seed=33)
    if isinstance(err, RuntimeError) and gives(
            fn, xs, gs, gs.reshape(-1, 2).t() @ xs.reshape(-1, 2)):
        fail(f"{what} reshapes to a width of B = shape[1], the batch size: a row of xs is "
             "its last axis, D_in wide (D_out for gs): gs.reshape(-1, gs.shape[-1]).T @ "
             "xs.reshape(-1, xs.shape[-1]), or flatten(0, 1). "
             f"(torch said: {str(err).strip().splitlines()[0]})")


def features_flattened(got: torch.Tensor, xs: torch.Tensor, gs: torch.Tensor,
                       what: str) -> None:
    """Fail when `got` is `gs.flatten(1).T @ xs.flatten(1)`, `[B·D_out, B·D_in]`: batch and
    features merged, where the product must sum over steps and batch."""
    wrong = gs.flatten(1).t() @ xs.flatten(1)
    if got.shape != wrong.shape or wrong.shape == (gs.size(-1), xs.size(-1)):
        return
    if not close(got.detach().to(wrong.dtype), wrong):
        return
    b, d_out, d_in = gs.size(1), gs.size(-1), xs.size(-1)
    fail(f"{what} has shape [B·D_out={b * d_out}, B·D_in={b * d_in}], expected "
         f"[D_out={d_out}, D_in={d_in}]: flatten(1) merges the batch with the features "
         "([T, B·D_out]); the sum runs over steps and batch: flatten(0, 1) -> [T·B, D], "
         "then G.T @ X -> [D_out, D_in].")


def heads_as_number(t: torch.Tensor, flat: torch.Tensor, name: str, heads: int) -> None:
    """Fail when `t` (`k` or `v`) is its half of `flat` (kv(norm(m)), `[B, 2D]`) split into
    some other number of heads than `heads` (n_heads): a head count written as a number."""
    batch, d = flat.size(0), flat.size(1) // 2
    if t.dim() != 3 or t.size(0) != batch or t.size(1) in (0, heads) or t[0].numel() != d:
        return
    h = t.size(1)
    half = flat[:, :d] if name == "k" else flat[:, d:]
    if close(t.detach(), half.reshape(batch, h, d // h)):
        fail(f"{name} has {h} heads, [B, {h}, {d // h}], where the check passes n_heads = "
             f"{heads}: split into n_heads heads, .view(B, n_heads, -1), never a head "
             "count written as a number (the notebook's model has other sizes).")


def head_width_as_number(t: torch.Tensor, flat: torch.Tensor, name: str, heads: int) -> None:
    """Fail when `t` (`k` or `v`) is its part of `flat` (kv(norm(m)), `[B, 2D]`) viewed with
    a head width w != D // heads and the batch left to -1 (`.view(-1, 2, n_heads, 4)`)."""
    batch, d = flat.size(0), flat.size(1) // 2
    if t.dim() != 3 or t.size(1) != heads or t.size(2) in (0, d // heads):
        return
    w, i = t.size(2), "kv".index(name)
    if flat.numel() % (2 * heads * w) or not (
            close(t.detach(), flat.reshape(-1, 2, heads, w)[:, i])
            or close(t.detach(), flat[:, i * d:(i + 1) * d].reshape(-1, heads, w))):
        return
    fail(f"{name} has shape {list(t.shape)}: a head width written as a number, {w}, where "
         f"D_h = D // n_heads = {d // heads} here, and the batch left to -1 took the rest: "
         f"view(B, 2, n_heads, -1) with B = m.size(0), the width never a number.")


@contextlib.contextmanager
def modules_run() -> Iterator[list[nn.Module]]:
    """The modules whose forward runs inside the block, in order (a global forward
    pre-hook, removed on the way out)."""
    ran: list[nn.Module] = []
    hook = nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: ran.append(module))
    try:
        yield ran
    finally:
        hook.remove()


def fresh_norm(ran: list[nn.Module], what: str, norm: nn.Module) -> None:
    """Fail when a LayerNorm other than the given `norm` ran: one made in the answer (its
    weight 1 and bias 0, float32 where the check's modules are float64)."""
    if any(isinstance(m, nn.LayerNorm) and m is not norm for m in ran):
        fail(f"{what}: you normalized with a fresh LayerNorm made in your function (weight 1, "
             "bias 0, float32 by default): use the given `norm` module, norm(m), whose "
             "weight and bias are trained with the model.")


def float32_met(err: Exception, what: str) -> None:
    """Name torch's dtype clash of a float32 tensor with the float64 modules (`m.float()`
    given to norm, or norm(m).float() to kv): "mixed dtype", "same dtype"."""
    said = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, RuntimeError) and ("mixed dtype" in said or "same dtype" in said
                                          or "expected scalar type" in said):
        fail(f"{what}: a float32 tensor met the float64 modules (a .float() on m or on "
             "the way, or a tensor made without dtype=?): the check's m, norm and kv are "
             f"float64; keep m's dtype, no .float(). (torch said: {said[:90]})")


def foreign_modules(fn, what: str, *own: nn.Module) -> None:
    """Fail when `fn` reads a module that is not among the arguments `own` from its globals
    or its closure: the notebook's model (or one of its layers) where norm and kv belong."""
    named = {n: v for n, v in globals_read(fn).items() if isinstance(v, nn.Module)}
    held = [v for v in closure_values(fn) if isinstance(v, nn.Module)]
    names = [f"`{n}`" for n, v in named.items() if all(v is not o for o in own)]
    if names or any(all(v is not o for o in own) for v in held):
        fail(f"{what} uses modules that are not the ones passed in ("
             + (", ".join(names) + ", from the notebook's globals" if names else "from its "
                "closure") + "): the check passes its own norm and kv (the model, each "
             "layer's); use the arguments, kv(norm(m)).")


def norm_slips(k: torch.Tensor, m: torch.Tensor, norm: nn.Module, kv: nn.Module,
               n_heads: int) -> None:
    """k projected from another normalisation of m than norm(m): norm's affine alone, a
    fresh layer_norm, the variance over D - 1 or over the batch (dim 0), never centred (an
    RMSNorm, m / std), never divided by the std, norm twice, its affine twice, swapped,
    halved or the bias added before the scale, over all of m at once, an L2 normalize."""
    m, w, b, eps, call = m.detach(), norm.weight, norm.bias, norm.eps, "call norm(m)."

    def over(dim: int, unbiased: bool = False, centre: bool = True) -> torch.Tensor:
        var = m.var(dim, keepdim=True, unbiased=unbiased)
        return (m - centre * m.mean(dim, keepdim=True)) / (var + eps).sqrt()
    unit, hat = m / m.norm(dim=-1, keepdim=True), over(-1)
    said = {"batch": "you normalized over the batch (dim 0), each feature across the "
            "examples, as a batch norm does; LayerNorm normalizes each memory vector over "
            f"its D features, the last axis: {call}",
            "centre": "your normalisation never subtracts the mean (an RMSNorm, or m / std): "
            "LayerNorm centres each memory vector, (m - mean) / sqrt(var + eps), then "
            f"applies its weight and bias: {call}",
            "length": "you divided m by its length (F.normalize, an L2 norm): LayerNorm "
            "subtracts the mean, divides by the std over the D features, then applies its "
            f"weight and bias: {call}"}
    with torch.no_grad():
        for normed, message in (
                (m * w + b, "you applied norm's weight and bias to m without normalizing it "
                 "(m * norm.weight + norm.bias): the LayerNorm first subtracts each row's "
                 "mean and divides by its std, then applies that affine; call the module, "
                 "norm(m)."),
                (hat, "you normalized with a fresh layer_norm (no learned scale and shift): "
                 "use the given `norm` module, norm(m), whose weight and bias are trained "
                 "with the model."),
                (over(-1, True) * w + b, "your normalisation divides by the unbiased std "
                 "(std() and var() divide by D - 1 by default); LayerNorm's variance divides "
                 "by D, var(unbiased=False): call the module, norm(m)."),
                *[(over(0, u) * w + b, said["batch"]) for u in (False, True)],
                (m / (m.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w + b, said["centre"]),
                (over(-1, centre=False) * w + b, said["centre"]),
                ((m - m.mean(-1, keepdim=True)) * w + b, "your normalisation subtracts the "
                 f"mean but never divides by the std, sqrt(var + eps): {call}"),
                (norm(norm(m)), "you applied norm twice, norm(norm(m)): the memory vector "
                 "is normalized once, kv(norm(m))."),
                (norm(m) * w + b, "you applied norm's weight and bias twice: norm(m) applies "
                 "them already; norm(m) * norm.weight + norm.bias scales and shifts again."),
                ((hat + b) * w, "your normalisation adds the bias before the scale, "
                 f"(x̂ + norm.bias) * norm.weight; LayerNorm's is x̂ * weight + bias: {call}"),
                (hat * b + w, "your normalisation swaps norm's weight and bias, x̂ * "
                 f"norm.bias + norm.weight; LayerNorm's is x̂ * weight + bias: {call}"),
                *[(t, "your normalisation applies half of norm's affine: LayerNorm's is x̂ * "
                   f"norm.weight + norm.bias, both: {call}") for t in (hat * w, hat + b)],
                *[((m - m.mean()) / (m.var(unbiased=u) + eps).sqrt() * w + b, "you normalized "
                   "over all of m at once (mean() and var() with no dim): LayerNorm normalizes "
                   f"each memory vector over its D features, dim=-1: {call}")
                  for u in (False, True)],
                (unit, said["length"]), (unit * w + b, said["length"])):
            if close(k, kv(normed).unflatten(-1, (2, n_heads, -1))[:, 0]):
                fail(message)


def expect_eps_used(k: torch.Tensor, v: torch.Tensor, m: torch.Tensor, norm, kv,
                    n_heads: int) -> None:
    """k and v right to float32's precision but not float64's, and equal to a LayerNorm
    written out without its eps, or with it outside the root: named before the float32
    step that such a difference would otherwise be blamed on."""
    m = m.detach()
    centred = m - m.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    for normed, said in ((centred / std, "leaves out LayerNorm's eps"),
                         (centred / (std + norm.eps), "adds eps outside the root")):
        with torch.no_grad():
            out = kv(normed * norm.weight + norm.bias).unflatten(-1, (2, n_heads, -1))
        if close(k, out[:, 0], atol=1e-12, rtol=1e-10) and close(v, out[:, 1], atol=1e-12,
                                                                  rtol=1e-10):
            fail(f"k and v differ from norm(m)'s at float64: your normalisation {said} (norm.eps = "
                 f"{norm.eps:g}): (m - mean) / sqrt(var + eps), as norm(m) computes it; "
                 "call norm(m).")


def kv_input(k: torch.Tensor, v: torch.Tensor, m: torch.Tensor, kv: nn.Module, normed,
             n_heads: int) -> None:
    """k or v kv's own half applied to another input x than norm(m) (`normed`), x recovered
    by solving that half's D x D weight (every row the same, not row 0's: a mean over the
    batch); or each memory vector's own numbers mixed within it."""
    batch, d = m.shape
    want = kv(normed).detach().view(batch, 2, d)
    for name, t, i in (("k", k.detach(), 0), ("v", v.detach(), 1)):
        x = torch.linalg.solve(kv.weight[i * d:(i + 1) * d].detach(),
                               (t.reshape(batch, d) - kv.bias[i * d:(i + 1) * d].detach()).T).T
        if close(x, normed + m.detach()):
            fail(f"{name} is a projection of norm(m) + m (a residual added?): the keys and "
                 "values project the normalized memory vector alone, kv(norm(m)).")
        if batch > 1 and close(x, x[:1].expand_as(x)) and not close(x[:1], normed[:1]):
            fail(f"{name} is the same for every batch entry (m averaged over the batch "
                 "first?): each memory vector has its own keys and values, kv(norm(m)), "
                 "no mean over dim 0.")
        rows, row_want = t.reshape(batch, d).sort(-1).values, want[:, i].sort(-1).values
        if close(rows, row_want) and not close(t.reshape(batch, d), want[:, i]):
            fail(f"{name} holds each memory vector's own D numbers in other places (its heads "
                 "mixed: a transpose before a view or reshape?): view each row as [H, D_h] "
                 "as it comes, kv(norm(m)).view(B, 2, H, D_h), then out[:, 0], out[:, 1].")
