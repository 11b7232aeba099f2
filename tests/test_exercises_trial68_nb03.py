"""Trial 68, notebook 03 (a learner's trial and fix). A cache_bytes counting the feedback
cache one token short (n_tokens - 1) got the generic 'got ..., expected ...': a count off by
a token or two in either size is named. A relative bias with .clamp(min=M - 1) for max (every
key given entry M - 2) got 'differs': every key given one entry is named. The token loop's
check ran a model of GPT-2's 0.02 weights, whose memory moved the logits by ~1e-3: a plain
mean of the layers changed them by 0.0016, and a mix with a small content term was told
'm_1 (m_0 is right) ... not at every step the same'. The check's model now has weights of
std 1/sqrt(fan_in), where a wrong memory moves the logits far past the tolerance, and a
memory the logits hide (norm_mem undoes a scale) is named at m_0.
"""
import math

import pytest
import torch
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_relative_bias,
                                                  check_token_loop)
from labnn.exercises.feedback_transformer.token_loop import _model

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)

# Exercise 5: a size counting a token or two too many or too few
case("cache_bytes_feedback_one_short", check_cache_bytes,
     lambda L, d, n, b: (2 * L * d * n * b, 2 * d * (n - 1) * b),
     r"feedback_bytes counts one token too few, n_tokens - 1: .*count n_tokens")
case("cache_bytes_transformer_one_short", check_cache_bytes,
     lambda L, d, n, b: (2 * L * d * (n - 1) * b, 2 * d * n * b),
     r"^(?!.*feedback_bytes)cache sizes: cache_bytes.*transformer_bytes counts one token too few")
case("cache_bytes_feedback_one_more", check_cache_bytes,
     lambda L, d, n, b: (2 * L * d * n * b, 2 * d * (n + 1) * b),
     r"feedback_bytes counts one token too many, n_tokens \+ 1")
case("cache_bytes_both_one_short", check_cache_bytes,
     lambda L, d, n, b: (2 * L * d * (n - 1) * b, 2 * d * max(n - 1, 0) * b),
     r"transformer_bytes counts one token too few.* and feedback_bytes counts one token too few")
case("cache_bytes_feedback_two_short", check_cache_bytes,
     lambda L, d, n, b: (2 * L * d * n * b, 2 * d * (n - 2) * b),
     r"feedback_bytes counts two tokens too few, n_tokens - 2")
RIGHT["cache_bytes_prod"] = (check_cache_bytes, lambda L, d, n, b: (
    math.prod((2, L, d, n, b)), math.prod((2, L, d, n, b)) // L))


# Exercise 2: every key given one entry, a clamp(min=...) where max= was meant
def _bias(index):
    return lambda table, s: table[:, index(torch.arange(s, 0, -1), table.size(1))]


SAME = r"every key gets the same entry, table\[:, {}\] \(a \.clamp\(min=\.\.\.\) for max\?\)"
case("relative_bias_clamp_min_m_minus_1", check_relative_bias,
     _bias(lambda d, m: d.clamp(min=m - 1) - 1), SAME.format(3))
case("relative_bias_clamp_min_2", check_relative_bias,
     _bias(lambda d, m: d.clamp(min=2) - 1), SAME.format(1))
case("relative_bias_clamp_min_m_no_minus_1", check_relative_bias,
     _bias(lambda d, m: d.clamp(min=m - 1)), r"every key gets the last entry, table\[:, -1\]")
RIGHT["relative_bias_index_clamped"] = (check_relative_bias, _bias(
    lambda d, m: (d - 1).clamp(max=m - 1)))
RIGHT["relative_bias_index_select"] = (check_relative_bias, lambda table, s: table.index_select(
    1, torch.arange(s, 0, -1, device=table.device).clamp(max=table.size(1)) - 1))


# Exercise 4: a memory a little wrong
def _weighted(weights):
    return lambda model, outs: torch.einsum("lb,lbd->bd", weights(model, torch.stack(outs)),
                                            torch.stack(outs))


def _content(c):  # each row's weights: the logits plus c times the mean of each output
    return _weighted(lambda model, xs: (model.mix.logits[:, None] + c * xs.mean(-1)).softmax(0))


SLIGHTLY_WRONG = {
    "plain_mean": lambda model, outs: torch.stack(outs).mean(0),
    "content_term": _content(1.0),
    "content_term_small": _content(0.1),
}
ROWS = r"memory vector m_0: its weights of the layers differ between the batch rows"
case("token_loop_plain_mean", check_token_loop, feedback_token_loop(SLIGHTLY_WRONG["plain_mean"]),
     r"memory vector is a plain mean of the layer outputs")
case("token_loop_content_term", check_token_loop,
     feedback_token_loop(SLIGHTLY_WRONG["content_term"]), ROWS)
case("token_loop_content_term_small", check_token_loop,
     feedback_token_loop(SLIGHTLY_WRONG["content_term_small"]), ROWS)
case("token_loop_temperature", check_token_loop, feedback_token_loop(_weighted(
    lambda model, xs: (model.mix.logits * 1.1).softmax(0)[:, None].expand(-1, xs.size(1)))),
     r"m_0 weights the layers by softmax\(model\.mix\.logits \* 1\.1\), a temperature")
case("token_loop_weights_plus_0_01", check_token_loop, feedback_token_loop(_weighted(
    lambda model, xs: (model.mix.logits.softmax(0) + 0.01)[:, None].expand(-1, xs.size(1)))),
     r"m_0: its weights of the layers, .* sum to 1\.03, not one")
RIGHT["token_loop_einsum_mix"] = (check_token_loop, feedback_token_loop(_weighted(
    lambda model, xs: model.mix.logits.softmax(0)[:, None].expand(-1, xs.size(1)))))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


@pytest.mark.parametrize("name", list(SLIGHTLY_WRONG))
def test_a_wrong_memory_moves_the_checks_logits(name):
    """On the check's model, a slightly wrong memory moves the logits far past the check's
    tolerance (atol 1e-5, rtol 1e-4): the first comparison refuses it, not a later round."""
    model = _model()
    tokens = torch.randint(0, 9, (2, 7), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want = model(tokens)[0]
        got = feedback_token_loop(SLIGHTLY_WRONG[name])(model, tokens)
    assert (got - want).abs().max() > 0.02
