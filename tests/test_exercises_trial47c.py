"""Trial 47c: a blind learner trial of notebook 03's five exercises (224 runs).

Wrong answers that passed: a `feedback_attention` whose softmax overflows and is patched
(`nan_to_num` on the output or on the weights, its NaN turned to 0 or to 1, the scores
clamped to [-30, 30] or [-50, 50], a max over the whole tensor with an eps or a clamp_min):
the round with scores of about +-200 looked only for NaN, never at the values (an eps in the
sum, named already, is kept); a `.float()` on an input
(`xs.float()` in `memory_vector`, `bias.float()` or `q.float().to(k.dtype)` in
`feedback_attention`): the float64 inputs were float32 numbers cast up, so the cast lost
nothing; a float32 accumulator (`torch.zeros(xs.shape[1:], device=xs.device)`, `*
torch.ones(1, device=...)`) in `memory_vector`, and in `feedback_attention`'s loop over the
keys: float64 inputs promote it, and no round tried a 16-bit dtype (nor did any show a
`feedback_attention` that masks scores of exactly 0, `s - 1e9 * (s == 0)`, a float32 tensor
whatever q's dtype: named by its dtype error in bfloat16); a `feedback_attention`
that returns `v[:, :, 0]`, a view of the caller's v, for one memory key. Misnamed: a token
loop that keeps the empty keys and values of its first call in a module-level cache was told
it wrote a size as a number."""
import math

from checker_helpers import trial_case, trial_tests

import torch

from labnn.exercises.feedback_transformer import (check_feedback_attention,
                                                  check_memory_vector, check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---- memory_vector -------------------------------------------------------------------------

def _mix(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


def mv_xs_float(xs, w):
    return (w.softmax(0)[:, None, None] * xs.float()).sum(0)


def mv_float32_accumulator(xs, w):
    s, m = w.softmax(0), torch.zeros(xs.shape[1:], device=xs.device)
    for layer in range(xs.size(0)):
        m = m + s[layer] * xs[layer]
    return m


def mv_ones_float32(xs, w):
    return torch.ones(1, device=xs.device) * torch.einsum("l,lbd->bd", w.softmax(0), xs)


def mv_right_loop(xs, w):
    s, m = w.softmax(0), torch.zeros_like(xs[0])
    for layer in range(xs.size(0)):
        m = m + s[layer] * xs[layer]
    return m


def mv_right_float32_steps(xs, w):
    """float32 inside (stability), cast back to the inputs' dtype at the end."""
    if xs.dtype == torch.float64:
        return _mix(xs, w)
    return _mix(xs.float(), w.float()).to(xs.dtype)


def rounded(name):
    """The message naming a float32 cast of the input `name`."""
    return rf"float64 inputs.*reference of `{name}` rounded to float32.*{name}\.float\(\)"


NO_DTYPE = r"bfloat16.*float32.*without dtype=.*dtype=xs\.dtype"
case("mv_xs_float", check_memory_vector, mv_xs_float, rounded("xs"))
case("mv_float32_accumulator", check_memory_vector, mv_float32_accumulator, NO_DTYPE)
case("mv_ones_float32", check_memory_vector, mv_ones_float32, NO_DTYPE)
RIGHT["mv_loop_zeros_like"] = (check_memory_vector, mv_right_loop)
RIGHT["mv_python_sum"] = (check_memory_vector, lambda xs, w: sum(
    p * x for p, x in zip(w.softmax(0), xs)))
RIGHT["mv_manual_stable"] = (check_memory_vector, lambda xs, w: _mix(
    xs, torch.log((w - w.max()).exp() / (w - w.max()).exp().sum())))
RIGHT["mv_bmm"] = (check_memory_vector, lambda xs, w: torch.bmm(
    w.softmax(0).expand(xs.size(1), 1, -1), xs.permute(1, 0, 2))[:, 0])
RIGHT["mv_float32_steps"] = (check_memory_vector, mv_right_float32_steps)


# ---- feedback_attention --------------------------------------------------------------------

def _scores(q, k, bias):
    return torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias


def _attend(weights):
    """feedback_attention with the weights `weights(scores)`, zeros for S = 0."""
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        return torch.einsum("bhs,bhsd->bhd", weights(_scores(q, k, bias)), v)
    return feedback_attention


def _exp_ratio(s):
    return s.exp() / s.exp().sum(-1, keepdim=True)


def _global_max(clamp_min):
    def weights(s):
        e = (s - s.max()).exp()
        return e / e.sum(-1, keepdim=True).clamp_min(clamp_min)
    return weights


def fa_nan_to_num_output(q, k, v, bias):
    return torch.einsum("bhs,bhsd->bhd", _exp_ratio(_scores(q, k, bias)), v).nan_to_num(0.0)


fa_nan_to_num_weights = _attend(lambda s: _exp_ratio(s).nan_to_num())
fa_nan_to_one = _attend(lambda s: _exp_ratio(s).nan_to_num(nan=1.0))
fa_eps = _attend(lambda s: s.exp() / (s.exp().sum(-1, keepdim=True) + 1e-9))
fa_clamp_30 = _attend(lambda s: s.clamp(-30, 30).softmax(-1))
fa_clamp_50 = _attend(lambda s: s.clamp(-50, 50).softmax(-1))
fa_global_max_clamp_min = _attend(_global_max(1e-30))
fa_right = _attend(lambda s: s.softmax(-1))
fa_right_row_max = _attend(lambda s: _exp_ratio(s - s.amax(-1, keepdim=True)))
fa_right_float32_softmax = _attend(  # 16-bit scores: their softmax in float32, cast back
    lambda s: s.softmax(-1) if s.dtype.itemsize > 2 else s.float().softmax(-1).to(s.dtype))


def fa_bias_float(q, k, v, bias):
    return _attend(lambda s: s.softmax(-1))(q, k, v, bias.float())


def fa_q_float_round_trip(q, k, v, bias):
    return fa_right(q.float().to(k.dtype), k, v, bias)


def fa_loop_float32_zeros(q, k, v, bias):
    """A loop over the keys into a float32 accumulator (no dtype=)."""
    weights, out = _scores(q, k, bias).softmax(-1), torch.zeros(q.shape, device=q.device)
    for j in range(k.size(2)):
        out = out + weights[..., j, None] * v[:, :, j]
    return out


def fa_zero_scores_masked(q, k, v, bias):
    """Scores of exactly 0 masked with a bool tensor times 1e9: float32 whatever q's dtype."""
    return _attend(lambda s: (s - 1e9 * (s == 0)).softmax(-1))(q, k, v, bias)


def fa_one_key_view(q, k, v, bias):
    return v[:, :, 0] if k.size(2) == 1 else fa_right(q, k, v, bias)


def fa_right_one_key_clone(q, k, v, bias):
    return v[:, :, 0].clone() if k.size(2) == 1 else fa_right(q, k, v, bias)


def fa_right_sdpa(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    return torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=bias[:, None]).squeeze(2)


def fa_right_loop(q, k, v, bias):
    weights, out = _scores(q, k, bias).softmax(-1), q.new_zeros(q.shape)
    for j in range(k.size(2)):
        out = out + weights[..., j, None] * v[:, :, j]
    return out


OVERFLOW = r"(?s)^(?!.*written as a number).*overflow.*nan_to_num.*amax\(-1, keepdim=True\)"
case("fa_nan_to_num_output", check_feedback_attention, fa_nan_to_num_output, OVERFLOW)
case("fa_nan_to_num_weights", check_feedback_attention, fa_nan_to_num_weights, OVERFLOW)
case("fa_nan_to_one", check_feedback_attention, fa_nan_to_one, OVERFLOW)
case("fa_eps_in_sum", check_feedback_attention, fa_eps, r"an eps|overflow")  # named already
CLAMPED = r"(?s)same weight.*clamp.*amax\(-1, keepdim=True\)"
case("fa_clamp_30", check_feedback_attention, fa_clamp_30, CLAMPED)
case("fa_clamp_50", check_feedback_attention, fa_clamp_50, CLAMPED)
case("fa_global_max_clamp_min", check_feedback_attention, fa_global_max_clamp_min,
     r"(?s)whole tensor.*s\.max\(\).*each row's own max")
case("fa_bias_float", check_feedback_attention, fa_bias_float, rounded("bias"))
case("fa_q_float_round_trip", check_feedback_attention, fa_q_float_round_trip,
     rounded("q"))
case("fa_loop_float32_zeros", check_feedback_attention, fa_loop_float32_zeros,
     r"bfloat16.*float32.*without dtype=.*dtype=q\.dtype")
case("fa_zero_scores_masked", check_feedback_attention, fa_zero_scores_masked,
     r"bfloat16.*dtype error.*float32 tensor.*bool tensor times a number.*dtype=q\.dtype")
case("fa_one_key_view", check_feedback_attention, fa_one_key_view,
     r"one memory key.*view of its input `v`.*clone\(\)")
RIGHT["fa_right"] = (check_feedback_attention, fa_right)
RIGHT["fa_row_max"] = (check_feedback_attention, fa_right_row_max)
RIGHT["fa_float32_softmax"] = (check_feedback_attention, fa_right_float32_softmax)
RIGHT["fa_one_key_clone"] = (check_feedback_attention, fa_right_one_key_clone)
RIGHT["fa_sdpa"] = (check_feedback_attention, fa_right_sdpa)
RIGHT["fa_loop_new_zeros"] = (check_feedback_attention, fa_right_loop)


# ---- token_loop ----------------------------------------------------------------------------

def _loop(cache=None):
    """The token loop; `cache`: a dict that keeps the first call's empty keys and values."""
    def token_loop(model, tokens):
        x = model.embed(tokens)
        kv = model.project_memory(x[:, :0])
        if cache is not None:  # "the empty memory never changes": the first call's kept
            kv = cache.setdefault("kv", kv)
        keys, values = kv
        tops = []
        for t in range(tokens.size(1)):
            xs = [x[:, t]]
            for layer, k, v in zip(model.layers, keys, values):
                xs.append(layer(xs[-1], k, v))
            tops.append(xs[-1])
            new_keys, new_values = model.project_memory(model.mix(torch.stack(xs))[:, None])
            keys = [torch.cat(p, 2) for p in zip(keys, new_keys)]
            values = [torch.cat(p, 2) for p in zip(values, new_values)]
        return model.head(torch.stack(tops, 1))
    return token_loop


case("tl_state_between_calls", check_token_loop, _loop({}),
     r"(?s)^(?!.*written as a number|.*right at the check's sizes).*(earlier call.*between "
     r"calls|keeps something between calls).*project_memory\(x\[:, :0\]\)")
RIGHT["tl_right"] = (check_token_loop, _loop())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
