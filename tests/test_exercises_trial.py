"""Issue 28: the wrong answers of a learner's trial that got a vague or misleading message
each get one naming the mistake; a learner's own exception follows one rule everywhere."""

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from labnn.data.recall import IGNORE
from labnn.exercises.feedback_transformer import memory_vector
from labnn.exercises.kv_sharing_stack import custom_backward, kv_sharing
from labnn.exercises.self_attention import masked_attention, multi_head
from labnn.exercises.three_memories import memory_limits, recall_score, recall_task
from labnn.exercises.transformer_xl import relative_scores, segment_memory

from checker_helpers import cache_bytes_with, fails_with


# ---------- 01: multi-head attention, attention with a mask ----------

def mha(group="qkv", bias=True, weight_view=False, softmax_dim=-1, mask_axis=False):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        h = mha.n_heads
        dh = d // h
        if weight_view:
            z = x @ mha.qkv.weight.view(d, 3 * d) + mha.qkv.bias
        else:
            z = mha.qkv(x) if bias else x @ mha.qkv.weight.t()
        if group == "per_head":
            q, k, v = (p.transpose(1, 2) for p in z.view(b, t, h, 3 * dh).chunk(3, -1))
        else:
            q, k, v = (p.view(b, t, h, dh).transpose(1, 2) for p in z.chunk(3, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
        if mask is not None:
            scores = scores.masked_fill(~(mask[:, None, :] if mask_axis else mask),
                                        float("-inf"))
        y = (scores.softmax(softmax_dim) @ v).transpose(1, 2).reshape(b, t, d)
        return mha.out_proj(y) if bias else y @ mha.out_proj.weight.t()

    return multi_head_attention


@pytest.mark.parametrize("fn, match", [
    (mha(group="per_head"), r"q, k and v are cut per head: view\(B, T, H, 3 \* D_h\)"),
    (mha(bias=False), r"the biases of both projections are missing: .*mha.qkv.bias"),
    (mha(weight_view=True), r"reshaped with \.view\(D, 3 \* D\).*\[out, in\] = \[3D, D\]"),
    (mha(softmax_dim=1), r"the softmax runs over the heads \(dim=1"),
    (mha(mask_axis=True), r"broadcast error only with a mask.*mask\[:, None, :\] = "
                          r"\[T, 1, T\] lines the queries up with the heads"),
])
def test_multi_head_attention_trial(fn, match):
    fails_with(multi_head.check_multi_head_attention, fn, "multi-head attention: .*" + match)


def test_bool_mask_added_to_the_scores_is_named():
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores + mask
        return scores.softmax(-1) @ v

    fails_with(masked_attention.check_attention, attention,
               r"attention with a mask: you added the boolean mask to the scores: True "
               r"counts as 1 and False as 0.*masked_fill\(~mask, float\('-inf'\)\)")


# ---------- 02: memory, segment mask, relative shift and scores ----------

def test_memory_concatenated_on_the_batch_axis_is_named():
    def update_memory(mem, h, mem_len):
        states = h if mem is None else torch.cat([mem, h])
        start = states.size(1) - min(mem_len, states.size(1))
        return states[:, start:].detach()

    fails_with(segment_memory.check_update_memory, update_memory,
               r"memory update: update_memory\(mem, h, 6\) concatenates mem and h along "
               r"the batch axis: with mem \[2, 5, 8\] = \[B, M, D\]")


def test_mem_len_counted_in_segments_is_named_not_sent_to_the_query_index():
    def segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        start = (i // seg_len) * seg_len  # from the query's index i, as it should be
        return (j <= i) & (j >= start - mem_len * seg_len)

    with pytest.raises(Exception) as info:
        segment_memory.check_segment_mask(segment_mask)
    message = str(info.value)
    assert "counts mem_len in segments (start - mem_len * seg_len)" in message
    assert "query's index i" not in message


def test_a_per_row_loop_is_told_what_its_rows_do_not_about_padding():
    def relative_shift(x):
        out = torch.zeros_like(x)
        for i in range(x.size(-2)):
            out[..., i, :] = x[..., i, :].roll(i, dims=-1)  # right by i: the wrong way
        return out

    with pytest.raises(Exception) as info:
        relative_scores.check_relative_shift(relative_shift)
    message = str(info.value)
    assert "row i slides RIGHT by i: it must slide LEFT by T - 1 - i" in message
    assert "F.pad" not in message


def shift(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def scores_r_reshaped(q, k, r, u, v):
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    by_distance = (q + v[:, None]) @ r.reshape(r.size(1), r.size(0), r.size(2)).transpose(-2, -1)
    return (content + shift(by_distance)) / math.sqrt(q.size(-1))


def scores_u_twice(q, k, r, u, v):
    content = torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
    by_distance = torch.einsum("bhid,rhd->bhir", q + u[:, None], r)
    return (content + shift(by_distance)) / math.sqrt(q.size(-1))


@pytest.mark.parametrize("fn, match", [
    (scores_r_reshaped, r"r is rearranged with reshape: r.reshape\(H, S, D_h\).*"
                        r"r.transpose\(0, 1\)"),
    (scores_u_twice, r"u is added to the queries of both terms: the position term uses "
                     r"the position bias v"),
])
def test_relative_scores_trial(fn, match):
    fails_with(relative_scores.check_relative_scores, fn, "relative attention scores: .*" + match)


# ---------- 03: memory vector, feedback attention ----------

@pytest.mark.parametrize("fn, match", [
    (lambda xs, w: (xs.softmax(0) * w[:, None, None]).sum(0),
     r"you took a softmax of the layer outputs xs \(over the layers, dim 0\)"),
    (lambda xs, w: torch.einsum("l,lbd->bd", w.softmax(0), xs.softmax(-1)),
     r"you took a softmax of the layer outputs xs \(over the features, dim -1\)"),
    (lambda xs, w: torch.einsum("l,lbd->bd", w.sigmoid(), xs),
     r"you used sigmoid\(w\) as weights: .* do not sum to one"),
])
def test_memory_vector_trial(fn, match):
    fails_with(memory_vector.check_memory_vector, fn, r"memory vector \(layer mix\): .*" + match)


def feedback(combine):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        scores = combine(torch.einsum("bhd,bhsd->bhs", q, k), bias, q.size(-1), k.size(2))
        return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)

    return feedback_attention


@pytest.mark.parametrize("fn, match", [
    (feedback(lambda s, b, d, n: (s + b) / math.sqrt(d)),
     r"you divided the bias by sqrt\(d_head\) too"),
    (feedback(lambda s, b, d, n: s / math.sqrt(d) + b / math.sqrt(n)),
     r"you divided the bias by sqrt\(S\) = sqrt\(6\), the number of memory keys"),
    (feedback(lambda s, b, d, n: s / math.sqrt(n) + b),
     r"you divided q·k by sqrt\(S\) = sqrt\(6\), the number of memory keys"),
    (feedback(lambda s, b, d, n: s / math.sqrt(d) + b[:, None, :]),
     r"raised a broadcast error between the batch \(B = 2\) and the heads \(H = 3\).*"
     r"bias\[:, None, :\] = \[H, 1, S\]"),
])
def test_feedback_attention_trial(fn, match):
    fails_with(memory_vector.check_feedback_attention, fn, "feedback attention: .*" + match)


# ---------- 04: shared keys and values, Square, weight gradient ----------

def test_keys_and_values_split_even_odd_is_named():
    def shared_kv(m, norm, kv, n_heads):
        out = kv(norm(m))
        k, v = out[:, 0::2], out[:, 1::2]
        return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)

    fails_with(kv_sharing.check_shared_kv, shared_kv,
               r"the keys are taken from alternate outputs, the even ones \(0::2\)")


class SquareFromOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * 2 * y.sqrt()


def test_square_that_rebuilds_x_from_the_output_is_named():
    fails_with(custom_backward.check_square, SquareFromOutput,
               r"backward rebuilds x from the saved output as sqrt\(y\), which is \|x\|")


@pytest.mark.parametrize("fn, match", [
    (lambda xs, gs: gs.sum(1).t() @ xs.sum(1), "you summed over the batch before the product"),
    (lambda xs, gs: gs.sum(0).t() @ xs.sum(0), "you summed over the steps before the product"),
])
def test_weight_gradient_trial(fn, match):
    fails_with(kv_sharing.check_weight_gradient, fn, match)


# ---------- 05: reach, recall examples, accuracy by distance, cache bytes ----------

def reach(window, xl):
    def my_reach(memory, n_layers, span, position=0):
        if memory == "window":
            return window(n_layers, span)
        if memory == "XL":
            return xl(n_layers, span, position)
        return math.inf

    return my_reach


RIGHT_WINDOW, RIGHT_XL = (lambda n, s: n * s), (lambda n, s, p: n * s + p)


@pytest.mark.parametrize("fn, match", [
    (reach(RIGHT_WINDOW, lambda n, s, p: n * s + p + 1),
     r"gives 17, expected 16: off by one \(one token too far\)\. Each layer's memory"),
    (reach(RIGHT_WINDOW, lambda n, s, p: n * s + p - 1),
     r"gives 15, expected 16: off by one \(one token short\)"),
    (reach(lambda n, s: n * s - 1, RIGHT_XL),
     r"gives 7, expected 8: off by one \(one token short\)\. Each layer reaches exactly W"),
    (reach(lambda n, s: n * (s - 1), RIGHT_XL),
     r"gives 6, expected 8: off by one in every layer \(2 = L tokens short\)"),
    (reach(RIGHT_WINDOW, lambda n, s, p: n * (s + 1) + p),
     r"gives 18, expected 16: off by one in every layer \(2 = L tokens too far\)"),
])
def test_reach_off_by_one_is_named(fn, match):
    fails_with(memory_limits.check_reach, fn, "reach of each memory: .*" + match)


def test_recall_with_batch_and_time_swapped_is_named():
    def make_recall(filler, values, positions):
        rows = torch.arange(filler.size(0))
        x = filler.clone()
        x[positions, rows] = values
        after = torch.arange(filler.size(1)) > positions[:, None]
        return x, torch.where(after, values[:, None], IGNORE)

    fails_with(recall_task.check_make_recall, make_recall,
               r"raised an IndexError because it indexes x with batch and time swapped: "
               r"x\[positions, rows\]")


def accuracy(hits_of, distance_of):
    def accuracy_by_distance(logits, y, max_distance):
        labelled = y != IGNORE
        d = distance_of(labelled) * labelled
        hits = hits_of(logits, y).float()
        out = torch.full((max_distance,), float("nan"))
        for k in range(1, max_distance + 1):
            if (d == k).any():
                out[k - 1] = hits[d == k].mean()
        return out

    return accuracy_by_distance


FROM_VALUE = (lambda labelled: labelled.long().cumsum(1))


@pytest.mark.parametrize("fn, match", [
    (accuracy(lambda logits, y: logits.argmax(1) == y, FROM_VALUE),
     r"takes the argmax over time \(dim 1 of logits \[N, T, V\]\)"),
    (accuracy(lambda logits, y: logits.argmax(-1) == y,
              lambda labelled: labelled.size(1) - torch.arange(labelled.size(1))),
     "the distance is measured from the end of the sequence"),
    (accuracy(lambda logits, y: logits.argmax(-1) == y,
              lambda labelled: labelled.size(1) - 1 - torch.arange(labelled.size(1))),
     "the distance is measured from the end of the sequence"),
])
def test_accuracy_by_distance_trial(fn, match):
    fails_with(recall_score.check_accuracy_by_distance, fn, "accuracy by distance: .*" + match)


cache_bytes = cache_bytes_with  # (size): each tensor's bytes `size(t)`


@pytest.mark.parametrize("fn, match", [
    (cache_bytes(sys.getsizeof), r"sys.getsizeof measures the Python object"),
    (cache_bytes(lambda t: t.nbytes / 1024), r"returns 78.75 where 80,640 bytes are expected: "
                                             r"that is KiB \(bytes / 1024\), not bytes"),
])
def test_cache_bytes_trial(fn, match):
    fails_with(memory_limits.check_cache_bytes, fn, "cache bytes: .*" + match)


# ---------- one rule for a learner's own exception ----------

@pytest.mark.parametrize("check, fn, called", [
    (memory_vector.check_feedback_attention,
     lambda q, k, v, bias: q @ k,
     "the check called feedback_attention(q, k, v, bias) with q [2, 3, 4], "
     "k [2, 3, 6, 4], v [2, 3, 6, 4], bias [3, 6]"),
    (recall_task.check_make_recall,
     lambda filler, values, positions: filler[positions + 100],
     "the check called make_recall(filler, values, positions) with filler [5, 9] int64, "
     "values [5] int64, positions [5] int64"),
])
def test_a_learners_own_error_is_raised_after_the_call_with_its_shapes(check, fn, called,
                                                                         capsys):
    with pytest.raises((RuntimeError, IndexError)):
        check(fn)
    err = capsys.readouterr().err
    assert called in err and "your function raised the" in err


class SquareWhoseBackwardRaises(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x.view(3, 4)  # [4, 3] * [3, 4]: the learner's own shape error


def test_an_error_in_a_learners_backward_follows_the_same_rule(capsys):
    with pytest.raises(RuntimeError):
        custom_backward.check_square(SquareWhoseBackwardRaises)
    err = capsys.readouterr().err
    assert "the check called Square.backward (through torch.autograd.grad)" in err


def test_exercise_modules_stay_small():
    root = Path(masked_attention.__file__).parents[1]  # labnn/exercises
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        assert len(lines) <= 320, f"{path.name}: {len(lines)} lines"
        long = [n for n, line in enumerate(lines, 1) if len(line) > 100]
        assert not long, f"{path.name}: lines over 100 characters: {long}"
