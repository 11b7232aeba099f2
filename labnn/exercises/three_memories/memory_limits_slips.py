"""Slips of notebook 05's exercises 1 and 4, named for `memory_limits`: a memory name that
falls through to the unbounded branch, a reach that ignores its arguments (hard-coded
numbers), a window's reach of L + W or (L + 1) * W, XL's position subtracted, multiplied,
counted in segments of M or as one token, a negative reach, a tensor's bytes counted over
its last axes only, a KVBuffer's field misnamed or indexed, and the list `XLCache.kv` used
as `KVState.kv`'s one tensor.

Dimension letters (the package legend): `B` batch, `H` heads, `M` remembered positions,
`D_h` head width, `L` layers.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Callable

import torch

from labnn.exercises.grading import fail, guarded
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

NAMES = "'window', 'XL', 'feedback'"
_RULES = {"window": "L * W", "XL": "L * M + position"}


def fell_through(fn: Callable, what: str, memory: str, args: tuple, got, want) -> None:
    """Fail when a bounded memory gets `math.inf`, the feedback memory's reach: the name
    did not match the learner's comparison. Rerun with the name in other cases; when one
    of them gives the right reach, name the spelling the function expects."""
    if got != math.inf or memory not in _RULES:
        return
    spellings = dict.fromkeys((memory.lower(), memory.upper(), memory.capitalize()))
    for other in spellings:
        if other == memory:
            continue
        try:
            with guarded(what):
                answer = fn(other, *args)
        except Exception:
            continue
        if answer == want:
            fail(f"{what} gives inf, but {want} for {other!r}: your function compares "
                 f"memory with {other!r}, so {memory!r} fell through to the unbounded "
                 f"branch. The memory names are {NAMES}, spelled exactly so.")
    fail(f"{what} gives inf, the feedback memory's (unbounded) reach: if {memory!r} fell "
         f"through to your last branch, check the spelling of its comparison (the memory "
         f"names are {NAMES}). {memory} reaches {_RULES[memory]} = {want}.")


def ignored_arguments(fn: Callable, what: str, memory: str, args: tuple, got) -> None:
    """Rerun a bounded memory's wrong reach with `n_layers`, then `span`, one larger: an
    answer that stays the same ignores that argument (a number hard-coded instead)."""
    if memory not in _RULES:
        return
    if memory == "window" and len(args) == 3:  # capped at the tokens before the query?
        with guarded(what):
            later = fn(memory, *args[:2], args[2] + 5)
        if later != got:
            fail(f"{what} gives {got}, and {later} at position {args[2] + 5}: the window's "
                 "reach does not depend on the query's position (nor is it capped at the "
                 f"tokens before it): it is how far back the memory can see, "
                 f"{_RULES[memory]}.")
    ignored = []
    for i, name in enumerate(("n_layers", "span")):
        more = (*args[:i], args[i] + 1, *args[i + 1:])
        try:
            with guarded(what):
                if fn(memory, *more) == got:
                    ignored.append(f"{name}={more[i]}")
        except Exception:
            return
    if ignored:
        names = " and ".join(n.split("=")[0] for n in ignored)
        fail(f"{what} gives {got}, and {got} again with {' or '.join(ignored)}: your function "
             f"ignores {names} (numbers hard-coded in their place, or a result kept from an "
             f"earlier call?): compute the reach from the arguments, {_RULES[memory]}.")


_SPARE = {"transformer": "the queries of the same projection", "Transformer-XL": "the room "
          "kept free for future tokens"}


def storage_slips(name: str, layers: list[tuple[torch.Tensor, torch.Tensor]]
                  ) -> list[tuple[int, str]]:
    """The bytes of the storages behind the keys and values of `layers`, counted per tensor
    and once per storage (keys and values can share one), each with its diagnosis."""
    storages = [t.untyped_storage() for pair in layers for t in pair]
    once = {s.data_ptr(): s.nbytes() for s in storages}
    what = f" ({_SPARE[name]} here)" if name in _SPARE else ""
    message = ("you counted the whole storage behind the tensors (untyped_storage()"
               f".nbytes()), which holds more than the cache's keys and values{what}: "
               "count the tensors' own bytes, t.nbytes (numel * element_size).")
    # one storage behind every tensor (a KVState's kv): counted per tensor, that is the
    # one tensor counted twice, which the check names as such
    per_tensor = sum(s.nbytes() for s in storages) if len(once) > 1 else None
    return [(per_tensor, message), (sum(once.values()), message)]


def last_axes_slips(tensors: list[torch.Tensor], letters: list[str]
                    ) -> list[tuple[int, str]]:
    """The bytes of `tensors` counted over their last two or three axes only (e.g.
    ``t.element_size() * t.shape[-1] * t.shape[-2]``), each with its diagnosis.

    Args:
        tensors: the tensors of a cache, all with the axes `letters`.
        letters: the name of each axis, e.g. ``["B", "H", "M", "D_h"]``.
    """
    slips = []
    for n, word in ((2, "two"), (3, "three")):
        got = sum(t.element_size() * math.prod(t.shape[-n:]) for t in tensors)
        kept, left = ", ".join(letters[-n:]), ", ".join(letters[:-n])
        slips.append((got, f"only the last {word} axes of each tensor are counted "
                           f"([{kept}]; [{left}] left out): count every element, "
                           "t.numel() * t.element_size() (or t.nbytes)."))
    return slips


class _KVProbe(list):
    """`XLCache.kv` handed in again: records a tensor's attribute asked of the list
    itself (`cache.kv.numel()`, `cache.kv.nbytes`, ...)."""

    asked: list[str]

    def __getattr__(self, name: str):
        if not name.startswith("__"):
            self.asked.append(name)
        raise AttributeError(f"'list' object has no attribute '{name}'")


def xl_kv_as_tensor(fn: Callable, what: str, cache) -> Callable[[Exception], None]:
    """The diagnosis of an error on an `XLCache`: rerun with its `kv` list as a probe; a
    tensor's attribute asked of the list itself means the answer took the XLCache for a
    KVState (e.g. spotted by ``hasattr(cache, "kv")``, true of both)."""

    def diagnose(err: Exception) -> None:
        if not isinstance(err, (AttributeError, TypeError)):
            return
        probe = _KVProbe(cache.kv)
        probe.asked = []
        try:
            with guarded(what):
                fn(cache._replace(kv=probe))
        except Exception:
            pass
        tensor_like = [a for a in probe.asked if hasattr(torch.Tensor, a)]
        if tensor_like:
            fail(f"{what}: your function read cache.kv.{tensor_like[0]} as if cache.kv were "
                 "one tensor, as in a KVState; an XLCache also has .kv, a list of one "
                 "KVBuffer per layer (hasattr(cache, 'kv') holds for both). Tell them apart "
                 "with isinstance(cache, KVState) / isinstance(cache, XLCache).")

    return diagnose


def element_size_slip(tensors: list[torch.Tensor]) -> tuple[int, str]:
    """The element sizes summed where the bytes belong (`k.element_size() +
    v.element_size()`), with the diagnosis."""
    return (sum(t.element_size() for t in tensors),
            "that adds element_size() per tensor: element_size is bytes per number; multiply "
            "it by numel() (t.numel() * t.element_size()), or use .nbytes.")


def arithmetic_slips(fn: Callable, what: str, memory: str, n: int, span: int, pos: int,
                     got) -> None:
    """Name a reach computed as `span ** n_layers` (plus the position, for XL): each layer
    adds its span, L * W, it does not multiply it; a negative reach; and XL's position
    subtracted (`L * M - i`), multiplied (`L * M * i`), counted in segments (`M * (L + i)`)
    or as one token (`L * M + (i > 0)`) where it adds once (at the next position too: not a
    number written in the function that gives the same here)."""
    rule, extra = _RULES.get(memory), pos if memory == "XL" else 0
    if rule and span ** n != n * span and got == span ** n + extra:
        fail(f"{what} gives {got} = span ** n_layers{' + position' if extra else ''}: the "
             f"reach grows by {'W' if memory == 'window' else 'M'} per layer, it adds, "
             f"not multiplies: {rule} = {n * span + extra}.")
    if rule and got < 0:
        fail(f"{what} gives {got}, a negative number of tokens: the reach counts tokens "
             f"back, and its terms add: {rule} = {n * span + extra}.")
    for form, how, of in (("- position", "subtracts", operator.sub),
                          ("* position", "multiplies", operator.mul),
                          ("+ M * position", "counted in segments of M (M * (L + i)?)",
                           lambda a, i: a + span * i),
                          ("+ (position > 0)", "counted as 1 token (a bool)",
                           lambda a, i: a + (i > 0))):
        if memory != "XL" or pos < 2 or got != of(n * span, pos) or not _gives(
                fn, what, (memory, n, span, pos + 1), of(n * span, pos + 1)):
            continue
        fail(f"{what} gives {got} = L * M {form}: the position {how}, where it "
             "adds once: a query at position i also sees the i tokens of its own segment "
             f"before it, L * M + i = {n * span + pos}.")


def pair_as_tensor(err: Exception, what: str, cache) -> None:
    """Name a tensor's attribute (`.nbytes`, `.numel()`, ...) asked of a `(k, v)` pair of
    a `TransformerLM` cache, a list of such pairs."""
    said = str(err)
    if type(cache).__name__ == "KVState" and isinstance(err, ValueError) and "unpack" in said:
        fail(f"{what}: a KVState holds no (k, v) pairs: its kv is one tensor [2, B, H, M, "
             "D_h] (keys kv[0], values kv[1]), whose kv[0] [B, H, M, D_h] does not unpack "
             "into two: count cache.kv.nbytes. XLCache.kv is a list of KVBuffers (k, v = "
             "buffer): tell the kinds apart with isinstance. "
             f"(ValueError: {said})")
    if isinstance(cache, list) and isinstance(err, AttributeError) and said.startswith(
            "'tuple' object has no attribute"):
        fail(f"{what}: each cache entry is a (k, v) pair, not a tensor: sum k.nbytes + "
             "v.nbytes over `for k, v in cache` (or t.numel() * t.element_size() for each "
             f"t of a pair). (AttributeError: {said.splitlines()[0]})")


def uncalled_method(what: str, got, cache) -> None:
    """Fail when `cache_bytes` returned a bound method (e.g. `cache.nbytes` of a
    `KVState`, where `nbytes` is a method, or a tensor's `element_size`) instead of
    calling it."""
    name = getattr(got, "__name__", None)
    if not callable(got) or not isinstance(name, str):
        return
    own = getattr(got, "__self__", None) is cache
    fail(f"{what} returns the method {name} itself, not its result: a method, not called"
         + (f"; KVState.nbytes is a method: call it, cache.nbytes(), or use the tensor's "
            ".nbytes property, cache.kv.nbytes." if own and name == "nbytes" else
            f": call it, {name}() (a tensor's .nbytes is a property, no call)."))


def mem_len_slip(cache, layers: list) -> list:
    """An `XLCache` that holds fewer positions than `mem_len`: the bytes of `mem_len`
    positions (its capacity) instead of the positions held (`M`, the tensors' size)."""
    held = layers[0][0].size(2) if layers and layers[0][0].dim() == 4 else 0
    if not hasattr(cache, "mem_len") or not 0 < held < cache.mem_len:
        return []
    wrong = sum((k.nbytes + v.nbytes) // held * cache.mem_len for k, v in layers)
    return [(wrong, f"this XL cache is partly filled ({held} of mem_len = {cache.mem_len} "
                    "positions held) and your count uses mem_len: count the positions the "
                    "cache holds (its tensors' sizes, t.nbytes), not its capacity.")]


def expect_reach_number(what: str, got) -> None:
    """Fail unless `got` is a real number (a numpy scalar too, not a bool) other than NaN;
    a tensor is told to give its `.item()`."""
    if isinstance(got, torch.Tensor):
        fail(f"{what} returns a tensor, {got!r}: return a Python number: .item().")
    if not isinstance(got, numbers.Real) or isinstance(got, bool) or got != got:
        fail(f"{what} should return a number of tokens (or math.inf), got {got!r}.")


def _gives(fn: Callable, what: str, args: tuple, want) -> bool:
    """Whether `fn(*args)` gives `want` (False where it raises)."""
    try:
        with guarded(what):
            return fn(*args) == want
    except Exception:
        return False


def window_slips(fn: Callable, what: str, n: int, span: int, pos: int, got) -> None:
    """Name a window's reach of one layer (W), of the token itself counted (L * (W + 1),
    L * W + 1), of L + W, or of the embedding counted as a layer ((L + 1) * W); the last
    two only where `fn` with one layer more agrees (no hard-coded number)."""
    more = ("window", n + 1, span, pos)
    if got == span:
        fail(f"{what} gives {got}, the reach of one layer: each layer reads the layer below "
             "over another W tokens, so L layers reach L * W.")
    if got == n * (span + 1) or got == n * span + 1:
        off = ("off by one" if got == n * span + 1 or n == 1
               else f"off by L = {n} (one per layer)")
        fail(f"{what} gives {got}: {off}. attn_len = W counts the previous tokens a token "
             "may attend to (itself excluded), so one layer reaches exactly W back.")
    if got == n + span != n * span and _gives(fn, what, more, n + 1 + span):
        fail(f"{what} gives {got} = L + W: the layers' spans add up, L * W = {n * span} (each "
             "layer reaches W further), not L + W.")
    if got == (n + 1) * span and _gives(fn, what, more, (n + 2) * span):
        fail(f"{what} gives {got} = (L + 1) * W: the embedding is not a layer that attends; "
             f"the L layers reach L * W = {n * span}.")


def buffer_fields(err: Exception, what: str) -> None:
    """Name an attribute a `KVBuffer` does not have (`buffer.k`) or an index (`buffer[0]`):
    it unpacks, `k, v = buffer`, and holds `keys_t` and `values`."""
    if isinstance(err, (AttributeError, TypeError)) and "'KVBuffer' object " in str(err):
        how = f"has no .{err.name}" if isinstance(err, AttributeError) else "takes no index"
        fail(f"{what}: a KVBuffer {how}: unpack it, k, v = buffer ([B, H, M, D_h] each), or "
             "read its fields buffer.keys_t (the keys transposed, [B, H, D_h, M]) and values.")


def element_size_slips(fn: Callable, cache, want: int, twin) -> list[tuple[int, str]]:
    """The bytes of `cache` with each other element size assumed (2, 4 or 8 bytes per
    number), said only where the answer assumes it for `twin`, the same cache in
    another dtype, too (a number of bytes half or twice the right one is also what
    other slips give, but theirs follow the dtype), or where it is right for `twin`,
    whose element size differs (a table of dtypes that does not know this one)."""
    size_of = [next(t for p in pairs(c) for t in p).element_size() for c in (cache, twin[1])]
    numbers_, twin_numbers = want // size_of[0], twin[2] // size_of[1]
    try:
        with guarded("cache_bytes(cache)"):
            answer = fn(twin[1])
    except Exception:
        return []
    dtypes = [str(next(t for p in pairs(c) for t in p).dtype)[6:] for c in (cache, twin[1])]
    copy = {2: ("float16", "half"), 4: ("float32", "float"), 8: ("float64", "double")}
    return [(numbers_ * size, f"it assumes {size} bytes per number, or counted a "
             f"{copy[size][0]} copy (.{copy[size][1]}()): use the cache's own tensors' "
             "element_size() (or .nbytes), which follow its dtype.")
            for size in (2, 4, 8) if answer == twin_numbers * size and numbers_ * size != want
            ] + [(numbers_ * size, f"it counts {size} bytes per number for {dtypes[0]} "
                  f"({size_of[0]} in fact), though right for {dtypes[1]}: read each "
                  "tensor's element_size() or nbytes, not a table of dtypes.")
                 for size in (2, 4, 8) if answer == twin[2] and size != size_of[1]
                 and numbers_ * size != want]


def pairs(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (k, v) pairs of a cache of any kind (a `KVState`'s one kv split in two)."""
    if isinstance(cache, KVState):
        return [tuple(cache.kv)]
    return [tuple(b) for b in cache.kv] if isinstance(cache, XLCache) else list(cache)
