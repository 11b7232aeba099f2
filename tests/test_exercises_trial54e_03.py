"""Trial 54e, notebook 03: answers that keep state between calls (a systematic probe).

Wrong answers that passed: memory_vector cached by the inputs' `id()` or `data_ptr()` (the
same tensors refilled in place get the old result); feedback_attention cached by the shapes
and returned as `.clone()`, or by `id()` / `data_ptr()`; cached by the shapes without a
clone, it was named only through the empty memory's zeros. Here too: an input kept in a
global from the first call (softmax(w), the bias). Right: the notebook's solutions, a kept
constant cloned, `functools.lru_cache` on a pure function of an int.
"""
import functools
import math

import torch
from checker_helpers import trial_case, trial_tests
from kept_state_variants import VARIANTS

from labnn.exercises.feedback_transformer import check_feedback_attention, check_memory_vector

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)




def memory_vector(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(dim=0), xs)


def feedback_attention(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(dim=-1), v)


for name, (wrap, said) in VARIANTS.items():
    case(f"mv_{name}", check_memory_vector, wrap(memory_vector), said)
    case(f"fa_{name}", check_feedback_attention, wrap(feedback_attention), said)


def _mv_global():  # g: softmax(w) kept per shape, on the function itself
    def mv(xs, w):
        key = (tuple(w.shape), w.dtype, w.device)
        if key not in mv.p:
            mv.p[key] = w.softmax(0)
        return torch.einsum("l,lbd->bd", mv.p[key], xs)
    mv.p = {}
    return mv


def _fa_global():  # g: the bias kept per shape ("the same at every step")
    kept = {}

    def fa(q, k, v, bias):
        key = (tuple(bias.shape), bias.dtype, bias.device)
        return feedback_attention(q, k, v, kept.setdefault(key, bias))
    return fa


case("mv_g_softmax_kept", check_memory_vector, _mv_global(), r"softmax\(w\).*kept between")
case("fa_g_bias_kept", check_feedback_attention, _fa_global(), r"bias.*kept between calls")


@functools.lru_cache(maxsize=None)
def _inv_sqrt(d):  # lru_cache on a pure function of an int
    return 1 / math.sqrt(d)


def _fa_lru_scale(q, k, v, bias):
    if k.size(2) == 0:
        return q.new_zeros(q.shape)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) * _inv_sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(dim=-1), v)


def _fa_zeros_kept_cloned():
    kept = {}

    def fa(q, k, v, bias):
        if k.size(2) == 0:
            key = (tuple(q.shape), q.dtype, q.device)
            return kept.setdefault(key, torch.zeros_like(q)).clone()
        return feedback_attention(q, k, v, bias)
    return fa


@functools.lru_cache(maxsize=None)
def _ones(n):  # a pure constant of an int, handed out cloned
    return torch.ones(n)


RIGHT["mv_right"] = (check_memory_vector, memory_vector)
RIGHT["mv_lru_ones_cloned"] = (check_memory_vector, lambda xs, w: torch.einsum(
    "l,lbd->bd", w.softmax(0) * _ones(w.size(0)).clone().to(w), xs))
RIGHT["fa_right"] = (check_feedback_attention, feedback_attention)
RIGHT["fa_lru_scale"] = (check_feedback_attention, _fa_lru_scale)
RIGHT["fa_zeros_kept_cloned"] = (check_feedback_attention, _fa_zeros_kept_cloned())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
