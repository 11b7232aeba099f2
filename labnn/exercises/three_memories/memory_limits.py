"""Checkers for notebook 05's Exercises 1 and 4: how far each memory reaches, and how many
bytes its cache holds.

Dimension letters (the package legend): `B` batch, `H` heads, `M` remembered positions,
`D_h` head width, `L` layers.

`check_reach` compares the learner's reach of a window, a segment memory and a feedback
memory with the rule worked out from the layers; `check_cache_bytes` reads real caches
of the three models and names the typical miscounts (elements instead of bytes, 4 bytes
per number assumed, one layer only, the spare room of a buffer counted, a table of bytes
per dtype), in float32, float64, bfloat16 and float16; an answer that writes into a cache
is named (`cache_kept`).
"""

from __future__ import annotations

import numbers
from typing import Callable

import torch

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl.model import TransformerXL, XLCache, XLConfig
from labnn.exercises.grading import call, exercise, expect_own_code, fail
from labnn.exercises.three_memories import fresh_calls
from labnn.exercises.three_memories.cache_kept import expect_caches_kept
from labnn.exercises.three_memories.cache_parts import (
    N_LAYERS, expect_any_device_cache, expect_counted_anew, expect_factor,
    expect_parts_counted, expect_same_twice, getsizeofs, layer_slips, no_numpy_dtype,
    position_slips, property_called, unit_slips)
from labnn.exercises.three_memories.memory_limits_slips import (
    arithmetic_slips, buffer_fields, element_size_slip, element_size_slips, expect_reach_number,
    fell_through, ignored_arguments, last_axes_slips, mem_len_slip, pair_as_tensor, pairs,
    storage_slips, uncalled_method, window_slips, xl_kv_as_tensor)


def cache_bytes(cache) -> int:
    """Bytes of the keys and values a `TransformerLM` cache, an `XLCache` or a `KVState`
    holds for the positions it remembers (the reference of `check_cache_bytes`)."""
    if isinstance(cache, KVState):
        return cache.kv.nbytes
    return sum(k.nbytes + v.nbytes for k, v in pairs(cache))


def _caches(dtype: torch.dtype = torch.float32, batch: int = 7):
    """A real cache of each kind, of models in `dtype`, after 12 tokens of `batch` rows (a
    batch-1 cache is only read to see it kept): (name, cache, reference bytes, typical
    wrong counts). B * H = 35 is no element size, B = 7 no count of layers (bytes counted
    over the last axes only); H = 5, L = 6, the 2 of k and v, the 3 of a qkv storage and the
    element sizes differ: heads left out or multiplied, one layer or one per layer, values
    left out or doubled, a storage counted each give a number of their own."""
    torch.manual_seed(0)
    size = dict(vocab_size=11, d_model=20, n_heads=5, n_layers=N_LAYERS)
    tokens = torch.randint(11, (7, 12))[:batch]
    tf = TransformerLM(TransformerConfig(**size, seq_len=16)).eval().to(dtype)
    xl = TransformerXL(XLConfig(**size, mem_len=8)).eval().to(dtype)
    fb = FeedbackTransformerKV(FeedbackKVConfig(**size, attn_len=8)).eval().to(dtype)
    with torch.no_grad():
        _, tf_cache = tf(tokens, use_cache=True)
        xl_cache = None
        for i in range(tokens.size(1)):  # one token at a time: the buffers get room to spare
            _, xl_cache = xl.step(tokens[:, i : i + 1], xl_cache)
        part = None  # 4 of mem_len = 7 held (storage: room for 6): bytes follow M
        for i in range(4):
            _, part = xl.step(tokens[:, i : i + 1], part, mem_len=7)
        _, fb_state = fb(tokens)
    out = []
    for name, cache in (
        ("transformer", tf_cache),
        ("Transformer-XL", xl_cache),
        ("partly filled Transformer-XL", part),
        ("feedback", fb_state),
    ):
        layers, table, allocated = pairs(cache), 0, None
        if isinstance(cache, XLCache):
            table = sum(r.nbytes for r in cache.rel_keys)
            allocated = sum(b.allocated_bytes for b in cache.kv)
        tensors, letters = [t for pair in layers for t in pair], ["B", "H", "M", "D_h"]
        if isinstance(cache, KVState):
            tensors, letters = [cache.kv], ["2", *letters]
        keys = sum(k.nbytes for k, _ in layers)
        want = keys + sum(v.nbytes for _, v in layers)
        first = layers[0][0].nbytes + layers[0][1].nbytes
        out.append((
            name,
            cache,
            want,
            [
                *[(size, "sys.getsizeof measures the Python object, a tensor's header"
                         " of a few dozen bytes (or a list's), not the numbers it holds:"
                         " count the bytes of the data, .nbytes (numel() *"
                         " element_size()).") for size in getsizeofs(cache, layers)],
                *unit_slips(want),
                (2 * want if isinstance(cache, KVState) else None,
                 "that counts KVState.kv twice: kv already holds the keys AND the values ([2, "
                 "B, H, M, D_h], keys at kv[0], values at kv[1]), one tensor for all layers; "
                 "count kv.nbytes once."),
                # an XLCache's storage: the KVBuffers' own message, below
                *(storage_slips(name, layers) if not isinstance(cache, XLCache) else []),
                *mem_len_slip(cache, layers), *position_slips(cache, layers),
                (want // 4, "that counts numbers, not bytes: multiply"
                 " by each element's size (.element_size(), 4 for float32), or use .nbytes."),
                (want * 8, "that is bits: .nbytes (numel * element_size) is already in bytes."),
                *layer_slips(cache, want, first, tensors[0].size(-3)),
                (first, "that is one layer's keys and values (a `total = ...` that should be"
                        " `total += ...`, or one layer read, e.g. cache[0]): add"
                        " every layer's."),
                *last_axes_slips(tensors, letters), element_size_slip(tensors),
                (want + table, "that includes Transformer-XL's table of relative-position"
                 " keys, which does not grow with the text: count only the keys and values"
                 " of the remembered positions."),
                (allocated, "that counts the whole storage behind Transformer-XL's KVBuffers,"
                 " including the room kept free for future tokens: count the remembered"
                 " positions (iterate the buffer: k, v = buffer)."),
            ],
        ))
    return out


@exercise("cache bytes", refuse={cache_bytes: "labnn.exercises.three_memories.memory_limits."
                                             "cache_bytes"})
def check_cache_bytes(fn: Callable) -> None:
    """`fn(cache)` -> bytes of the keys and values a model keeps for the positions it
    remembers, for a `TransformerLM` cache (list of `(k, v)`), an `XLCache` and a
    `KVState`; float32 caches first, then float64 ones (8 bytes per number), bfloat16 and
    float16 ones (2 bytes: a table of dtypes that misses one is named); each cache, and a
    batch-1 one of each kind, is called once first and must come back untouched."""
    expect_own_code(fn, "cache_bytes(cache)", cache_bytes=cache_bytes)
    fresh_calls.other_exercise(fn, "cache_bytes")
    rounds = {dtype: _caches(dtype) for dtype in (torch.float32, torch.float64,
                                                  torch.bfloat16, torch.float16)}
    batch_one = _caches(torch.float32, batch=1)
    expect_caches_kept(fn, rounds, batch_one)
    called = [c[:3] for caches in (*rounds.values(), batch_one) for c in caches]
    for dtype, caches in rounds.items():
        twins = rounds[torch.float64 if dtype != torch.float64 else torch.float32]
        for (name, cache, want, mistakes), twin in zip(caches, twins):
            name = name if dtype == torch.float32 else f"{str(dtype)[6:]} {name}"
            _expect_cache_bytes(fn, name, cache, want, [
                *element_size_slips(fn, cache, want, twin), *mistakes], called)
        if dtype == torch.float32:  # counted right: a copy of each, grown in place
            fresh_calls.cache_grown(fn, caches, cache_bytes)
    expect_any_device_cache(fn, rounds[torch.float32])  # on a GPU: no .numpy()


def _expect_cache_bytes(fn: Callable, name: str, cache, want: int, mistakes, called) -> None:
    """`fn(cache)` gives `want` bytes; else a result kept from an earlier call (`called`,
    every cache given before) or the first of `mistakes` it matches is named."""
    what = f"cache_bytes(<{name} cache>)"

    def not_a_list(err: Exception) -> None:
        pair_as_tensor(err, what, cache)
        buffer_fields(err, what)
        no_numpy_dtype(err, what)
        property_called(err, what)  # t.nbytes(): a property called
        if isinstance(err, KeyError) and err.args and isinstance(err.args[0], torch.dtype):
            fail(f"{what} raised KeyError: {err.args[0]}: your table of bytes per number "
                 "does not know that dtype; t.element_size() (or t.nbytes) knows them all.")
        if isinstance(cache, XLCache):  # its kv taken for a KVState's one tensor?
            xl_kv_as_tensor(fn, what, cache)(err)
        if not isinstance(cache, XLCache) or not isinstance(err, (TypeError,
                                                                  ValueError)):
            return
        fail(f"cache_bytes(<XLCache>) raised {type(err).__name__}: {err}. An XLCache is not a "
             "list of (k, v) pairs: its keys and values are in cache.kv, a list of one "
             "KVBuffer per layer, each unpacking as `k, v = buffer` (e.g. `for k, v in "
             "(tuple(b) for b in cache.kv)`).")

    got = call(fn, what, cache, diagnose=not_a_list)
    if isinstance(got, torch.Tensor) and got.numel() == 1 and not got.is_meta:
        fail(f"{what} returns a tensor, {got!r}: return a Python number: .item().")
    numpy = isinstance(got, numbers.Real) and hasattr(got, "item")  # numpy's numbers
    whole = isinstance(got, numbers.Integral)  # a NumPy integer too
    kind, got = type(got).__name__, got.item() if numpy else got
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        uncalled_method(what, got, cache)
        fail(f"cache_bytes(<{name} cache>) should return a number of bytes, got "
             f"{type(got).__name__}.")
    if got == want and not whole:  # right, as a float: from a division or float()?
        fail(f"{what} gives the right number, {got!r}, but of type {kind}: return an int "
             "(t.nbytes is one): bytes are whole.")
    if got == want:
        return
    expect_same_twice(fn, what, cache, got, fresh_calls.kept_default(fn))
    expect_counted_anew(fn, what, cache, got, called)
    named = list(dict.fromkeys(message for wrong, message in mistakes
                               if wrong is not None and wrong != want and got == wrong))
    if named and "storage behind" in named[0]:  # or a factor, as on a copy that owns its own?
        expect_factor(fn, what, cache, want, got)
    if named and "bytes per number" in named[0]:  # element_size_slips: seen at two dtypes
        named = named[:1]
    if named:  # several slips give the same number at these sizes: each is said
        fail(f"for the {name} cache your function returns {got:,} where {want:,} bytes"
             " are expected: " + (named[0] if len(named) == 1 else "one of these "
                                  "slips: " + " Or ".join(named)))
    expect_parts_counted(fn, what, name, cache, want, got)
    held = ("the one key and one value tensor, kv [2, B, H, M, D_h], shared by all layers"
            if isinstance(cache, KVState) else "the keys and values of every layer")
    fail(f"cache_bytes(<{name} cache>) gives {got:,} bytes, expected {want:,} ({held}, for "
         "the positions the model remembers).")


def reach(memory: str, n_layers: int, span: int, position: int = 0) -> float:
    """How many tokens back a prediction can depend on (the reference of `check_reach`).

    Args:
        memory: `"window"` (attends to itself and `span` previous tokens), `"XL"`
            (memory of `span` states per layer, segments of `span` tokens too) or
            `"feedback"` (attends to `span` memory vectors).
        n_layers: `L`.
        span: `W` or `M`.
        position: the query's position in its XL segment (0 = first).

    Returns:
        `L * W`, `L * M + position`, or `math.inf` for the feedback memory.
    """
    if memory == "window":
        return n_layers * span
    if memory == "XL":
        return n_layers * span + position
    return float("inf")


_REACH_CASES = [
    ("window", 2, 4, 0),
    ("window", 3, 5, 2),
    ("XL", 2, 8, 0),
    ("XL", 2, 8, 7),
    ("XL", 3, 4, 2),
    ("feedback", 2, 4, 0), ("feedback", 3, 2, 1), ("feedback", 2, 1, 0),  # span 1 chains too
    ("XL", 1, 6, 3),  # one layer: its memory, and the segment before the query
    ("XL", 2, 12, 10),  # a position past the notebook's segment of T_s = 8
    ("window", 1, 5, 2), ("feedback", 1, 4, 0),  # one layer, of every memory
]


@exercise("reach of each memory", refuse={reach: "labnn.exercises.three_memories."
                                                 "memory_limits.reach"})
def check_reach(fn: Callable) -> None:
    """`fn(memory, n_layers, span, position)` -> how many tokens back a prediction can
    see (`math.inf` if unbounded)."""
    fresh_calls.other_exercise(fn, "reach")
    for memory, n, span, pos in _REACH_CASES:
        what = f"reach({memory!r}, n_layers={n}, span={span}, position={pos})"
        got = call(fn, what, memory, n, span, pos)
        expect_reach_number(what, got)
        want = reach(memory, n, span, pos)
        if got == want:
            continue
        fell_through(fn, what, memory, (n, span, pos), got, want)
        arithmetic_slips(fn, what, memory, n, span, pos, got)
        if memory == "feedback":
            fail(f"{what} gives {got}: the feedback memory is unbounded (math.inf)"
                 + (", with one layer too" if n == 1 else ", with span = 1 too" if span == 1
                    else "") + ". Step t reads the memory "
                 "vector of step t - 1, which read t - 2, ...: what step t - 1 knew is an "
                 "input of step t.")
        if memory == "window":
            window_slips(fn, what, n, span, pos, got)
        if memory == "XL":
            if got == n * span and pos:
                new = (memory, n, span + 3, pos)  # never asked: no result kept for it
                kept = call(fn, f"reach('XL', n_layers={n}, span={span + 3}, position="
                                f"{pos})", *new) == reach(*new)
                fail(f"{what} gives {got}: " + ("a result kept from an earlier call (at "
                     "another position: a cache keyed without it?), as at new arguments it "
                     "is right. Compute it at every call" if kept else "you left out the "
                     "query's position in its segment") + "; a query at position i also "
                     "sees the i tokens of its own segment before it.")
            if got == span + pos:
                fail(f"{what} gives {got}, the reach of one layer: each layer's memory holds "
                     "states that themselves saw M further back, so L layers reach L * M + i.")
            times, rest = divmod(got - n * span, pos) if pos else (0, 1)
            if not rest and 1 < times <= n and call(  # L * M + k * i, k up to L, at i + 1 too
                    fn, what, memory, n, span, pos + 1) == n * span + times * (pos + 1):
                fail(f"{what} gives {got}: the position in the segment adds once (the "
                     "query's own segment), not "
                     + ("once per layer." if times == n else f"{times} times."))
            for per in ("M + T_s", "M + T_s - 1"):  # T_s = M: the segment in every layer
                each = 2 * span - per.endswith("1")  # and 2 L more at M + 1, not a number
                if got in (n * each, n * each + pos) and call(
                        fn, what, memory, n, span + 1, pos) == got + 2 * n:
                    fail(f"{what} gives {got} = L * ({per})" + " + i" * (got > n * each)
                         + ": the segment counted in every layer. Only the memory adds M per "
                         "layer; the query's own segment adds its i tokens once: L * M + i.")
        if memory == "XL" and got == n * span + span - 1:
            fail(f"{what} gives {got} = L * M + T_s - 1 (segments of T_s = M = {span}): "
                 "that is the reach of the LAST position of a segment; the query here is "
                 f"at `position` = {pos}: L * M + position.")
        if memory == "XL" and got == (n + 1) * span == call(fn, what, memory, n, span, 0):
            fail(f"{what} gives {got} = (L + 1) * M: the memory adds M per layer, L * M, "
                 "plus the query's position i in its own segment: L * M + i.")
        if memory == "window" and got == n * span + pos and pos:
            fail(f"{what} gives {got} = L * W + position: a sliding window has no "
                 "segments, the position adds nothing; L layers reach L * W.")
        if memory == "XL" and pos > 7 and got == n * span + 7:
            fail(f"{what} gives {got} = L * M + 7: the position capped at 7, the notebook's "
                 f"T_s - 1 written as a number? Here segments are T_s = M = {span} long: "
                 "L * M + position, from the arguments.")
        ignored_arguments(fn, what, memory, (n, span, pos), got)
        if memory in ("window", "XL") and got - want in (1, -1, n, -n):
            fail(f"{what} gives {got}, expected {want}: " + _off_by_one(memory, n,
                                                                          got - want))
        fail(f"{what} gives {got}, expected {want}.")


def _off_by_one(memory: str, n: int, diff: int) -> str:
    """An off-by-one of the reach, once or in every layer, in words, with the rule."""
    per_layer = abs(diff) == n and n != 1
    how = (f"off by one in every layer ({abs(diff)} = L tokens "
           if per_layer else "off by one (one token ")
    how += ("too far). " if diff > 0 else "short). ")
    if memory == "window":
        return how + ("Each layer reaches exactly W = attn_len tokens back (attn_len "
                      "counts the previous tokens a token may attend to, itself "
                      "excluded), so L layers reach L * W.")
    return how + ("Each layer's memory adds exactly M = mem_len states, and a query at "
                  "position i of its segment also sees the i tokens before it there: "
                  "L * M + i (the query itself is at distance 0, not counted).")
