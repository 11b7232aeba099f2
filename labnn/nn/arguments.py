r"""Argument checks shared by every model, config and sampler: one rule each, one
message each.

A learner's mistake should stop at the call that made it, with a message naming the
argument, the value and what was expected — never deep inside torch, and never silently
(`True` passing as `1`, a float as a size). Every config's `__post_init__` and every
model's entry point uses these, so one field obeys one rule everywhere.
"""

from __future__ import annotations

import math
import numbers

import torch


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a float or a bool for a size, a string for a flag).

    A `TypeError`, and a `ValueError` too, as NumPy's `AxisError` is both a `ValueError`
    and an `IndexError`: these checks raised `ValueError` before, and code that catches
    it (the CLI's one-line messages, a learner's `except`) keeps working.
    """


def _got(value) -> str:
    """`value` for a message, with the fix where the type is the mistake: a NumPy number
    or a one-element tensor where a Python number was expected."""
    if isinstance(value, torch.Tensor):
        return f"{value!r} (a tensor: pass a Python number, .item())"
    if isinstance(value, numbers.Number) and type(value).__module__ == "numpy":
        fix = "int" if isinstance(value, numbers.Integral) else "float"
        return f"{value!r} (a NumPy {type(value).__name__}: pass {fix}(...))"
    return repr(value)


def is_int(value) -> bool:
    """Whether `value` is a Python int and not a bool (`True` would otherwise pass as
    1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_error(*values) -> type[ValueError]:
    """The error for a size that failed its check: `ValueError` when every value is an int
    (a wrong value), else `ArgumentTypeError` (a float or a bool: a wrong type)."""
    return ValueError if all(is_int(v) for v in values) else ArgumentTypeError


def check_int(name: str, value, *, low: int = 1, allow_none: bool = False) -> None:
    """Raise a clear error unless `value` is an int `>= low` (or None, when `allow_none`).

    Example:
        >>> check_int("n_heads", 4)
        >>> check_int("mem_len", 0, low=0)
        >>> check_int("attn_len", None, allow_none=True)
    """
    if allow_none and value is None:
        return
    if not is_int(value) or value < low:
        kind = {0: "a non-negative int", 1: "a positive int"}.get(low, f"an int >= {low}")
        raise int_error(value)(
            f"{name} must be {kind}{' or None' if allow_none else ''}, got {_got(value)}")


def is_number(value) -> bool:
    """Whether `value` is a finite int or float and not a bool."""
    real = isinstance(value, (int, float)) and not isinstance(value, bool)
    return real and math.isfinite(value)


def check_number(name: str, value, *, low: float = 0, above: bool = False,
                 high: float | None = None, expected: str | None = None) -> None:
    """Raise a clear error unless `value` is a finite number `>= low` (`> low` when
    `above`) and, when `high` is given, `<= high`.

    `expected` words the message's "must be ..." part when the default
    ("a finite number >= 0") would not say enough.
    """
    too_high = high is not None and is_number(value) and value > high
    if not is_number(value) or value < low or (above and value == low) or too_high:
        kind = expected or f"a finite number {'>' if above else '>='} {low:g}"
        real = isinstance(value, (int, float)) and not isinstance(value, bool)
        error = ValueError if real else ArgumentTypeError  # inf and nan: wrong values
        raise error(f"{name} must be {kind}, got {_got(value)}")


def check_choice(name: str, value, choices: tuple) -> None:
    """Raise a clear error unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_bool(name: str, value, *, allow_none: bool = False) -> None:
    """Raise a clear error unless `value` is True or False (not 0, 1 or a string), or None
    when `allow_none`."""
    if not isinstance(value, bool) and not (allow_none and value is None):
        kind = "True, False or None" if allow_none else "True or False"
        raise ArgumentTypeError(f"{name} must be {kind}, got {_got(value)}")


def check_dropout(dropout: float, name: str = "dropout") -> None:
    """Raise a clear error unless `dropout` is a number in `[0, 1)`."""
    number = isinstance(dropout, (int, float)) and not isinstance(dropout, bool)
    if not number or not 0 <= dropout < 1:
        error = ValueError if number else ArgumentTypeError
        raise error(f"{name} must be in [0, 1), got {_got(dropout)}")


def check_heads(d_model: int, n_heads: int, *, even: bool = False) -> None:
    """Raise a clear error unless `n_heads` divides `d_model` (and `d_model` is even,
    when `even`)."""
    if d_model % n_heads or (even and d_model % 2):
        need = "must be even and divisible" if even else "must be divisible"
        raise ValueError(f"d_model={d_model} {need} by n_heads={n_heads}")


def check_tokens(
    tokens: torch.Tensor,
    vocab_size: int,
    name: str = "tokens",
    dims: int = 2,
    *,
    device: torch.device | None = None,
    min_len: int = 0,
    scan: bool = True,
) -> None:
    """Raise a clear error unless `tokens` is a `torch.long` (or `torch.int32`) tensor
    of `dims` dimensions, on `device` (when given), at least `min_len` long in its last
    dimension, with ids in `[0, vocab_size)`.

    The one validator of token ids for every model's `forward`, `step` and `generate`.
    All checks are O(1) except the range check, one `aminmax` pass over the ids
    (`scan=False` skips it, for a caller that checks only the type and shape). Ids on
    the meta device have no values to check: refused, unless `scan=False`.
    """
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}"
        )
    if tokens.dtype not in (torch.long, torch.int32):
        raise TypeError(
            f"{name} must hold integer token ids (torch.long or torch.int32), got dtype "
            f"{tokens.dtype}"
        )
    if tokens.dim() != dims:
        raise ValueError(
            f"{name} must have {dims} dimension{'s' * (dims != 1)}, got shape "
            f"{list(tokens.shape)}"
        )
    if tokens.size(-1) < min_len:
        want = "one token" if min_len == 1 else f"{min_len} tokens"
        raise ValueError(
            f"{name} must hold at least {want} per sequence, got shape "
            f"{list(tokens.shape)}"
        )
    if device is not None and tokens.device != device:
        raise ValueError(
            f"{name} is on {tokens.device}, but the model is on {device}: move one of "
            "them"
        )
    if not scan:
        return
    if tokens.device.type == "meta":
        raise ValueError(
            f"{name} is on the meta device, which holds no values: ids cannot be checked "
            "nor tokens computed or sampled; give the model real weights first "
            f"(model.to_empty(device=...), then load_state_dict) and put the {name} there"
        )
    # one read back to the host for both ends of the range
    low, high = torch.stack(torch.aminmax(tokens)).tolist() if tokens.numel() else (0, 0)
    if low < 0 or high >= vocab_size:
        bad = tokens[(tokens < 0) | (tokens >= vocab_size)][0].item()
        raise ValueError(
            f"{name} contains id {bad}, outside the vocabulary [0, {vocab_size})"
        )


def check_sampling(temperature: float, top_k: int | None, n: int | None = None) -> None:
    """Raise a clear error for a temperature that is not a finite number >= 0, a `top_k`
    that is not a positive int or None, or (when given) a count `n` of new tokens that
    is not an int >= 0."""
    number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not number or not 0 <= temperature < math.inf:
        raise (ValueError if number else ArgumentTypeError)(
            "temperature must be a number >= 0 and finite (0 = greedy), got "
            f"{_got(temperature)}"
        )
    check_int("top_k", top_k, allow_none=True)
    if n is not None:
        check_int("n", n, low=0)


def check_generator(generator, device: torch.device, where: str = "the prompt is") -> None:
    """Raise a clear error unless `generator` is None or a `torch.Generator` on `device`, where
    the tokens are drawn (`where`: what is there). Device indices are compared where both
    name one: 'cuda:1' for a model on 'cuda:0' is refused here, not inside torch's draw."""
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__} (to seed one: "
                        "torch.Generator(device).manual_seed(seed))")
    on = generator.device
    if on.type != device.type or None not in (on.index, device.index) and on.index != device.index:
        raise ValueError(f"generator is on {on}, but {where} on {device}, where the tokens are "
                         f"drawn: make it with torch.Generator('{device}')")


def check_eval_mode(model: torch.nn.Module, what: str) -> None:
    """Raise a clear error unless `model` and every submodule are in eval mode.

    Decoding and generation sample from the model as evaluated: a module left in
    training mode would apply its dropout (the eager paths) or have it silently ignored
    (the compiled ring steps), so every generation path refuses it, once, at its door.
    The message names the first such module (`model.named_modules()` order).

    Finding none is the common case, at the door of every `step` call: a plain walk over
    each module's `_modules` reads the flags (about 7 us for the 54 modules of
    `benchmarks/bench_xl.py`'s XL, against 21 us through `named_modules()`, whose nested
    generators build every name); the names are built only for the message.
    """
    modules = [model]
    while modules:
        module = modules.pop()
        if module is not None and module.training:  # None: a submodule's slot left empty
            break
        modules.extend(() if module is None else module._modules.values())
    else:
        return
    for name, module in model.named_modules():
        if module.training:
            kind = type(module).__name__
            where = f"submodule {name} ({kind})" if name else f"the model ({kind})"
            raise RuntimeError(
                f"{what} needs eval mode, but {where} is in training mode (dropout would "
                "be applied): call model.eval() first"
            )


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype `torch.autocast` computes in on `device`'s type at this moment, or None
    where autocast is off."""
    try:
        on = torch.is_autocast_enabled(device.type)
    except RuntimeError:  # a device type autocast does not know, e.g. meta
        return None
    return torch.get_autocast_dtype(device.type) if on else None


def compute_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype a linear map with this `weight` returns: autocast's where autocast is on
    for its device (a float64 weight excepted, which autocast leaves alone), else the
    weight's own."""
    cast = autocast_dtype(weight.device)
    return weight.dtype if cast is None or weight.dtype == torch.float64 else cast


def state_dtypes(weight: torch.Tensor) -> tuple[torch.dtype, ...]:
    """The dtypes a model's carried state may hold: the weights', and under
    `torch.autocast` also autocast's (the state a call made under it holds)."""
    return tuple(dict.fromkeys((weight.dtype, compute_dtype(weight))))


def state_dtype_hint(dtype: torch.dtype, weight: torch.Tensor) -> str:
    """What to add to the error for a state of another `dtype` than the weights'."""
    if dtype in (torch.float16, torch.bfloat16) and autocast_dtype(weight.device) is None:
        return (" (a state made under torch.autocast: use it under the same autocast, or "
                "convert it to the model's dtype)")
    return ""
