"""Trial 65, notebook 03 (a learner's trial): mixes with the wrong layer weights got only a
generic message. In `memory_vector`, softmax(w / 2) or softmax(w * 2) (a temperature), the
right weights rolled onto other layers, layers given no weight, or weights that do not sum to
one ("differs from the reference"). In the token loop, a mix written by hand with the raw
logits, a temperature, the weights flipped, sigmoid weights or a plain sum was told only
"your loop never calls model.mix", and model.mix(...) * 2 or + outs[0] "differ from step
t = 1 on"; torch.stack(outs[::-1]) (or .flip(0)) and another order of the outputs were told
"is not torch.stack([...])"; a [::-1] on a tensor (torch takes no negative step) crashed
with torch's bare ValueError in both. The check now solves for the weights the step's memory
vector gave the layers and names them. In the attention, a bias added twice was told "you
multiplied the bias by sqrt(d_head)" (the same numbers at the check's D_h = 4); the last (or
first) memory key left out, the output divided by sqrt(d_head) in place of the scores, and
the scores divided once more before the softmax got the generic message; bias [H, S] added
to scores [B, H, 1, S], a [B, H, H, D_h] result, was told it had the shape of k and v, and
every key masked (masked_fill where the mask, True = may attend, is True) "contains NaN". A
feedback cache of (2L + 1)·D numbers per token (keys and values per layer and the memory)
got "got ..., expected ...". A loop that reads a zero-filled memory up to its own slot,
mem[:, :t + 1] (off by one in time), got "differ from step t = 1 on" (and, with the first
version of the weights' naming, "gives every layer no weight"): it is named now.
"""
import math

import torch
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_memory_vector, check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _mix(weights, layers):
    return torch.einsum("l,lbd->bd", weights, layers)


# Exercise 1: the weights of the mix, not softmax(w)
case("memory_vector_weights_negative_step", check_memory_vector,
     lambda xs, w: _mix(w.softmax(0)[::-1], xs), r"a \[::-1\] on a tensor raises in torch")
case("memory_vector_temperature_half", check_memory_vector,
     lambda xs, w: _mix((w / 2).softmax(0), xs), r"softmax\(w / 2\), a temperature")
case("memory_vector_temperature_double", check_memory_vector,
     lambda xs, w: _mix((w * 2).softmax(0), xs), r"softmax\(w \* 2\), a temperature")
case("memory_vector_temperature_sqrt_width", check_memory_vector,
     lambda xs, w: _mix((w / xs.size(-1) ** 0.5).softmax(0), xs), r"temperature")
case("memory_vector_weights_rolled", check_memory_vector,
     lambda xs, w: _mix(w.softmax(0).roll(1), xs), r"right weights to the wrong layers")
case("memory_vector_middle_layers_left_out", check_memory_vector,
     lambda xs, w: w.softmax(0)[0] * xs[0] + w.softmax(0)[-1] * xs[-1],
     r"gives layer 1, layer 2 no weight")
case("memory_vector_embedding_added_as_residual", check_memory_vector,
     lambda xs, w: _mix(w.softmax(0)[1:], xs[1:]) + xs[0], r"sum to 1\.55, not one")
case("memory_vector_weights_normalised_softplus", check_memory_vector,
     lambda xs, w: _mix(torch.nn.functional.softplus(w) / torch.nn.functional.softplus(
         w).sum(), xs), r"weights of the layers are \[.*\], not softmax\(w\) = \[")
RIGHT["memory_vector_both_flipped"] = (check_memory_vector,
                                       lambda xs, w: _mix(w.flip(0).softmax(0), xs.flip(0)))
RIGHT["memory_vector_logits_shifted"] = (check_memory_vector,
                                         lambda xs, w: _mix((w - w.mean()).softmax(0), xs))


# Exercise 4: the memory vector of a step mixed with the wrong weights
_loop = feedback_token_loop


def _own(weights):
    return _loop(lambda model, outs: _mix(weights(model.mix.logits), torch.stack(outs)))


case("token_loop_mix_stack_reversed", check_token_loop,
     _loop(lambda model, outs: model.mix(torch.stack(outs[::-1]))),
     r"outputs in reverse order \(outs\[::-1\], or a flip\)")
case("token_loop_mix_stack_flipped", check_token_loop,
     _loop(lambda model, outs: model.mix(torch.stack(outs).flip(0))), r"in reverse order")
case("token_loop_mix_stack_negative_step", check_token_loop,
     _loop(lambda model, outs: model.mix(torch.stack(outs)[::-1])),
     r"a \[::-1\] on a tensor raises in torch.*model\.mix\(torch\.stack\(outs\)\)")
case("token_loop_mix_top_first", check_token_loop,
     _loop(lambda model, outs: model.mix(torch.stack(outs[-1:] + outs[:-1]))),
     r"in the order \[2, 0, 1\]")
case("token_loop_own_mix_logits_flipped", check_token_loop,
     _own(lambda w: w.flip(0).softmax(0)), r"m_0 pairs the weights with the layers in reverse")
case("token_loop_own_mix_raw_logits", check_token_loop, _own(lambda w: w),
     r"m_0 weights the layers by the raw logits, no softmax")
case("token_loop_own_mix_temperature", check_token_loop, _own(lambda w: (w / 2).softmax(0)),
     r"softmax\(model\.mix\.logits / 2\), a temperature")
case("token_loop_own_mix_sigmoid", check_token_loop, _own(lambda w: w.sigmoid()),
     r"by sigmoid\(model\.mix\.logits\)")
case("token_loop_own_mix_plain_sum", check_token_loop, _own(lambda w: torch.ones_like(w)),
     r"by 1 each \(a plain sum of the layers\)")
case("token_loop_mix_doubled", check_token_loop,
     _loop(lambda model, outs: model.mix(torch.stack(outs)) * 2), r"sum to 2, not one")
case("token_loop_mix_plus_embedding", check_token_loop,
     _loop(lambda model, outs: model.mix(torch.stack(outs)) + outs[0]), r"sum to 2, not one")
def _zero_slot_read(model, tokens, ahead=1):  # a zero-filled memory read up to slot t
    x = model.embed(tokens)
    memory, tops = [torch.zeros_like(x[:, 0]) for _ in range(tokens.size(1))], []
    for t in range(tokens.size(1)):
        keys, values = model.project_memory(torch.stack(memory, 1)[:, :t + ahead])
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        memory[t] = model.mix(torch.stack(outs))
    return model.head(torch.stack(tops, 1))


case("token_loop_own_zero_slot_read", check_token_loop, _zero_slot_read,
     r"^(?!.*no weight).*first memory vector your loop projects is all zeros.*mem\[:, :t\]")
RIGHT["token_loop_zero_filled_memory"] = (check_token_loop,
                                          lambda m, t: _zero_slot_read(m, t, ahead=0))
RIGHT["token_loop_own_mix_flipped_twice"] = (check_token_loop, _loop(lambda model, outs: _mix(
    model.mix.logits.flip(0).softmax(0), torch.stack(outs).flip(0))))


# Exercise 3: the bias twice, a key left out, the scale in the wrong place
def _attention(weights=lambda s: s.softmax(-1), keys=slice(None), after=1.0, scale=True):
    def feedback_attention(q, k, v, bias):
        if k.size(2) == 0:
            return torch.zeros_like(q)
        k, v, bias = k[:, :, keys], v[:, :, keys], bias[:, keys]
        s = torch.einsum("bhd,bhsd->bhs", q, k) / (math.sqrt(q.size(-1)) if scale else 1)
        return torch.einsum("bhs,bhsd->bhd", weights(s + bias, bias), v) / after
    return feedback_attention


case("feedback_attention_bias_added_twice", check_feedback_attention,
     _attention(lambda s, bias: (s + bias).softmax(-1)),
     r"^(?!.*you multiplied the bias).*added twice")
case("feedback_attention_newest_key_left_out", check_feedback_attention,
     _attention(lambda s, bias: s.softmax(-1), keys=slice(None, -1)),
     r"leaves out the last key: the last key is the previous step")
case("feedback_attention_oldest_key_left_out", check_feedback_attention,
     _attention(lambda s, bias: s.softmax(-1), keys=slice(1, None)), r"leaves out the first key")
case("feedback_attention_output_scaled", check_feedback_attention,
     lambda q, k, v, bias: _attention(lambda s, b: s.softmax(-1), scale=False,
                                      after=math.sqrt(q.size(-1)))(q, k, v, bias),
     r"divided the output .* by sqrt\(d_head\), not the scores")
case("feedback_attention_scores_divided_again", check_feedback_attention,
     _attention(lambda s, bias: (s / 2).softmax(-1)), r"bias included, are divided once more")


def _every_key_masked(q, k, v, bias):  # True = may attend, filled where True
    allowed = torch.ones(k.size(2), dtype=torch.bool, device=q.device)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd",
                        scores.masked_fill(allowed, float("-inf")).softmax(-1), v)


case("feedback_attention_mask_polarity", check_feedback_attention, _every_key_masked,
     r"NaN everywhere: a softmax over scores that are all -inf.*True = may attend")


def _bias_on_query_axis(q, k, v, bias):  # bias [H, S] + scores [B, H, 1, S]: [B, H, H, S]
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = q.unsqueeze(2) @ k.transpose(-1, -2) / math.sqrt(q.size(-1)) + bias
    return (scores.softmax(-1) @ v).squeeze(2)


case("feedback_attention_bias_broadcast_over_heads", check_feedback_attention,
     _bias_on_query_axis, r"^(?!.*the shape of k and v).*broadcasts to \[B, H, H, S\]")


# Exercise 5: the keys and values of every layer, and the memory
case("cache_bytes_feedback_unshared", check_cache_bytes,
     lambda n_layers, d, n, b: (2 * n_layers * d * n * b, (2 * n_layers + 1) * d * n * b),
     r"\(2·n_layers \+ 1\)·d_model numbers per token")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
