"""Trial 61, notebook 01 (a learner's trial, 226 answers): an attention that lets a query with
no allowed key attend every key by editing the caller's mask in place (`mask |= empty`,
`mask[empty] = True`, `mask.masked_fill_(empty, True)`), then zeroes that query's row, passed
Exercises 2 and 5: the inputs were compared after the call only where no row was empty. The
caller's mask came back changed, and a second layer reusing it let the padding query attend
every key. Now compared on the empty-row call too. Exercise 5's mask kept between calls by
its shape was told "the mask argument is ignored: your answer always applies a causal mask",
which it does not; both causes are now named. Exercise 1 scaled by the model's width,
sqrt(H * D_h), on heads was told of a width kept between calls: at the check's sizes the
two are one number (24), so both are named.
"""
import math

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_attention_weights,
                                            check_multi_head_attention)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _opened(mask, empty, how):
    if how == "or":
        mask |= empty
    elif how == "setitem":
        mask[empty.expand_as(mask)] = True
    else:
        mask.masked_fill_(empty, True)
    return mask


def _attention(how):
    def attention(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is None:
            return s.softmax(-1) @ v
        empty = ~mask.any(-1, keepdim=True)
        mask = _opened(mask, empty, how)
        return s.masked_fill(~mask, float("-inf")).softmax(-1).masked_fill(empty, 0.0) @ v
    return attention


def _multi_head(how):
    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is None:
            w = s.softmax(-1)
        else:
            empty = ~mask.any(-1, keepdim=True)
            mask = _opened(mask, empty, how)
            w = s.masked_fill(~mask, float("-inf")).softmax(-1).masked_fill(empty, 0.0)
        return mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


IN_PLACE = r"fully masked row modified its input `mask` in place"
for how in ("or", "setitem", "masked_fill_"):
    case(f"attention_mask_{how}", check_attention, _attention(how), IN_PLACE)
case("multi_head_mask_or", check_multi_head_attention, _multi_head("or"), IN_PLACE)

def _kept_mask():
    masks = {}

    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            mask = masks.setdefault(tuple(mask.shape), mask.clone())  # kept between calls
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        if mask is not None:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


case("multi_head_mask_kept_by_shape", check_multi_head_attention, _kept_mask(),
     r"earlier call's mask is kept between calls")

case("weights_scaled_by_the_model_width", check_attention_weights, lambda q, k: (
    q @ k.transpose(-2, -1) / math.sqrt(q.size(1) * q.size(-1) if q.dim() == 4 else q.size(-1))
).softmax(-1), r"divided by sqrt\(24\), the width .* or H \* D_h, the model's width")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
