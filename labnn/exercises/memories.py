"""Checkers for notebook 05 (three memories, one budget).

Dimension letters: `N` examples, `T` tokens per example, `V` vocabulary, `L` layers, `D` width,
`M` remembered positions.

Each checker runs the learner's function on seeded inputs, compares it with `labnn.data.recall` (or with the
bytes the package's caches really hold) and, when it differs, recomputes the typical mistakes (labels that
start one position early, zeros where nothing is to be predicted, a distance off by one, counts instead of
fractions, numbers instead of bytes, one layer only, ...) to say which one was made.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..data.recall import IGNORE, accuracy_by_distance, make_recall
from ..feedback_kv import FeedbackKVConfig, FeedbackTransformerKV, KVState
from ..transformer import TransformerConfig, TransformerLM
from ..xl import TransformerXL, XLCache, XLConfig
from .checking import (close, exercise, expect_close, expect_dtype, expect_no_alias, expect_own_code, expect_shape,
                       expect_tensor, expect_unchanged, fail, snapshot)


def _diagnose(got: torch.Tensor, mistakes: list[tuple[torch.Tensor, str]]) -> None:
    for wrong, message in mistakes:
        if wrong.shape == got.shape and torch.equal(got.to(wrong.dtype), wrong):
            fail(message)


def _recall_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    n, t, n_values = 5, 9, 4
    filler = torch.randint(n_values, 2 * n_values, (n, t), generator=g)
    values = torch.tensor([0, 3, 1, 2, 3])
    positions = torch.tensor([0, 2, 7, 4, 1])  # the last position that leaves a label is T - 2 = 7
    return filler, values, positions


def _labels_from(values: torch.Tensor, t: int, keep: torch.Tensor, other: int = IGNORE) -> torch.Tensor:
    return torch.where(keep, values[:, None], torch.full((values.numel(), t), other))


@exercise("delayed-recall examples")
def check_make_recall(fn: Callable) -> None:
    """`fn(filler, values, positions)` -> `(x, y)`: `make_recall` (filler `[N, T]`, values and positions `[N]`)."""
    filler, values, positions = _recall_inputs()
    before = snapshot(filler=filler, values=values, positions=positions)
    out = fn(filler, values, positions)
    if filler.shape == before["filler"].shape and not torch.equal(filler, before["filler"]):
        n_, t_ = (filler != before["filler"]).nonzero()[0].tolist()
        fail(f"make_recall(filler, values, positions) modified its input `filler` in place (first change at "
             f"[n={n_}, t={t_}]): `x = filler` names the same tensor, it does not copy it, so writing into x "
             "wrote into the caller's filler. Start from a copy, `x = filler.clone()`, and write the values "
             "into x.")
    expect_unchanged(before, "make_recall(filler, values, positions)", filler=filler, values=values,
                     positions=positions)
    if not isinstance(out, tuple) or len(out) != 2:
        fail(f"make_recall should return a pair (x, y), got {type(out).__name__}.")
    x, y = out
    want_x, want_y = make_recall(filler, values, positions)
    if (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == want_y.shape
            and (x == IGNORE).any() and not (y == IGNORE).any()):
        fail("the outputs are swapped: the first holds IGNORE (labels), the second none (tokens). "
             "Return (x, y): the tokens first, then the labels.")
    n, t = filler.shape
    expect_shape(x, want_x.shape, "x")
    expect_dtype(x, torch.long, "x", "Token ids index an embedding table: keep them integers (torch.long).")
    expect_no_alias(x, "make_recall(filler, values, positions)", filler=filler)
    col, rows = torch.arange(t), torch.arange(n)
    shifted = filler.clone()
    shifted[rows, (positions + 1).clamp(max=t - 1)] = values
    _diagnose(x, [(shifted, "x has each value one position too late: write values[n] at positions[n] itself "
                            "(x[n, positions[n]] = values[n]).")])
    expect_close(x, want_x, "x", dims="n t")
    expect_shape(y, want_y.shape, "y")
    expect_dtype(y, torch.long, "y", "Labels are class indices for cross_entropy: a LongTensor, not floats.")
    p = positions[:, None]
    _diagnose(y, [
        (_labels_from(values, t, col >= p), "y labels the value's own position too: the value is in the input "
                                            "there, so the first position to predict it is positions[n] + 1."),
        (_labels_from(values, t, col > p + 1), "y starts one position late: position positions[n] + 1 (distance 1) "
                                               "must already be labelled with the value."),
        (_labels_from(values, t, col < p), "y labels the positions BEFORE the value (the comparison is the wrong "
                                           "way round): the value can only be recalled after it was seen."),
        (_labels_from(values, t, col > p, 0), "y holds 0 where there is nothing to predict: 0 is a value id, so the "
                                              "loss would teach the model to answer 0 there. Use IGNORE (-100)."),
        (x, "y is a copy of the tokens: the labels are the value (from positions[n] + 1 on), not the next tokens."),
    ])
    _explain_labels(y, want_y, positions)


def _explain_labels(y: torch.Tensor, want: torch.Tensor, positions: torch.Tensor) -> None:
    """Fail naming, in `[n, t]`, the first position labelled that should not be, left out, or holding a wrong id."""
    t_last = y.size(1) - 1
    extra = (y != IGNORE) & (want == IGNORE)
    missing = (y == IGNORE) & (want != IGNORE)
    wrong = (y != IGNORE) & (want != IGNORE) & (y != want)
    problems = []
    if extra.any():
        n, t = extra.nonzero()[0].tolist()
        problems.append(f"y labels [n={n}, t={t}], at or before the value (positions[{n}] = "
                        f"{positions[n].item()}): only positions AFTER the value are labelled")
    if missing.any():
        n, t = missing.nonzero()[0].tolist()
        problems.append(f"y leaves [n={n}, t={t}] unlabelled (IGNORE), though it comes after the value "
                        f"(positions[{n}] = {positions[n].item()}): every position after it is labelled, "
                        f"up to the last one (t = {t_last})")
    if wrong.any():
        n, t = wrong.nonzero()[0].tolist()
        problems.append(f"y holds {y[n, t].item()} at [n={n}, t={t}], expected values[{n}] = {want[n, t].item()}")
    if problems:
        fail("; ".join(problems) + ".")


def _accuracy_inputs() -> tuple[torch.Tensor, torch.Tensor, int]:
    g = torch.Generator().manual_seed(7)
    n, t, v = 6, 8, 5
    filler = torch.randint(3, v, (n, t), generator=g)
    values = torch.randint(0, 3, (n,), generator=g)
    positions = torch.tensor([0, 1, 3, 0, 2, 5])
    _, y = make_recall(filler, values, positions)
    logits = torch.randn(n, t, v, generator=g)
    right = torch.rand(n, t, generator=g) < 0.6  # about 60% right, the rest wrong, at random
    target = torch.where(right, y.clamp(min=0), (y.clamp(min=0) + 1) % 3)
    logits.scatter_(2, target[..., None], 10.0)
    return logits, y, t + 2  # distances T - 1 .. T + 2 occur nowhere: NaN there


@exercise("accuracy by distance")
def check_accuracy_by_distance(fn: Callable) -> None:
    """`fn(logits, y, max_distance)` -> `[max_distance]`, entry `d - 1` the accuracy at distance `d` (NaN if none)."""
    logits, y, max_d = _accuracy_inputs()
    expect_own_code(fn, "accuracy_by_distance(logits, y, max_distance)", accuracy_by_distance=accuracy_by_distance)
    before = snapshot(logits=logits, y=y)
    got = expect_tensor(fn(logits, y, max_d), "accuracy_by_distance(logits, y, max_distance)")
    expect_unchanged(before, "accuracy_by_distance(logits, y, max_distance)", logits=logits, y=y)
    want = accuracy_by_distance(logits, y, max_d)
    what = "accuracy_by_distance(logits, y, max_distance)"
    expect_shape(got, want.shape, what)
    got = got.double()
    empty = torch.isnan(want)
    if (got[empty] == 0).any():
        d = int(empty.nonzero()[0]) + 1
        fail(f"{what} gives 0 at d={d}, where no position lies that far from its value: an accuracy of "
             "0 there would read as 'always wrong'. Return NaN for distances that occur nowhere (0 / 0).")
    labelled = y != IGNORE
    n, t = y.shape
    hits = (logits.argmax(-1) == y) & labelled
    dist = labelled.long().cumsum(1) * labelled
    counts = torch.zeros(max_d + 1, dtype=torch.double).index_add_(0, dist.flatten(), hits.flatten().double())[1:]
    total = torch.zeros(max_d + 1, dtype=torch.double).index_add_(0, dist.flatten(), labelled.flatten().double())[1:]
    from_start = torch.arange(t).expand(n, t)
    by_t = torch.full((max_d,), float("nan"), dtype=torch.double)
    for d in range(1, max_d + 1):
        sel = labelled & (from_start == d)
        if sel.any():
            by_t[d - 1] = hits[sel].double().mean()
    fin = ~empty

    def same(wrong: torch.Tensor) -> bool:
        ok = ~torch.isnan(wrong) & fin
        return bool(ok.any()) and close(got[ok], wrong[ok].double(), atol=1e-6)

    mistakes = [
        (1 - want.double(), "that is the error rate (1 - accuracy): count the positions where argmax == y."),
        (counts, "those are counts of correct positions per distance: divide by how many positions have that "
                 "distance."),
        (torch.cat([want[1:], want[-1:]]).double(), "off by one: entry d - 1 is distance d (distance 1, the position "
                                                    "right after the value, goes to entry 0)."),
        (torch.cat([want[:1], want[:-1]]).double(), "off by one: entry d - 1 is distance d, the position right after "
                                                    "the value being distance 1 (not 0)."),
        (by_t, "the distance is measured from the start of the sequence: measure it from the value, t - p."),
        (torch.full_like(want, (hits.sum() / labelled.sum()).item()).double(),
         "that is the overall accuracy repeated: score each distance separately."),
    ]
    for wrong, message in mistakes:
        if same(wrong) and not same(want.double()):
            fail(message)
    if torch.isnan(got[fin]).any():
        d = int((torch.isnan(got) & fin).nonzero()[0]) + 1
        fail(f"{what} is NaN at d={d}, where positions at that distance exist: count only labelled positions "
             "(y != IGNORE) and group them by distance.")
    expect_close(got[fin], want[fin].double(), what + " (distances that occur)", atol=1e-6)
    short = 3  # distances up to T - 1 = 7 occur: entries for 4..7 must be left out
    got = expect_tensor(fn(logits, y, short), f"accuracy_by_distance(logits, y, max_distance={short})")
    if got.dim() == 1 and got.numel() > short:
        fail(f"accuracy_by_distance(logits, y, max_distance={short}) returns {got.numel()} entries, though "
             f"distances up to {y.size(1) - 1} occur: the result has exactly max_distance entries, and "
             "positions farther away are left out. (torch.bincount's minlength is a minimum: it grows past "
             "it; slice the result [:max_distance] or drop those positions first.)")
    want = accuracy_by_distance(logits, y, short)
    expect_shape(got, want.shape, f"accuracy_by_distance(logits, y, max_distance={short})")
    expect_close(got.double(), want.double(), f"accuracy_by_distance(logits, y, max_distance={short})",
                 atol=1e-6)


def _caches():
    """A real cache of each kind, after 12 tokens: (name, cache, reference bytes, typical wrong counts)."""
    torch.manual_seed(0)
    size = dict(vocab_size=11, d_model=16, n_heads=2, n_layers=3)
    tokens = torch.randint(11, (2, 12))
    tf = TransformerLM(TransformerConfig(**size, seq_len=16)).eval()
    xl = TransformerXL(XLConfig(**size, mem_len=8)).eval()
    fb = FeedbackTransformerKV(FeedbackKVConfig(**size, attn_len=8)).eval()
    with torch.no_grad():
        _, tf_cache = tf(tokens, use_cache=True)
        xl_cache = None
        for i in range(tokens.size(1)):  # one token at a time: the buffers get room to spare
            _, xl_cache = xl.step(tokens[:, i : i + 1], xl_cache)
        _, fb_state = fb(tokens)
    out = []
    for name, cache in (("transformer", tf_cache), ("Transformer-XL", xl_cache), ("feedback", fb_state)):
        if isinstance(cache, XLCache):
            layers = [tuple(buf) for buf in cache.kv]
            table = sum(r.nbytes for r in cache.rel_keys)
            allocated = sum(b._storage.keys_t.nbytes + b._storage.values.nbytes for b in cache.kv)
        elif isinstance(cache, KVState):
            layers, table, allocated = [tuple(cache.kv)], 0, None
        else:
            layers, table, allocated = list(cache), 0, None
        keys = sum(k.nbytes for k, _ in layers)
        want = keys + sum(v.nbytes for _, v in layers)
        first = layers[0][0].nbytes + layers[0][1].nbytes
        storage = sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in layers)
        out.append((name, cache, want, [
            (2 * want if isinstance(cache, KVState) else None,
             "that counts KVState.kv twice: kv already holds the keys AND the values ([2, B, H, M, D_h], "
             "keys at kv[0], values at kv[1]); count kv.nbytes once."),
            (storage, "that counts the whole storage behind the tensors (untyped_storage()), not the tensors: "
                      "keys and values can be views into a larger buffer (the transformer's, or XL's with room "
                      "kept free for future tokens). Count the tensors' own bytes, .nbytes."),
            (want // 4, "that counts numbers, not bytes: multiply by each element's size (.element_size(), 4 for "
                        "float32), or use .nbytes."),
            (want * 8, "that is bits: .nbytes (numel * element_size) is already in bytes."),
            (keys, "that counts the keys only: the cache holds values too."),
            (first, "that counts the first layer only: add every layer's keys and values."),
            (want + table, "that includes Transformer-XL's table of relative-position keys, which does not grow "
                           "with the text: count only the keys and values of the remembered positions."),
            (allocated, "that counts the whole storage behind Transformer-XL's KVBuffers, including the room "
                        "kept free for future tokens: count the remembered positions (iterate the buffer: "
                        "k, v = buffer)."),
        ]))
    return out


@exercise("cache bytes")
def check_cache_bytes(fn: Callable) -> None:
    """`fn(cache)` -> bytes of the keys and values a model keeps for the positions it remembers, for a
    `TransformerLM` cache (list of `(k, v)`), an `XLCache` and a `KVState`."""
    for name, cache, want, mistakes in _caches():
        try:
            got = fn(cache)
        except (TypeError, ValueError) as err:
            if not isinstance(cache, XLCache):
                raise
            fail(f"cache_bytes(<XLCache>) raised {type(err).__name__}: {err}. An XLCache is not a list of "
                 "(k, v) pairs: its keys and values are in cache.kv, a list of one KVBuffer per layer, each "
                 "unpacking as `k, v = buffer` (e.g. `for k, v in (tuple(b) for b in cache.kv)`).")
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            fail(f"cache_bytes(<{name} cache>) should return a number of bytes, got {type(got).__name__}.")
        if got == want:
            continue
        for wrong, message in mistakes:
            if wrong is not None and wrong != want and got == wrong:
                fail(f"for the {name} cache, {got:,} bytes: {message}")
        fail(f"cache_bytes(<{name} cache>) gives {got:,} bytes, expected {want:,} (the keys and values of every "
             "layer, for the positions the model remembers).")


def reach(memory: str, n_layers: int, span: int, position: int = 0) -> float:
    """How many tokens back a prediction can depend on (the reference of `check_reach`).

    Args:
        memory: `"window"` (attends to itself and `span` previous tokens), `"XL"` (memory of `span` states
            per layer, segments of `span` tokens too) or `"feedback"` (attends to `span` memory vectors).
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


_REACH_CASES = [("window", 2, 4, 0), ("window", 3, 5, 2), ("XL", 2, 8, 0), ("XL", 2, 8, 7), ("XL", 3, 4, 2),
                ("feedback", 2, 4, 0), ("feedback", 3, 2, 1)]


@exercise("reach of each memory")
def check_reach(fn: Callable) -> None:
    """`fn(memory, n_layers, span, position)` -> how many tokens back a prediction can see (`math.inf` if unbounded)."""
    for memory, n, span, pos in _REACH_CASES:
        what = f"reach({memory!r}, n_layers={n}, span={span}, position={pos})"
        got = fn(memory, n, span, pos)
        if not isinstance(got, (int, float)) or isinstance(got, bool) or got != got:
            fail(f"{what} should return a number of tokens (or math.inf), got {got!r}.")
        want = reach(memory, n, span, pos)
        if got == want:
            continue
        if memory == "feedback":
            fail(f"{what} gives {got}: the feedback memory is unbounded (math.inf). Step t reads the memory "
                 "vector of step t - 1, which read t - 2, ...: what step t - 1 knew is an input of step t.")
        if memory == "window":
            if got == span:
                fail(f"{what} gives {got}, the reach of one layer: each layer reads the layer below over "
                     "another W tokens, so L layers reach L * W.")
            if got == n * (span + 1) or got == n * span + 1:
                fail(f"{what} gives {got}: off by one. attn_len = W counts the previous tokens a token may "
                     "attend to (itself excluded), so one layer reaches exactly W back.")
        if memory == "XL":
            if got == n * span and pos:
                fail(f"{what} gives {got}: you left out the query's position in its segment; a query at "
                     "position i also sees the i tokens of its own segment before it.")
            if got == span + pos:
                fail(f"{what} gives {got}, the reach of one layer: each layer's memory holds states that "
                     "themselves saw M further back, so L layers reach L * M + i.")
            if got == n * (span + pos) and pos:
                fail(f"{what} gives {got}: the position in the segment adds once (the query's own "
                     "segment), not once per layer.")
        fail(f"{what} gives {got}, expected {want}.")
