"""Trial 53d: a blind learner trial of notebook 03's exercises (267 runs).

Wrong answers that passed: a relative bias cached between calls (functools.lru_cache on
(table, s), a dict keyed on s, the shape, dtype and device: stale after an optimizer step
changes the table in place); int8 distances (wrong past s = 127, never tried); an attention
stabilized by the max of a batch entry (over heads and keys, or of head 0), by the row's
mean or its first score (right only for scores shifted by a constant per batch entry); a
memory vector that runs labnn's own LayerMix. Misleading: a bias memoized per s was told to
drop a .float(); a scale written as 4.0 (sqrt(16), the notebook's head width) was told it
divided by d_head, sqrt(8) or 8.0 got a bare "differs"; a layer count written as 3
(`.view(3, 1, 1)`) ended in the learner's own RuntimeError.
"""
import functools
import math
import types

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_feedback_attention,
                                                  check_memory_vector, check_relative_bias)
from labnn.feedback.layer import LayerMix

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
KEPT = r"(?i)kept between calls.*recompute"


def _index(table, s, dtype=torch.long):
    d = torch.arange(s, 0, -1, device=table.device, dtype=dtype)
    return (d.clamp(max=table.size(1)) - 1).long()


def _bias(table, s):
    return table[:, _index(table, s)]


@functools.lru_cache(maxsize=None)
def rb_lru_cache(table, s):
    return _bias(table, s)


def _memo(key):
    cache = {}

    def relative_bias(table, s):
        k = key(table, s)
        if k not in cache:
            cache[k] = _bias(table, s)
        return cache[k]
    return relative_bias


case("rb_lru_cache", check_relative_bias, rb_lru_cache, KEPT)
case("rb_memo_by_shape", check_relative_bias,
     _memo(lambda t, s: (s, tuple(t.shape), t.dtype, t.device)), KEPT)
case("rb_memo_by_s", check_relative_bias, _memo(lambda t, s: s), KEPT)
case("rb_int8_distances", check_relative_bias,
     lambda table, s: table[:, _index(table, s, torch.int8)], r"127.*int8")
RIGHT["rb_right"] = (check_relative_bias, _bias)
RIGHT["rb_int16_distances"] = (check_relative_bias,
                               lambda table, s: table[:, _index(table, s, torch.int16)])
RIGHT["rb_index_cached_by_all_it_reads"] = (
    check_relative_bias,
    lambda table, s, _c={}: table[:, _c.setdefault((s, table.size(1), table.device),  # noqa
                                                   _index(table, s))])
RIGHT["rb_python_list"] = (check_relative_bias, lambda table, s: table[:, [
    min(s - j, table.size(1)) - 1 for j in range(s)]])


def _attention(shift):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
        e = (s - shift(s)).exp()
        return torch.einsum("bhs,bhsd->bhd", e / e.sum(-1, keepdim=True), v)
    return feedback_attention


ROW_MAX = r"each row's own max.*dim=-1"
case("fa_row_mean", check_feedback_attention, _attention(lambda s: s.mean(-1, keepdim=True)),
     r"(?i)mean.*" + ROW_MAX)
case("fa_first_score", check_feedback_attention, _attention(lambda s: s[..., :1]),
     r"(?i)first score.*" + ROW_MAX)
case("fa_max_over_heads_and_keys", check_feedback_attention,
     _attention(lambda s: s.amax(dim=(1, 2), keepdim=True)), r"(?i)heads.*" + ROW_MAX)
case("fa_max_of_head_0", check_feedback_attention,
     _attention(lambda s: s[:, :1].amax(-1, keepdim=True)), r"(?i)heads.*" + ROW_MAX)
RIGHT["fa_row_max"] = (check_feedback_attention,
                       _attention(lambda s: s.amax(-1, keepdim=True)))
RIGHT["fa_row_max_values"] = (check_feedback_attention,
                              _attention(lambda s: s.max(-1, keepdim=True).values.detach()))
RIGHT["fa_logsumexp"] = (check_feedback_attention,
                         _attention(lambda s: s.logsumexp(-1, keepdim=True)))


def _scaled(scale):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        s = torch.einsum("bhd,bhsd->bhs", q, k) / scale(q) + bias
        return torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v)
    return feedback_attention


WRITTEN = r"(?i)written as a number.*q\.shape\[-1\]"
case("fa_scale_written_4", check_feedback_attention, _scaled(lambda q: 4.0), WRITTEN)
case("fa_scale_written_sqrt8", check_feedback_attention, _scaled(lambda q: math.sqrt(8)),
     WRITTEN)
case("fa_scale_written_8", check_feedback_attention, _scaled(lambda q: 8.0), WRITTEN)
case("fa_scale_d_head", check_feedback_attention, _scaled(lambda q: q.size(-1)),
     r"divided q·k by d_head: divide by sqrt")
RIGHT["fa_scale_sqrt_size"] = (check_feedback_attention, _scaled(lambda q: q.size(-1) ** 0.5))
RIGHT["fa_scale_tensor"] = (check_feedback_attention, _scaled(
    lambda q: torch.tensor(q.size(-1), dtype=q.dtype, device=q.device).sqrt()))


def mv_functional_call(xs, w):
    return torch.func.functional_call(LayerMix(len(w)), {"logits": w}, (xs,))


def mv_weights(xs, w):
    return (LayerMix.weights(types.SimpleNamespace(logits=w))[:, None, None] * xs).sum(0)


def mv_swapped_logits(xs, w):
    mix = LayerMix(len(w))
    del mix.logits
    mix.logits = w
    return mix(xs)


LAYER_MIX = r"runs labnn\.feedback\.layer\.LayerMix\.(forward|weights)"
case("mv_labnn_functional_call", check_memory_vector, mv_functional_call, LAYER_MIX)
case("mv_labnn_weights", check_memory_vector, mv_weights, LAYER_MIX)
case("mv_labnn_logits_swapped", check_memory_vector, mv_swapped_logits, LAYER_MIX)
case("mv_layers_written_3", check_memory_vector,
     lambda xs, w: (torch.softmax(w, 0).view(3, 1, 1) * xs).sum(0),
     r"(?i)written as a number.*3.*(w|xs)\.(size|shape)")
RIGHT["mv_right"] = (check_memory_vector,
                     lambda xs, w: (w.softmax(0)[:, None, None] * xs).sum(0))
RIGHT["mv_view_from_w"] = (check_memory_vector,
                           lambda xs, w: (w.softmax(0).view(len(w), 1, 1) * xs).sum(0))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
