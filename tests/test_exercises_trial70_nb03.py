"""Trial 70, notebook 03 (a learner's trial and fix). A token loop whose layer i read another
layer's keys and values (keys[i % 2], written for 2 layers; keys[t % L], by the step; the
values of layer i - 1) was told only 'right at the check's sizes, not at these' or 'differs
from step t = 1 on': the layer whose keys each layer read is now found and named. A loop that
embeds each token as torch.tensor(tokens[b, t].item()) (a 0-dim CPU index, refused by a GPU's
embedding) passed under LABNN_DEVICE=audit: a 0-dim CPU tensor is a number to arithmetic, not
an index of an embedding, index_select or gather.
"""
import pytest
import torch
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_cache_bytes, check_feedback_attention,
                                                  check_token_loop)
from labnn.exercises.grading import ExerciseFailed, expect_any_device
from labnn.training import device_audit

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _loop(read=lambda keys, values, i, t: (keys[i], values[i]),
          embed=lambda model, tokens: model.embed(tokens),
          head=lambda model, tops: model.head(torch.stack(tops, 1))):
    """The notebook's token loop, layer i at step t reading `read(keys, values, i, t)`, the
    tokens embedded by `embed(model, tokens)`, the logits `head(model, tops)` of the steps'
    top outputs: right with the defaults."""
    def token_loop(model, tokens):
        x = embed(model, tokens)
        keys, values = model.project_memory(x[:, :0])
        tops = []
        for t in range(tokens.size(1)):
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                outs.append(layer(outs[-1], *read(keys, values, i, t)))
            tops.append(outs[-1])
            k, v = model.project_memory(model.mix(torch.stack(outs))[:, None])
            keys = [torch.cat(p, 2) for p in zip(keys, k)]
            values = [torch.cat(p, 2) for p in zip(values, v)]
        return head(model, tops)
    return token_loop


# Exercise 4: a layer reading another layer's keys and values
case("token_loop_keys_i_mod_2", check_token_loop,
     _loop(lambda k, v, i, t: (k[i % 2], v[i % 2])),
     r"model\.layers\[2\] read the keys and values of layer 0 \(keys\[0\], values\[0\]\)"
     r".*keys\[i\], values\[i\]")
case("token_loop_keys_min_i_1", check_token_loop,
     _loop(lambda k, v, i, t: (k[min(i, 1)], v[min(i, 1)])),
     r"model\.layers\[2\] read the keys and values of layer 1")
case("token_loop_keys_by_step", check_token_loop,
     _loop(lambda k, v, i, t: (k[t % len(k)], v[t % len(v)])),
     r"at step t = 1, model\.layers\[0\] read the keys and values of layer 1")
case("token_loop_values_of_layer_below", check_token_loop,
     _loop(lambda k, v, i, t: (k[i], v[i - 1])),
     r"model\.layers\[0\] read its own keys but the values of layer 1 \(values\[1\]\)")



case("token_loop_tops_cat_dim_1", check_token_loop, _loop(
    head=lambda model, tops: model.head(torch.cat(tops, dim=1))),
     r"model\.head got \[2, 84\] = \[B, T·D\]: torch\.cat\(tops, dim=1\).*torch\.stack")


# Exercise 3: the bias handed to scaled_dot_product_attention as a boolean mask
def _sdpa(mask):
    return lambda q, k, v, bias: torch.nn.functional.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=mask(bias)[:, None])[:, :, 0] if k.size(2) else \
        torch.zeros_like(q)


case("feedback_attention_bias_as_bool_mask", check_feedback_attention, _sdpa(lambda b: b > 0),
     r"the bias is a boolean mask \(True where bias > 0 may attend.*added to each score")
case("feedback_attention_bias_as_bool_mask_negated", check_feedback_attention,
     _sdpa(lambda b: ~(b > 0)), r"the bias is a boolean mask \(True where bias <= 0")
RIGHT["feedback_attention_sdpa_float_bias"] = (check_feedback_attention, _sdpa(lambda b: b))

# Exercise 5: both sizes times the 4 heads (at L = 3, where L + 1 = 4 too)
case("cache_bytes_both_times_heads", check_cache_bytes,
     lambda L, d, n, b: (2 * L * d * n * b * 4, 2 * d * n * b * 4),
     r"both sizes are 4 times too large, also with n_layers = 6: a factor 4 in both")
case("cache_bytes_both_times_3", check_cache_bytes,
     lambda L, d, n, b: (3 * 2 * L * d * n * b, 3 * 2 * d * n * b), r"both sizes are 3 times")

# Exercise 4 on a GPU: a 0-dim CPU index of the embedding
def _embedded_one_by_one(model, tokens):
    return torch.stack([torch.stack([model.embed(torch.tensor(tokens[b, t].item()))
                                     for t in range(tokens.size(1))])
                        for b in range(tokens.size(0))])


case("token_loop_embed_item_tensor", check_token_loop, _loop(embed=_embedded_one_by_one),
     r"tensor made on the CPU \(in embedding\), by your torch\.tensor\(\.\.\.\) without "
     r"device=")
case("token_loop_layer_weights_cpu", check_token_loop, feedback_token_loop(
    lambda model, outs: torch.einsum("l,lbd->bd", model.mix.logits.softmax(0).cpu(),
                                     torch.stack(outs))),
     r"made on the CPU \(in .*\), by your \.cpu\(\) \(or \.to\('cpu'\)\).*no \.cpu\(\)")
case("token_loop_logits_cpu", check_token_loop, lambda model, tokens: _loop()(
    model, tokens).cpu(), r"returns a tensor on the CPU .*made by your \.cpu\(\)")
RIGHT["token_loop_embed_item_tensor_on_device"] = (check_token_loop, _loop(
    embed=lambda model, tokens: torch.stack([torch.stack([model.embed(torch.tensor(
        tokens[b, t].item(), device=tokens.device)) for t in range(tokens.size(1))])
        for b in range(tokens.size(0))])))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


@pytest.mark.parametrize("lookup", [
    lambda t, i: torch.nn.functional.embedding(i, t), lambda t, i: t.index_select(0, i),
    lambda t, i: t.gather(0, i.expand(1, 3))])
def test_a_0dim_cpu_index_of_a_lookup_fails_as_on_a_gpu(lookup):
    """A GPU takes a 0-dim CPU tensor as a number in arithmetic, not as the index of a
    look-up: the meta rerun and the stand-in accelerator both refuse it; arithmetic with
    one still passes."""
    table = torch.randn(4, 3)
    with pytest.raises(ExerciseFailed, match=r"made on the CPU \(in \w+\)"):
        expect_any_device(lambda t: lookup(t, torch.tensor(1)), "f(t)", table)
    expect_any_device(lambda t: t * torch.tensor(2.0), "f(t)", table)
    placed = device_audit.placed(table.clone(), True)
    with device_audit.DeviceAudit(), pytest.raises(RuntimeError, match="same device"):
        lookup(placed, torch.tensor(1))
