"""Trial 52c: a blind learner trial of notebook 05's four exercises, after trial 50c's fixes.

Wrong answers that passed: a `make_recall` writing into two buffers kept per shape and
returning them at every call (a list of batches then holds the last one N times); an
`accuracy_by_distance` stacking a NaN made on the CPU (`torch.tensor(float("nan"))`) with
its results (the device round ran where no distance was empty, and the stand-in device let a
0-dim CPU tensor into `torch.stack`, which CUDA refuses); a reach of one layer, never tried for a window or a feedback memory. Messages: every count half the
right one was told "the keys only" (a window of positions, a division by 2, half the
positions), and a transformer's cache cut to its last positions, or L = 2 written as a number,
got only the expected number of bytes.
"""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.three_memories import (check_accuracy_by_distance, check_cache_bytes,
                                            check_make_recall, check_reach)
from labnn.feedback.kv import KVState
from labnn.xl.cache import XLCache

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
IGN = -100


def _make(f, v, p):
    n, t = f.shape
    x = f.clone()
    x[torch.arange(n, device=f.device), p] = v
    after = torch.arange(t, device=f.device)[None] > p[:, None]
    return x, torch.where(after, v[:, None], torch.full_like(f, IGN))


def _make_buffers(which):
    kept = {}

    def make(f, v, p):
        key = (tuple(f.shape), f.device)
        if key not in kept:
            kept[key] = (torch.empty_like(f), torch.empty_like(f))
        out = _make(f, v, p)
        for i in which:
            kept[key][i].copy_(out[i])
        return tuple(kept[key][i] if i in which else out[i] for i in (0, 1))
    return make


def _make_arange_kept():
    ar = {}

    def make(f, v, p):
        n, t = f.shape
        key = (t, f.device)
        if key not in ar:
            ar[key] = torch.arange(t, device=f.device)
        x = f.clone()
        x[torch.arange(n, device=f.device), p] = v
        return x, torch.where(ar[key] > p[:, None], v[:, None], torch.full_like(f, IGN))
    return make


BUFFERS = r"(?i)overwr.*(kept|buffer)|(kept|buffer).*overwr"
case("make_buffers_reused", check_make_recall, _make_buffers((0, 1)), BUFFERS)
case("make_y_buffer_reused", check_make_recall, _make_buffers((1,)), BUFFERS)
case("make_x_buffer_reused", check_make_recall, _make_buffers((0,)), BUFFERS)
RIGHT["make_right"] = (check_make_recall, _make)
RIGHT["make_arange_kept"] = (check_make_recall, _make_arange_kept())


def _counts(l, y, m):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = (l.argmax(-1) == y) & lab
    keep = lab & (d <= m)
    z = torch.zeros(m, dtype=torch.long, device=y.device)
    c = z.index_add(0, d[keep] - 1, torch.ones_like(d[keep]))
    return z.index_add(0, d[keep] - 1, hit[keep].long()), c


def acc_cpu_nan(l, y, m):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = l.argmax(-1) == y
    res = []
    for k in range(1, m + 1):
        s = d == k
        c = s.sum()
        res.append((hit & s).sum() / c if c > 0 else torch.tensor(float("nan")))
    return torch.stack(res).to(l.dtype)


def acc_device_nan(l, y, m):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = l.argmax(-1) == y
    res = []
    for k in range(1, m + 1):
        s = d == k
        c = s.sum()
        res.append((hit & s).sum() / c if c > 0 else
                   torch.tensor(float("nan"), device=l.device))
    return torch.stack(res).to(l.dtype)


def acc_where_cpu_nan(l, y, m):  # a CPU number as an operand: CUDA takes it
    h, c = _counts(l, y, m)
    return torch.where(c > 0, h / c.clamp(min=1), torch.tensor(float("nan"))).to(l.dtype)


def acc_counts_in_dtype(l, y, m):
    h, c = _counts(l, y, m)
    return h.to(l.dtype) / c.to(l.dtype)


def acc_hits_summed_in_dtype(l, y, m):
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hit = ((l.argmax(-1) == y) & lab).to(l.dtype)
    out = [hit[d == k].sum() / (d == k).sum() for k in range(1, m + 1)]
    return torch.stack(out).to(l.dtype)


def acc_float32_division(l, y, m):
    h, c = _counts(l, y, m)
    return (h.float() / c.float()).to(l.dtype)


def acc_float64_division(l, y, m):
    h, c = _counts(l, y, m)
    return (h.double() / c.double()).to(l.dtype)


def acc_mean_in_dtype(l, y, m):  # the notebook's: a mean accumulates in float32
    lab = y != IGN
    d = lab.long().cumsum(1) * lab
    hits = (l.argmax(-1) == y).to(l.dtype)
    out = l.new_full((m,), float("nan"))
    for k in range(1, m + 1):
        if (d == k).any():
            out[k - 1] = hits[d == k].mean()
    return out


case("acc_cpu_nan_stacked", check_accuracy_by_distance, acc_cpu_nan,
     r"(?i)stack.*CPU|CPU.*stack")
# counts cast to bfloat16 before dividing are off by a unit of bfloat16's rounding at most,
# the size of the rounding of any bfloat16 result: right (the trial had them wrong)
RIGHT["acc_counts_in_bfloat16"] = (check_accuracy_by_distance, acc_counts_in_dtype)
RIGHT["acc_hits_summed_in_bfloat16"] = (check_accuracy_by_distance, acc_hits_summed_in_dtype)
RIGHT["acc_device_nan"] = (check_accuracy_by_distance, acc_device_nan)
RIGHT["acc_where_cpu_nan"] = (check_accuracy_by_distance, acc_where_cpu_nan)
RIGHT["acc_float32_division"] = (check_accuracy_by_distance, acc_float32_division)
RIGHT["acc_float64_division"] = (check_accuracy_by_distance, acc_float64_division)
RIGHT["acc_mean_in_dtype"] = (check_accuracy_by_distance, acc_mean_in_dtype)


def _reach(memory, n_layers, span, position=0):
    if memory == "window":
        return n_layers * span
    return n_layers * span + position if memory == "XL" else math.inf


def reach_feedback_one_layer(memory, n_layers, span, position=0):
    if memory == "feedback":
        return math.inf if n_layers > 1 else span
    return _reach(memory, n_layers, span, position)


def reach_window_one_layer(memory, n_layers, span, position=0):
    if memory == "window" and n_layers == 1:
        return span + 1
    return _reach(memory, n_layers, span, position)


case("reach_feedback_one_layer", check_reach, reach_feedback_one_layer,
     r"(?i)unbounded.*one layer|one layer.*unbounded")
case("reach_window_one_layer", check_reach, reach_window_one_layer, r"(?i)off by one")
RIGHT["reach_right"] = (check_reach, _reach)


def _nb(t):
    return t.numel() * t.element_size()


def _bytes_with(per_pair=lambda k, v: _nb(k) + _nb(v), state=lambda s: _nb(s.kv),
                layers=None):
    def fn(c):
        if isinstance(c, KVState):
            return state(c)
        pairs = [tuple(b) for b in c.kv] if isinstance(c, XLCache) else list(c)
        if layers is not None and not isinstance(c, XLCache):
            return layers(pairs)
        return sum(per_pair(k, v) for k, v in pairs)
    return fn


WINDOW = r"(?i)4 of the \d+ positions|last 4"
case("bytes_state_last_4_positions", check_cache_bytes,
     _bytes_with(state=lambda s: _nb(s.kv[..., -4:, :])), WINDOW)
case("bytes_state_halved", check_cache_bytes, _bytes_with(state=lambda s: _nb(s.kv) // 2),
     r"(?i)divi.*by 2")
case("bytes_state_keys_only", check_cache_bytes, _bytes_with(state=lambda s: _nb(s.kv[0])),
     r"(?i)keys only.*kv\[0\]|kv\[0\].*keys only")
case("bytes_keys_only", check_cache_bytes, _bytes_with(per_pair=lambda k, v: _nb(k)),
     r"(?i)keys only")
case("bytes_pairs_last_4_positions", check_cache_bytes,
     _bytes_with(per_pair=lambda k, v: _nb(k[:, :, -4:]) + _nb(v[:, :, -4:])),
     r"(?i)every position.*attn_len|attn_len.*every position")
case("bytes_pairs_second_half_of_positions", check_cache_bytes,
     _bytes_with(per_pair=lambda k, v: _nb(k[:, :, k.size(2) // 2:]) + _nb(
         v[:, :, v.size(2) // 2:])), r"(?i)half (of )?the positions")
case("bytes_two_layers_as_a_number", check_cache_bytes,
     _bytes_with(layers=lambda pairs: 2 * (_nb(pairs[0][0]) + _nb(pairs[0][1]))),
     r"(?i)layers.*number|number.*layers")
RIGHT["bytes_right"] = (check_cache_bytes, _bytes_with())
RIGHT["bytes_state_unbound"] = (check_cache_bytes,
                                _bytes_with(state=lambda s: sum(_nb(t) for t in s.kv)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
