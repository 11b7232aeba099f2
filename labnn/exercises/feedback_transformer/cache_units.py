"""More named slips of notebook 03's `cache_bytes`, each told apart by a rerun at other
sizes: sizes in MiB or MB (they round to 0 at the check's sizes), an argument written as
a number (a size that stays put when the argument doubles), a size divided by
bytes_per_number, both sizes a fixed fraction of the bytes (a head's width, d_model // 4,
in place of d_model). Called by `check_cache_bytes` before its last, generic message
(`fixed_arguments` also before its check of the factor 2: 2 bytes written out halves both
sizes at 4 bytes). Also a result kept between calls, looked up by some of the arguments
(`kept_result`), which `kept_rounds` calls for where the check's first arguments return;
either size counting a token or two too many or too few (`token_count`).
"""

from __future__ import annotations

import itertools
import numbers
from typing import Callable

from labnn.exercises.grading import call, fail

NAMES = ("n_layers", "d_model", "n_tokens", "bytes_per_number")
UNITS = ((1024, "KiB (divided by 1024)"), (1000, "kB (divided by 1000)"),
         (1024 ** 2, "MiB (divided by 1024²)"), (10 ** 6, "MB (divided by 10⁶)"))
BIG = (4, 1024, 1024, 4)  # 32 MiB of transformer cache: every unit shows
BEYOND_INT32 = (32, 4096, 8192, 2)  # 2**32 bytes of transformer cache: int32 wraps to 0
ODD = (7, 1001, 12345, 3)  # counts of many significant bits, past 2**24: float32 rounds them
FIRST = (3, 128, 256, 4)  # the check's first call, whose arguments come back one by one


def expect_two_ints(got, tf: int, fb: int, what: str) -> None:
    """`got` holds two whole numbers (a tuple; a list or NumPy ints pass too: whole
    numbers of bytes; floats are named later), not `(tf, fb)` wrapped as int32 wraps
    them."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        fail(f"{what}: return the two sizes as a tuple, (transformer_bytes, "
             f"feedback_bytes), got {got!r}.")
    for name, value in zip(("transformer_bytes", "feedback_bytes"), got):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            fail(f"{what}: {name} should be an int, got {type(value).__name__}: {value!r}.")
    wrapped = tuple((n + 2 ** 31) % 2 ** 32 - 2 ** 31 for n in (tf, fb))
    if tuple(got) != (tf, fb) and tuple(got) == wrapped:
        fail(f"{what} gives {tuple(got)}, expected ({tf}, {fb}): the count overflows past 2**31: "
             "a count in int32 (NumPy's prod with dtype=int32, or a torch int32 tensor); "
             "use Python ints.")
    if tuple(got) != (tf, fb) and all(abs(g - n) <= n * 2 ** -20 for g, n in zip(got, (tf, fb))):
        fail(f"{what} gives {tuple(got)}, expected ({tf}, {fb}): off in the last digits, as "
             "float32 rounds a whole number past 2**24: a count in float32 (a torch tensor "
             "of floats, np.float32); use Python ints.")


def overflowed(err: Exception) -> None:
    """A `diagnose`: a count in a torch int32 tensor, which raises past 2**31."""
    if isinstance(err, RuntimeError) and "int32 without overflow" in str(err):
        fail("your count overflows int32 (the check's largest cache is 2**32 bytes), and "
             f"torch raised ({str(err)[:60]}): a count in a torch int32 tensor; use Python "
             "ints.")


def sizes(n_layers: int, d_model: int, n_tokens: int, size: int) -> tuple[int, int]:
    """The right `(transformer_bytes, feedback_bytes)`."""
    return 2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size


def _run(fn: Callable, *args) -> tuple | None:
    """`fn(*args)` when it runs and gives two numbers, else None."""
    try:
        got = fn(*args)
    except Exception:  # noqa: BLE001 (the check's own call ran: a rerun only names)
        return None
    if isinstance(got, (tuple, list)) and len(got) == 2 and all(
            isinstance(x, numbers.Real) and not isinstance(x, bool) for x in got):
        return tuple(got)
    return None


def fixed_arguments(fn: Callable, args: tuple, got: tuple, what: str,
                    names: tuple[str, ...] = NAMES) -> None:
    """Fail when a size of `got = fn(*args)` stays put where an argument of `names` doubles
    and the right size does not: the argument written as a number (2 bytes in place of
    bytes_per_number, which a check of the factor 2 would name first), or left out."""
    for i, name in ((i, n) for i, n in enumerate(NAMES) if n in names):
        more = args[:i] + (2 * args[i],) + args[i + 1:]
        again = _run(fn, *more)
        stuck = [n for n, x, y, r, r2 in zip(("transformer_bytes", "feedback_bytes"), got,
                                             again or got, sizes(*args), sizes(*more))
                 if again and r2 != r and x == y]
        if stuck:
            fail(f"{what}: {' and '.join(stuck)} stay{'s' * (len(stuck) == 1)} the same when "
                 f"{name} doubles ({args[i]} -> {2 * args[i]}): {name} is written as a "
                 "number or left out; compute every size from the arguments.")


def other_slips(fn: Callable, args: tuple, got: tuple, what: str) -> None:
    """Fail by name when `got = fn(*args)` is one of the slips above."""
    (a, b), (tf, fb), size = got, sizes(*args), args[3]
    if a * 100 <= tf and b * 100 <= fb:  # far too small: another unit than bytes?
        big, (big_tf, big_fb) = _run(fn, *BIG), sizes(*BIG)
        for f, unit in UNITS if big else ():
            if abs(big[0] - big_tf / f) < 1 and abs(big[1] - big_fb / f) < 1:
                fail(f"{what}: your sizes are in {unit}, here ({a}, {b}): return bytes, "
                     f"({tf}, {fb}) here.")
    layer_count(fn, args, got[0], what)
    fixed_arguments(fn, args, got, what)
    more = args[:3] + (2 * size,)
    if size > 1 and (a, b) == (tf // size ** 2, fb // size ** 2) and _run(fn, *more) == tuple(
            n // (2 * size) ** 2 for n in sizes(*more)):
        fail(f"{what}: you divided by bytes_per_number: each number takes bytes_per_number "
             "bytes, so multiply: 2 * n_layers * d_model * n_tokens * bytes_per_number.")
    for k in range(3, 17):
        small = _run(fn, 2, 64, 10, 2)
        if (a * k, b * k) == (tf, fb) and small and (small[0] * k, small[1] * k) == sizes(
                2, 64, 10, 2):
            head = ("d_model // 4, one head's width (the notebook's models have 4 heads), in "
                    "place of d_model? " if k == 4 else "")
            fail(f"{what}: both sizes are 1/{k} of the bytes, here and at other sizes: "
                 f"{head}A key or a value holds d_model numbers (all heads together): "
                 "2 * n_layers * d_model * n_tokens * bytes_per_number.")


def token_count(got: tuple, args: tuple, what: str) -> None:
    """Fail when a size of `got`, either or both, counts `n_tokens + j` tokens (0 < |j| <= 2):
    the newest token or the first left out (n_tokens - 1), the next one counted too."""
    n_tokens, right = args[2], sizes(*args)
    off = [(name, v // (r // n_tokens) - n_tokens) for v, r, name in zip(
        got, right, ("transformer_bytes", "feedback_bytes"))
        if v % (r // n_tokens) == 0 and 0 < abs(v // (r // n_tokens) - n_tokens) <= 2]
    if off:
        fail(f"{what}: " + " and ".join(
            f"{n} counts {('one', 'two')[abs(j) - 1]} token{'s' * (abs(j) > 1)} too "
            f"{'many' if j > 0 else 'few'}, n_tokens {'+-'[j < 0]} {abs(j)}" for n, j in off)
            + ": each cache holds the keys and values of all n_tokens tokens seen, the "
            "first's and the newest's too (the next token reads them): count n_tokens.")


def common_factor(fn: Callable, args: tuple, got: tuple, what: str) -> None:
    """Fail when both sizes are the same whole `k > 1` times the right ones, here and with
    each argument doubled in turn: a factor written into both (`* 4` for the heads), not a
    count of layers (an L + 1 that happens to equal k at this call's L) nor an argument
    written as a number (bytes_per_number 4 where the call gives 2)."""
    (tf, fb), more = sizes(*args), (2 * args[0],) + args[1:]
    k = got[0] // tf if got[0] % tf == 0 else 0
    if k > 1 and got == (k * tf, k * fb) and all(_run(fn, *other) == tuple(
            k * x for x in sizes(*other)) for other in (args[:i] + (2 * args[i],) + args[i + 1:]
                                                     for i in range(4))):
        heads = " (the heads? a key of d_model numbers holds every head's d_head)"
        fail(f"{what}: both sizes are {k} times too large, also with n_layers = {more[0]}: a "
             f"factor {k} in both" + heads * (not k & (k - 1)) + ": 2 * n_layers * d_model * "
             "n_tokens * bytes_per_number and 2 * d_model * n_tokens * bytes_per_number.")


def layer_count(fn: Callable, args: tuple, got: int, what: str) -> None:
    """Fail when `got`, the transformer's bytes, is `c·(n_layers + j)·d_model·n_tokens·
    bytes_per_number` (c = 2 or 1, 0 < |j| <= 3), here and again with n_layers doubled: a
    layer count off by j (`n_layers + 2`), with or without the factor 2."""
    n_layers, d_model, n_tokens, size = args
    unit, more = d_model * n_tokens * size, (2 * n_layers,) + args[1:]
    again = _run(fn, *more)
    for c in (2, 1):
        j = got // unit // c - n_layers
        if got % (c * unit) or not 0 < abs(j) <= 3 or n_layers + j < 0 or not again or \
                again[0] != c * (2 * n_layers + j) * unit:
            continue
        count = f"n_layers {'+-'[j < 0]} {abs(j)}"
        counted = (f"{count} = {n_layers + j} layers of keys and values" if c == 2 else
                   f"({count})·d_model = {n_layers + j}·{d_model} numbers per token")
        fail(f"{what}: transformer_bytes counts {counted} (also with n_layers = "
             f"{2 * n_layers}): the transformer caches a key and a value in each of its "
             f"n_layers = {n_layers} layers, 2 * n_layers * d_model * n_tokens * "
             "bytes_per_number.")


def feedback_count(fn: Callable, args: tuple, got: int, what: str) -> None:
    """Fail when `got`, the feedback model's bytes, is `c·d_model·n_tokens·bytes_per_number`
    with a whole `c` above 2, the same again with n_layers doubled (and twice as large with
    d_model or bytes_per_number doubled): a fixed count of numbers per token (4·D: two keys
    and two values?); or with `c = 2L + 1`: keys and values per layer, and the memory; or
    `c = 2(L + 1)`: a key and a value for each entry of the mix."""
    unit, more = args[1] * args[2] * args[3], (2 * args[0],) + args[1:]
    if got == (2 * args[0] + 1) * unit:
        fail(f"{what}: feedback_bytes counts (2·n_layers + 1)·d_model numbers per token, a "
             "key and a value per layer and the memory vector (a model without shared_kv): "
             "with shared_kv all layers read ONE key and ONE value per token; count only "
             "those, 2 * d_model * n_tokens * bytes_per_number.")
    if got == 2 * (args[0] + 1) * unit:
        fail(f"{what}: feedback_bytes counts 2·(n_layers + 1)·d_model numbers per token, a key "
             "and a value for each of the L + 1 entries the memory mixes: the mix makes ONE "
             "memory vector per token, and with shared_kv it has one key and one value, read "
             "by all layers: 2 * d_model * n_tokens * bytes_per_number.")
    again = _run(fn, *more)
    doubled = [_run(fn, *args[:i], 2 * args[i], *args[i + 1:]) for i in (1, 3)]  # D, bytes
    if got % unit == 0 and got // unit > 2 and again and again[1] == got and all(
            r and r[1] == 2 * got for r in doubled):  # 1: a key alone; bytes written out: no
        fail(f"{what}: feedback_bytes counts {got // unit}·d_model numbers per token (also "
             f"with n_layers = {more[0]}): the feedback model caches one key and one value per "
             "token, shared by all layers, 2 * d_model * n_tokens * bytes_per_number.")


def kept_result(got, args: tuple, seen: dict, what: str) -> None:
    """Fail when `got = fn(*args)`, not the right sizes, is what an earlier call (`seen`:
    arguments -> result, which this call joins) gave for some of the same arguments: a
    result kept between calls, looked up by those."""
    right, got = sizes(*args), tuple(got)
    for earlier, result in seen.items():
        shared = [n for n, x, y in zip(NAMES, args, earlier) if x == y]
        if shared and got == result != right:
            said = (", ".join(shared[:-1]) + " and " if shared[1:] else "") + shared[-1]
            fail(f"{what} gives {got}, the result of the earlier call cache_bytes"
                 f"{earlier}, with the same {said}: a result kept between calls, looked up "
                 f"by {'those' if shared[1:] else 'it'} (a dict, a global, a default "
                 f"argument); expected {right}: "
                 "compute both sizes from all four arguments at every call.")
    seen[args] = got


def kept_rounds(fn: Callable, seen: dict) -> None:
    """`fn` again where some of the check's first arguments come back, the others new at
    every call (each argument alone, then two, then three of them): a result kept per
    argument (a dict keyed on n_tokens) returns an earlier call's sizes there."""
    keeps = [k for n in (1, 2, 3) for k in itertools.combinations(range(4), n)]
    for j, keep in enumerate(keeps):
        other = (5 + j, 64 + 2 * j, 40 + j, (2, 1, 8)[j % 3])  # none of FIRST's
        args = tuple(a if i in keep else b for i, (a, b) in enumerate(zip(FIRST, other)))
        what = f"cache_bytes{args}"
        got = call(fn, what, *args)
        expect_two_ints(got, *sizes(*args), what)
        kept_result(got, args, seen, what)
        if tuple(got) != sizes(*args):
            fail(f"{what} gives {tuple(got)}, expected {sizes(*args)}, though right at "
                 "the check's first sizes: compute both sizes from all four arguments, "
                 "2 * n_layers * d_model * n_tokens * bytes_per_number and 2 * d_model "
                 "* n_tokens * bytes_per_number.")
