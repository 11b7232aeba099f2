"""Each checker of notebook 01 passes a correct solution and names each typical mistake."""

import math

import pytest
import torch

from labnn.nn.attention import scaled_dot_product_attention
from labnn.exercises.self_attention import masked_attention as ex
from labnn.exercises.self_attention import multi_head as ex_heads
from labnn.exercises.self_attention import check_heads, check_multi_head_attention
from labnn.exercises.grading import ExerciseFailed, ExerciseNotDone

from checker_helpers import fails_with, passes


# ---------- attention weights ----------

def weights(q, k, scale=True, dim=-1, softmax=True):
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.size(-1))
    return scores.softmax(dim=dim) if softmax else scores


def test_attention_weights_correct(capsys):
    passes(ex.check_attention_weights, weights, capsys=capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda q, k: weights(q, k, scale=False), r"forgot to divide the scores by sqrt\(d\)"),
    (lambda q, k: (q @ k.transpose(-2, -1) / q.size(-1)).softmax(-1), r"divided the scores by d; divide by sqrt\(d\)"),
    (lambda q, k: weights(q, k, dim=-2), r"softmax runs over the queries \(dim=-2\)"),
    (lambda q, k: weights(q, k, softmax=False), "these are the scaled scores"),
    (lambda q, k: weights(q, k, scale=False, softmax=False), "these are the raw dot products"),
    (lambda q, k: weights(k, q), r"rows must be queries and columns keys"),
    (lambda q, k: weights(q, k)[..., :3], r"has shape \[2, 5, 3\], expected \[2, 5, 7\]"),
    (lambda q, k: weights(q, k) * 0.5, r"must sum to 1 .*the row at \[b=0, i=0\] sums to 0.5"),
    (lambda q, k: weights(q, k, dim=0), r"softmax runs over the batch \(dim=0\)"),
    (lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(k.size(1))).softmax(-1),
     r"divided the scores by sqrt\(7\) = sqrt\(k.size\(1\)\), the number of keys"),
    (lambda q, k: scaled_dot_product_attention(q[:, None], k[:, None], k[:, None])[1][:, 0],
     "calls labnn's own `scaled_dot_product_attention`"),
    (lambda q, k: weights(q, k) + 1e-3 * ((torch.arange(7) == 4).float() - (torch.arange(7) == 5).float()),
     r"differs from the reference at 20 of 70 entries compared; .* at \[b=0, i=0, j=4\]"),
    (lambda q, k: [1.0], "should return a torch.Tensor, but returned list"),
])
def test_attention_weights_mistakes(fn, match):
    fails_with(ex.check_attention_weights, fn, match="attention weights: .*" + match)


def test_stub_is_not_done_and_gives_nothing_away():
    def stub(q, k):
        raise NotImplementedError("q @ k.transpose(-2, -1) / math.sqrt(d), softmax(dim=-1)")

    with pytest.raises(ExerciseNotDone) as info:
        ex.check_attention_weights(stub)
    message = str(info.value)
    assert message == ("attention weights: not solved yet — fill in the code of this cell and run it again; "
                       "stuck? open Hint 1 below the cell.")


def test_learner_bug_surfaces_as_itself():
    with pytest.raises(RuntimeError):
        ex.check_attention_weights(lambda q, k: q @ k)  # shape mismatch inside the learner's code


def helper_stub(q, k):
    raise NotImplementedError()


@pytest.mark.parametrize("fn", [
    lambda q, k: (q @ k.transpose(-2, -1) > 0).softmax(-1),  # torch: no softmax for Bool
    lambda q, k: ((q > 0) @ (k > 0).transpose(-2, -1)).softmax(-1),  # no Bool product
])
def test_torchs_own_not_implemented_is_not_an_unfilled_stub(fn, capsys):
    # torch raises NotImplementedError for an operator with no kernel for a dtype (since
    # 2.14 for `1 - mask` on a bool mask too; on torch 2.3 a RuntimeError, its base): that is
    # the learner's bug, not a stub
    with pytest.raises(RuntimeError, match="not implemented for") as info:
        ex.check_attention_weights(fn)
    assert not isinstance(info.value, ExerciseNotDone)
    assert "the check called attention_weights(q, k)" in capsys.readouterr().err


def test_a_stub_raised_in_a_helper_is_still_not_done():
    with pytest.raises(ExerciseNotDone):
        ex.check_attention_weights(lambda q, k: helper_stub(q, k))


# issue 29, "unhelpful": an odd result gets a sentence about the answer, not an error
# from inside the checker; one dtype rule for every checker (the reference's, named)
def _with_nan(q, k):
    w = weights(q, k)
    w[0, 0, 3] = float("nan")
    return w


@pytest.mark.parametrize("fn, match", [
    (_with_nan, r"contains NaN \(first at \[b=0, i=0, j=3\]\)"),
    (lambda q, k: weights(q, k).double(), r"has dtype torch.float64, expected torch.float32, "
                                          r"the inputs' dtype: refused even"),
    (lambda q, k: weights(q, k).half(), r"has dtype torch.float16, expected torch.float32"),
    (lambda q, k: weights(q, k).long(), r"has dtype torch.int64, expected torch.float32: int"),
    (lambda q, k: weights(q, k).to(torch.complex64), r"has dtype torch.complex64, expected "
                                                     r"torch.float32: complex numbers"),
    (lambda q, k: weights(q, k).to("meta"), r"is on the meta device"),
])
def test_attention_weights_odd_results_are_named(fn, match):
    fails_with(ex.check_attention_weights, fn,
               match=r"attention weights: attention_weights\(q, k\) " + match)


# ---------- attention with a mask ----------

def attention(q, k, v, mask=None, fill=float("-inf"), invert=False, after=False, guard=True, scale=True, dim=-1):
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
    if mask is not None and not after:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    w = scores.softmax(dim=dim)
    if mask is not None and after:
        w = w * mask
    if mask is not None and guard:
        w = w.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return w @ v


def test_attention_correct(capsys):
    passes(ex.check_attention, attention, capsys=capsys)


def test_attention_with_nan_to_num_is_refused_for_its_nan_gradient():
    # right forward values, but the fully masked row sends NaN back to v
    fails_with(ex.check_attention,
               lambda q, k, v, mask=None: attention(q, k, v, mask, guard=False).nan_to_num(0.0),
               match=r"attention with a mask: .*gradient .*`v`.* NaN")


@pytest.mark.parametrize("fn, match", [
    (lambda q, k, v, mask=None: attention(q, k, v, None), "the mask is ignored"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, invert=True), "the mask is inverted: True means MAY attend"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, after=True), "zeroed the masked weights after the softmax"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, guard=False),
     r"all False \(query i=1, at \[b=0, i=1, d=0\]\) gives NaN"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, fill=-1e9, guard=False), "gets the mean of the values"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, scale=False), r"forgot to divide the scores by sqrt\(d\)"),
    (lambda q, k, v, mask=None: attention(q, k, v, mask, dim=-2), "softmax runs over the queries"),
    (lambda q, k, v, mask=None: (q @ k.transpose(-2, -1)).softmax(-1), "those are the weights"),
])
def test_attention_mistakes(fn, match):
    fails_with(ex.check_attention, fn, match="attention with a mask: .*" + match)


# ---------- causal mask ----------

def test_causal_mask_correct(capsys):
    passes(ex.check_causal_mask, lambda t: torch.ones(t, t, dtype=torch.bool).tril(), capsys=capsys)
    passes(ex.check_causal_mask, lambda t: torch.arange(t)[None, :] <= torch.arange(t)[:, None], capsys=capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda t: torch.ones(t, t, dtype=torch.bool).tril(-1), r"forbids the diagonal.*j <= i, not j < i"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).tril(1), "lets query i see key i \\+ 1"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).triu(1), "is inverted"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).triu(), "is transposed"),
    (lambda t: torch.ones(t, t, dtype=torch.bool), "lets every query see every key"),
    (lambda t: torch.ones(t, t).tril(), "has dtype torch.float32; masks are booleans"),
    (lambda t: torch.ones(t, t + 1, dtype=torch.bool).tril(), r"has shape \[4, 5\], expected \[4, 4\]"),
    (lambda t: torch.ones(t, t, dtype=torch.bool).tril().index_fill(0, torch.tensor([t - 1]), False),
     r"causal_mask\(4\) at \[i=3, j=0\] is False: query i=3 may attend key j=0"),
])
def test_causal_mask_mistakes(fn, match):
    fails_with(ex.check_causal_mask, fn, match="causal mask: .*" + match)


# ---------- split and merge heads ----------

def split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def test_heads_correct(capsys):
    passes(ex_heads.check_heads, split, merge, capsys=capsys)


@pytest.mark.parametrize("split_fn, merge_fn, match", [
    (lambda x, h: x.reshape(x.size(0), h, x.size(1), -1), merge, r"reshapes \[B, T, D\] straight to \[B, H, T, D_h\]"),
    (lambda x, h: x.view(*x.shape[:2], h, -1), merge, r"has shape \[B, T, H, D_h\].*transpose\(1, 2\)"),
    (lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), merge, "interleaves the heads"),
    (split, lambda x: x.reshape(x.size(0), x.size(2), -1), r"merge_heads\(x\) reshapes \[B, H, T, D_h\] straight"),
    (split, lambda x: x.transpose(1, 2).reshape(x.size(0), x.size(2), -1)[..., :8],
     r"has shape \[2, 5, 8\], expected \[2, 5, 24\]"),
    (split, lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), x.size(2), -1),
     r"merge_heads\(x\) interleaves the heads"),
    (split, lambda x: x.transpose(1, 2), r"has shape \[B, T, H, D_h\] = \[2, 5, 4, 6\].*reshape"),
    (lambda x, h: x.view(*x.shape[:2], -1, h).transpose(1, 2), merge,
     r"\[2, 6, 5, 4\] = \[B, D_h, T, H\]: head count and head width swapped"),
    (lambda x, h: x.view(*x.shape[:2], h, -1).transpose(1, 3), merge,
     r"has shape \[2, 6, 4, 5\] = \[B, D_h, H, T\], expected \[2, 4, 5, 6\] = \[B, H, T, D_h\]"),
    (lambda x, h: x.mul_(1.0).view(*x.shape[:2], h, -1).transpose(1, 2).mul_(2.0), merge,
     "modified its input `x` in place"),
])
def test_heads_mistakes(split_fn, merge_fn, match):
    fails_with(ex_heads.check_heads, split_fn, merge_fn, match="split and merge heads: .*" + match)


# ---------- multi-head attention ----------

def mha_fn(x, mha, mask=None, *, scale_width=None, split_fn=split, merge_fn=merge, out_proj=True, order=(0, 1, 2),
           use_mask=True, invert=False):
    parts = mha.qkv(x).chunk(3, dim=-1)
    q, k, v = (split_fn(parts[i], mha.n_heads) for i in order)
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_width or q.size(-1))
    if mask is not None and use_mask:
        scores = scores.masked_fill(mask if invert else ~mask, float("-inf"))
    w = scores.softmax(-1)
    if mask is not None and use_mask:  # a query that may attend nothing gets zeros
        w = w.masked_fill(~(~mask if invert else mask).any(-1, keepdim=True), 0.0)
    y = merge_fn(w @ v)
    return mha.out_proj(y) if out_proj else y


def test_multi_head_attention_correct(capsys):
    passes(ex_heads.check_multi_head_attention, mha_fn, capsys=capsys)


def test_multi_head_attention_leaves_global_rng_alone():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    ex_heads.check_multi_head_attention(mha_fn)
    assert torch.equal(torch.rand(1), expected)


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale_width=24), r"divided by sqrt\(d_model\).*sqrt\(d_head\)"),
    (dict(split_fn=lambda z, h: z[:, None], merge_fn=lambda y: y[:, 0]), "single head of width d_model"),
    (dict(split_fn=lambda z, h: z.reshape(z.size(0), h, z.size(1), -1)), "split with a plain reshape"),
    (dict(merge_fn=lambda y: y.reshape(y.size(0), y.size(2), -1)), "merged with a plain reshape"),
    (dict(out_proj=False), "forgot the output projection"),
    (dict(use_mask=False), "the mask is ignored"),
    (dict(invert=True), "the mask is inverted.*True means MAY attend"),
    (dict(order=(1, 0, 2)), "q, k and v are taken in the wrong order"),
    (dict(order=(2, 1, 0)), "q, k and v are taken in the wrong order"),
])
def test_multi_head_attention_mistakes(kwargs, match):
    fails_with(ex_heads.check_multi_head_attention, lambda x, mha, mask=None: mha_fn(x, mha, mask, **kwargs),
               match="multi-head attention: .*" + match)


def test_in_place_edit_of_an_input_is_rejected():
    def in_place(q, k):
        q /= math.sqrt(q.size(-1))  # right values, but the caller's q is changed
        return (q @ k.transpose(-2, -1)).softmax(dim=-1)

    fails_with(ex.check_attention_weights, in_place,
               match=r"modified its input `q` in place \(first change at \[0, 0, 0\]\)")


def test_in_place_mask_edit_is_rejected():
    def in_place(q, k, v, mask=None):
        if mask is not None:
            mask.logical_not_().logical_not_()  # harmless round trip: accepted
            mask[0, 1] = True  # column 1 is all False in the checker's mask
        return attention(q, k, v, mask)

    fails_with(ex.check_attention, in_place, match="modified its input `mask` in place")


def test_in_place_edit_in_multi_head_attention_is_rejected():
    def in_place(x, mha, mask=None):
        y = mha_fn(x, mha, mask)
        x.zero_()
        return y

    fails_with(ex_heads.check_multi_head_attention, in_place, match="modified its input `x` in place")


def test_multi_head_attention_that_calls_the_module_is_rejected():
    fails_with(ex_heads.check_multi_head_attention, lambda x, mha, mask=None: mha(x, mask)[0],
               match=r"calls the module itself \(mha\(x, ...\)\)")
    fails_with(ex_heads.check_multi_head_attention, lambda x, mha, mask=None: mha.forward(x, mask)[0],
               match="calls the module itself")


def test_multi_head_attention_with_labnn_kernel_is_rejected():
    def via_kernel(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
        return mha.out_proj(merge(scaled_dot_product_attention(q, k, v, mask)[0]))

    fails_with(ex_heads.check_multi_head_attention, via_kernel, match="calls labnn's own `scaled_dot_product_attention`")


def test_multi_head_attention_module_is_restored(capsys):
    passes(ex_heads.check_multi_head_attention, mha_fn, capsys=capsys)
    mha = ex._reference_mha()
    assert "forward" not in vars(mha)


def test_causal_mask_calling_labnn_is_rejected():
    from labnn.nn.attention import causal_mask

    fails_with(ex.check_causal_mask, lambda t: causal_mask(t), match="calls labnn's own `causal_mask`")
    fails_with(ex.check_causal_mask, causal_mask, match="calls labnn's own `causal_mask`")


def test_causal_mask_reports_the_position_by_name():
    def one_wrong(t):
        m = torch.ones(t, t, dtype=torch.bool).tril()
        m[t - 1, 0] = False
        return m

    fails_with(ex.check_causal_mask, one_wrong,
               match=r"one_wrong\(4\) at \[i=3, j=0\] is False: query i=3 may attend key j=0")


# ---------- the machinery in labnn.exercises.grading ----------

def test_positions_are_written_in_the_tensors_own_dimensions():
    from labnn.exercises.grading import describe_position, expect_close

    assert describe_position((0, 1, 2, 3), "b h i j") == "[b=0, h=1, i=2, j=3]"
    assert describe_position((4, 2)) == "[4, 2]"
    with pytest.raises(ValueError, match="dims must name each of the 2 dimensions, got 'b h i'"):
        describe_position((0, 1), "b h i")
    want = torch.zeros(2, 3, 4, 5)
    got = want.clone()
    got[1, 2, 3, 4] = 1.0
    with pytest.raises(ExerciseFailed, match=r"at 1 of 120 entries compared; .* at \[b=1, h=2, i=3, j=4\] "
                                             r"\(yours 1, expected 0\)"):
        expect_close(got, want, "x", dims="b h i j")


def test_expect_close_compares_only_where_asked_and_reports_full_positions():
    from labnn.exercises.grading import expect_close

    want = torch.zeros(2, 3, 4)
    where = torch.ones(3, 4, dtype=torch.bool).tril()
    got = want.clone()
    got[..., 0, 3] = 5.0  # outside `where`: ignored
    expect_close(got, want, "x", dims="b i j", where=where)
    got[1, 2, 1] = float("nan")
    with pytest.raises(ExerciseFailed, match=r"contains NaN \(first at \[b=1, i=2, j=1\]\)"):
        expect_close(got, want, "x", dims="b i j", where=where)


def test_aliasing_and_reference_calls_are_named():
    from labnn.exercises.grading import expect_no_alias, expect_own_code

    x = torch.zeros(4, 3)
    with pytest.raises(ExerciseFailed, match="returns a view of its input `x`"):
        expect_no_alias(x[1:], "f(x)", x=x)
    expect_no_alias(x[1:].clone(), "f(x)", x=x)
    with pytest.raises(ExerciseFailed, match="calls labnn's own `scaled_dot_product_attention`"):
        expect_own_code(lambda q: [scaled_dot_product_attention][0](q), "f(q)",
                        scaled_dot_product_attention=scaled_dot_product_attention)
    expect_own_code(lambda q: q.softmax(-1), "f(q)", scaled_dot_product_attention=scaled_dot_product_attention)


def test_multi_head_attention_masked_after_the_softmax_is_named():
    def after(x, mha, mask=None):
        q, k, v = (split(z, mha.n_heads) for z in mha.qkv(x).chunk(3, dim=-1))
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) * mask
        return mha.out_proj(merge(weights @ v))

    fails_with(ex_heads.check_multi_head_attention, after, match="zeroed the masked weights after the softmax")


# ---------- learner trial 12 (issue 13 follow-up) ----------

def test_attention_weights_scaled_by_the_number_of_queries_is_named():
    fails_with(ex.check_attention_weights,
               lambda q, k: (q @ k.transpose(-2, -1) / math.sqrt(q.size(1))).softmax(-1),
               match=r"divided the scores by sqrt\(5\) = sqrt\(q.size\(1\)\), the number of queries")


def test_attention_fill_with_zero_is_named():
    fails_with(ex.check_attention, lambda q, k, v, mask=None: attention(q, k, v, mask, fill=0.0),
               match=r"filled the masked scores with 0.*-inf")


def test_attention_guard_over_the_wrong_axis_is_named():
    def wrong_axis(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = scores.softmax(-1)
        if mask is not None:
            w = w.masked_fill(~mask.any(dim=-2, keepdim=True), 0.0)
        return w @ v

    fails_with(ex.check_attention, wrong_axis, match=r"gives NaN.*mask.any\(dim=-2\).*each key")


def test_learner_error_is_preceded_by_what_the_check_called(capsys):
    def no_none(q, k, v, mask=None):
        return attention(q, k, v, mask=~mask)  # crashes on mask=None

    with pytest.raises(TypeError):
        ex.check_attention(no_none)
    err = capsys.readouterr().err
    assert "the check called attention(q, k, v) with mask=None" in err
    assert "your function must handle mask=None" in err


def test_causal_mask_messages_name_the_learners_function():
    def causal_mask_mine(t):
        return torch.ones(t, t, dtype=torch.bool).tril(-1)

    fails_with(ex.check_causal_mask, causal_mask_mine, match=r"causal_mask_mine\(4\) forbids the diagonal")


def test_in_place_message_fits_a_bool_mask():
    def in_place(q, k, v, mask=None):
        if mask is not None:
            mask.logical_not_()
            return attention(q, k, v, mask, invert=True)
        return attention(q, k, v)

    with pytest.raises(ExerciseFailed) as info:
        ex.check_attention(in_place)
    message = str(info.value)
    assert "modified its input `mask` in place" in message
    assert "mask /=" not in message and "~mask" in message


def test_multi_head_attention_interleaved_qkv_is_named():
    def interleaved(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = mha.qkv(x).view(b, t, d, 3).unbind(-1)
        return mha_fn_parts(q, k, v, mha, mask)

    fails_with(ex_heads.check_multi_head_attention, interleaved,
               match=r"q, k and v are interleaved.*chunk\(3, dim=-1\)")


def mha_fn_parts(q, k, v, mha, mask):
    q, k, v = (split(z, mha.n_heads) for z in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return mha.out_proj(merge(scores.softmax(-1) @ v))


def test_multi_head_attention_split_and_merge_by_reshape_is_named():
    def by_reshape(x, mha, mask=None):
        b, t, d = x.shape
        h = mha.n_heads
        q, k, v = (z.reshape(b, h, t, d // h) for z in mha.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~mask, float("-inf"))
        return mha.out_proj((scores.softmax(-1) @ v).reshape(b, t, d))

    fails_with(ex_heads.check_multi_head_attention, by_reshape,
               match=r"split and merged with a plain reshape.*mixes features of different positions")


# ---------- gradients flow through the answer (issue 28) ----------

def _no_grad(fn):
    def wrapped(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)
    return wrapped


def test_attention_weights_under_no_grad_is_refused():
    fails_with(ex.check_attention_weights, _no_grad(weights),
               match=r"attention weights: .*no grad_fn.*torch.no_grad\(\)")


def test_attention_weights_from_data_is_refused():
    fails_with(ex.check_attention_weights, lambda q, k: weights(q.data, k.data),
               match=r"attention weights: .*no grad_fn.*\.data")


def test_attention_in_place_nan_zeroing_is_refused_because_backward_raises():
    def in_place(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = scores.softmax(-1)
        w[w != w] = 0
        return w @ v

    fails_with(ex.check_attention, in_place,
               match=r"attention with a mask: the gradient of .* cannot be computed: .*changed in place after use \(e\.g\. the weights after the softmax")


def test_split_heads_detached_clone_is_refused():
    fails_with(ex_heads.check_heads, lambda x, h: split(x, h).detach().clone(), merge,
               match=r"split and merge heads: .*split_heads.*no grad_fn")


def test_merge_heads_detached_clone_is_refused():
    fails_with(ex_heads.check_heads, split, lambda x: merge(x).detach().clone(),
               match=r"split and merge heads: .*merge_heads.*no grad_fn")


def test_multi_head_attention_under_no_grad_is_refused():
    fails_with(ex_heads.check_multi_head_attention, _no_grad(mha_fn),
               match=r"multi-head attention: .*no grad_fn.*torch.no_grad\(\)")


def test_torch_attention_is_not_taken_for_labnn_own():
    """torch's `F.scaled_dot_product_attention` is not labnn's, even where a notebook has
    imported labnn's function under the same name (as this module has): the door looks at
    the names the code loads as globals, not at attribute names. (Since trial 53f torch's is
    refused too, by its own message.)"""
    import torch.nn.functional as F

    def torch_sdpa(q, k, v, mask=None):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        # its empty rows are the kernel's (NaN as documented): zeroed, as the check asks
        return y if mask is None else y.masked_fill(~mask.any(-1, keepdim=True), 0.0)

    fails_with(ex.check_attention, torch_sdpa,
               match=r"^(?!.*labnn's own).*torch's fused attention is refused")


# ---- learner trial of stop 40: sizes written as numbers passed at the check's own sizes
def _mha_fixed_sizes(x, mha, mask=None):
    h = mha.n_heads
    q, k, v = (z.view(2, 5, h, 24 // h).transpose(1, 2) for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(24 // h)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = s.softmax(-1)
    if mask is not None:
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj((w @ v).transpose(1, 2).reshape(2, 5, 24))


def _split(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def _merge_fixed_width(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, 24)


def _split_fixed_length(x, n_heads):
    b, t, d = x.shape
    return x.view(b, 5, n_heads, d // n_heads).transpose(1, 2)


def _merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


@pytest.mark.parametrize("check, answer, said", [
    (check_multi_head_attention, (_mha_fixed_sizes,), "multi_head_attention(x, mha, mask) "
     "with x [3, 7, 32], mha = MultiHeadAttention(32, 4) raised RuntimeError"),
    (check_heads, (_split, _merge_fixed_width), "merge_heads(x) with x [3, 4, 7, 8] raised"),
    (check_heads, (_split_fixed_length, _merge), "split_heads(x, 4) with x [3, 7, 32] raised"),
])
def test_sizes_written_as_numbers_fail_at_other_sizes(check, answer, said):
    with pytest.raises(ExerciseFailed) as failed:
        check(*answer)
    assert said in str(failed.value) and "never a number" in str(failed.value)
    check_heads(_split, _merge)  # the same code reading its sizes passes
