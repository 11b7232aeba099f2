"""Trial 45b: a blind learner trial of notebook 03's five exercises (284 answers).

Wrong answers that passed: a `.squeeze()` in `memory_vector`, `relative_bias` and the token
loop (no check tried B = 1, H = 1 or s = 1), a `feedback_attention` that squeezes its scores
or returns zeros for one memory key (S = 1 never tried), a token loop that keeps only the
last 32 memory steps (the longest sequence checked had 24 tokens). Messages that blamed
another mistake: `xs[0]` was told it took `xs[w.argmax()]`; a `relative_bias` that changed
`table` in place without changing its values crashed the check ("backward through the graph
a second time"); a token loop that did so to `tokens` was told of a preallocated memory, one
that mixed with the detached `model.layer_weights()` of a detached memory, one that called
`model._token` of `feedback_step`; a `cache_bytes` in MiB was told it "counts 0 layers", one
that used a head's width (d_model // 4) that it counted "numbers, not bytes". Too long: a
token loop under torch.no_grad() got a 1,566-character message listing 37 parameters. Not
named: a softmax over the batch, an attention that masks every key, a token loop on the
notebook's global model (told only of the shape), `cache_bytes` with bytes_per_number or
d_model written as a number, or divided by bytes_per_number."""
import math

from checker_helpers import trial_case, trial_tests

import torch

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_memory_vector, check_relative_bias,
                                                  check_token_loop)
from labnn.feedback import FeedbackConfig, FeedbackTransformer

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
SQUEEZE = r"squeeze|size-1|= 1\b"

# the notebook's global model of section 1, which a token loop may read by mistake
feedback = FeedbackTransformer(FeedbackConfig(vocab_size=32, d_model=32, n_heads=2,
                                              n_layers=2, attn_len=4))


# ---- memory_vector -------------------------------------------------------------------------

def _mv(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0)


def _mv_squeeze(xs, w):
    return (w.softmax(0)[:, None, None] * xs).sum(0, keepdim=True).squeeze()


def _mv_squeeze_input(xs, w):
    xs = xs.squeeze()
    return (w.softmax(0).view(-1, *[1] * (xs.dim() - 1)) * xs).sum(0)


def _mv_embedding(xs, w):
    return xs[0]


case("mv_squeeze_result", check_memory_vector, _mv_squeeze, SQUEEZE)
case("mv_squeeze_input", check_memory_vector, _mv_squeeze_input, SQUEEZE)
case("mv_embedding_only", check_memory_vector, _mv_embedding,
     r"(?s)^(?!.*argmax).*(embedding|xs\[0\])")
RIGHT["mv_right"] = (check_memory_vector, _mv)
RIGHT["mv_matmul"] = (check_memory_vector, lambda xs, w: xs.permute(1, 2, 0) @ w.softmax(-1))
RIGHT["mv_tensordot"] = (check_memory_vector, lambda xs, w: torch.tensordot(w.softmax(0), xs, 1))


# ---- relative_bias -------------------------------------------------------------------------

def _rb(table, s):
    return table[:, torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1]


def _rb_squeeze(table, s):
    return _rb(table, s).squeeze()


def _rb_columns_squeezed(table, s):
    m = table.size(1)
    cols = [table[:, min(s - j, m) - 1].squeeze() for j in range(s)]
    return torch.stack(cols, -1) if cols else table[:, :0]


def _rb_clamp_table(table, s):
    """`table.clamp_(...)`: changes the caller's table (its values stay the same)."""
    table.clamp_(-10, 10)
    return _rb(table, s)


def _rb_scale_table(table, s):
    table *= 1
    return _rb(table, s)


def _rb_far_first(table, s):
    m = table.size(1)
    far = table[:, -1:].expand(-1, max(s - m, 0))
    return torch.cat([far, table[:, :min(s, m)].flip(1)], 1)


case("rb_squeeze", check_relative_bias, _rb_squeeze, SQUEEZE)
case("rb_columns_squeezed", check_relative_bias, _rb_columns_squeezed, SQUEEZE)
IN_PLACE_TABLE = r"(?s)^(?!.*second time).*`table`.*in place"
case("rb_clamps_table_in_place", check_relative_bias, _rb_clamp_table, IN_PLACE_TABLE)
case("rb_scales_table_in_place", check_relative_bias, _rb_scale_table, IN_PLACE_TABLE)
RIGHT["rb_right"] = (check_relative_bias, _rb)
RIGHT["rb_far_first"] = (check_relative_bias, _rb_far_first)
RIGHT["rb_gather"] = (check_relative_bias, lambda table, s: table.gather(  # a GPU's index: there
    1, ((s - torch.arange(s, device=table.device)).clamp(max=table.size(1)) - 1).expand(
        table.size(0), s)))


# ---- feedback_attention --------------------------------------------------------------------

def _scores(q, k, bias):
    return torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias


def _fa(q, k, v, bias):
    return torch.einsum("bhs,bhsd->bhd", _scores(q, k, bias).softmax(-1), v)


def _fa_squeeze_scores(q, k, v, bias):
    s = (q.unsqueeze(2) @ k.transpose(-1, -2)).squeeze() / math.sqrt(q.size(-1)) + bias
    return (s.softmax(-1).unsqueeze(-2) @ v).squeeze(-2)


def _fa_zeros_up_to_one_key(q, k, v, bias):
    """`if k.size(2) <= 1`: zeros for one memory key too."""
    return torch.zeros_like(q) if k.size(2) <= 1 else _fa(q, k, v, bias)


def _fa_softmax_batch(q, k, v, bias):
    return torch.einsum("bhs,bhsd->bhd", _scores(q, k, bias).softmax(0), v)


def _fa_every_key_masked(q, k, v, bias):
    """masked_fill with a mask of True = may attend: every key masked, NaN turned to 0."""
    s = _scores(q, k, bias).masked_fill(torch.ones(k.size(2), dtype=torch.bool), -math.inf)
    return torch.nan_to_num(torch.einsum("bhs,bhsd->bhd", s.softmax(-1), v))


def _fa_sdpa(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    return torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=bias[:, None]).squeeze(2)


def _fa_bmm(q, k, v, bias):
    b, h, s, d = k.shape
    scores = torch.bmm(q.reshape(b * h, 1, d), k.reshape(b * h, s, d).transpose(1, 2))
    w = (scores.view(b, h, s) / math.sqrt(d) + bias).softmax(-1)
    return torch.bmm(w.view(b * h, 1, s), v.reshape(b * h, s, d)).view(b, h, d)


case("fa_squeeze_scores", check_feedback_attention, _fa_squeeze_scores, SQUEEZE)
case("fa_zeros_for_one_key", check_feedback_attention, _fa_zeros_up_to_one_key,
     r"S = 1|one (memory )?key")
case("fa_softmax_over_batch", check_feedback_attention, _fa_softmax_batch,
     r"batch|dim 0")
case("fa_every_key_masked", check_feedback_attention, _fa_every_key_masked,
     r"(?i)zero everywhere|all zeros|mask")
RIGHT["fa_right"] = (check_feedback_attention, _fa)
RIGHT["fa_sdpa"] = (check_feedback_attention, _fa_sdpa)
RIGHT["fa_bmm"] = (check_feedback_attention, _fa_bmm)


# ---- token_loop ----------------------------------------------------------------------------

def _loop(model, tokens, *, window=None, squeeze_m=False, mix=None, token=False):
    """The token loop (right with the defaults)."""
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(x.size(1)):
        if token:
            top, m = model._token(x[:, t], keys, values)
        else:
            xs = [x[:, t]]
            for layer, k, v in zip(model.layers, keys, values):
                xs.append(layer(xs[-1], k, v))
            top = xs[-1]
            m = model.mix(torch.stack(xs)) if mix is None else mix(model, torch.stack(xs))
        m = m.squeeze() if squeeze_m else m
        tops.append(top)
        new_keys, new_values = model.project_memory(m[:, None])
        keys = [torch.cat(p, 2)[:, :, -(window or 0):] for p in zip(keys, new_keys)]
        values = [torch.cat(p, 2)[:, :, -(window or 0):] for p in zip(values, new_values)]
    return model.head(torch.stack(tops, 1))


def _tl_no_grad(model, tokens):
    with torch.no_grad():
        return _loop(model, tokens)


def _tl_tokens_modulo(model, tokens):
    """`tokens %= V`: the values stay, but the tensor the embedding saved is changed."""
    tokens %= model.config.vocab_size
    return _loop(model, tokens)


def _tl_global_model(model, tokens):
    return _loop(feedback, tokens)


def _tl_own_layer(model, tokens):
    """A right loop that writes the layer itself from its parameters."""
    x = model.embed(tokens)
    b, _, d = x.shape
    h = model.config.n_heads
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(x.size(1)):
        xs = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            q = layer.attn.q(layer.norm_attn(xs[-1])).view(b, h, d // h)
            z = _fa(q, k, v, _rb(layer.attn.rel.bias, k.size(2)))
            y = xs[-1] + layer.attn.out_proj(z.reshape(b, d))
            xs.append(y + layer.ff(layer.norm_ff(y)))
        tops.append(xs[-1])
        m = _mv(torch.stack(xs), model.mix.logits)
        new_keys, new_values = model.project_memory(m[:, None])
        keys = [torch.cat(p, 2) for p in zip(keys, new_keys)]
        values = [torch.cat(p, 2) for p in zip(values, new_values)]
    return model.head(torch.stack(tops, 1))


def _layer_weights(model, xs):
    return (model.layer_weights()[:, None, None] * xs).sum(0)


case("tl_window_32", check_token_loop, lambda model, tokens: _loop(model, tokens, window=32),
     r"window|last 32")
case("tl_squeeze_memory", check_token_loop,
     lambda model, tokens: _loop(model, tokens, squeeze_m=True), SQUEEZE)
case("tl_squeeze_logits", check_token_loop,
     lambda model, tokens: _loop(model, tokens).squeeze(), SQUEEZE)
case("tl_no_grad_message_short", check_token_loop, _tl_no_grad, r"no_grad|detach")
case("tl_rebuilt_tensor_message_short", check_token_loop,
     lambda model, tokens: torch.tensor(_loop(model, tokens).tolist()),
     r"detach|torch\.tensor|tolist")
case("tl_tokens_changed_in_place", check_token_loop, _tl_tokens_modulo,
     r"(?s)^(?!.*preallocated).*`?tokens`?.*in place")
case("tl_mix_from_layer_weights", check_token_loop,
     lambda model, tokens: _loop(model, tokens, mix=_layer_weights), r"layer_weights")
case("tl_calls_model_token", check_token_loop,
     lambda model, tokens: _loop(model, tokens, token=True), r"_token")
case("tl_global_model", check_token_loop, _tl_global_model,
     r"(?i)global|`feedback`|notebook's model")
RIGHT["tl_right"] = (check_token_loop, _loop)
RIGHT["tl_own_layer"] = (check_token_loop, _tl_own_layer)
RIGHT["tl_config_window"] = (check_token_loop,
                             lambda model, tokens: _loop(model, tokens,
                                                         window=model.config.attn_len))


# ---- cache_bytes ---------------------------------------------------------------------------

def _cb_with(scale=1, d=None, bpn=None, div=False):
    def cache_bytes(n_layers, d_model, n_tokens, bytes_per_number):
        b = bytes_per_number if bpn is None else bpn
        per = (d or d_model) * n_tokens
        per = per // b if div else per * b
        return 2 * n_layers * per // scale, 2 * per // scale
    return cache_bytes


case("cb_mib", check_cache_bytes, _cb_with(scale=2**20), r"(?s)^(?!.*0 layers).*MiB")
case("cb_head_width", check_cache_bytes,
     lambda n_layers, d_model, n_tokens, b: _cb_with()(n_layers, d_model // 4, n_tokens, b),
     r"(?s)^(?!.*numbers, not bytes).*(head|d_model)")
case("cb_bytes_per_number_4", check_cache_bytes, _cb_with(bpn=4),
     r"bytes_per_number.*(written as a number|hard-coded|whatever)")
case("cb_d_model_128", check_cache_bytes, _cb_with(d=128),
     r"d_model.*(written as a number|hard-coded|whatever)")
case("cb_divides_by_bytes", check_cache_bytes, _cb_with(div=True),
     r"divid.*bytes_per_number|bytes_per_number.*(multiply|times)")
RIGHT["cb_right"] = (check_cache_bytes, _cb_with())
RIGHT["cb_list"] = (check_cache_bytes, lambda *a: list(_cb_with()(*a)))
RIGHT["cb_round"] = (check_cache_bytes,
                     lambda n_layers, d_model, n_tokens, b: (
                         round(2.0 * n_layers * d_model * n_tokens * b),
                         round(2.0 * d_model * n_tokens * b)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
