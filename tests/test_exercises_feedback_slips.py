"""Notebook 03's checkers tell apart the neighbours of trial 8's cases (issue 28): a count
written out from one read off the inputs, and a model part handed a tensor of another
shape than the loop of the trial's case gave it."""

import torch

from checker_helpers import fails_with, passes
from labnn.exercises.feedback_transformer.memory_vector import (
    check_feedback_attention, check_memory_vector, check_relative_bias)
from labnn.exercises.feedback_transformer.token_loop import check_token_loop


def distances(s, cap):
    return torch.arange(s, 0, -1).clamp(max=cap)


def test_a_clamp_written_out_is_not_called_the_head_count():
    fails_with(check_relative_bias, lambda t, s: t[:, distances(s, 3) - 1],
               r"clamped the distances at 3: .*table\.size\(1\) = 5")


def test_a_clamp_to_the_rows_is_called_the_head_count():
    fails_with(check_relative_bias, lambda t, s: t[:, distances(s, t.size(0)) - 1],
               r"table\.size\(0\) = H = 3, the number of heads")


def test_a_layer_count_read_off_the_inputs_is_not_called_hard_coded():
    def top_left_out(xs, w):
        return sum(w.softmax(0)[i] * xs[i] for i in range(len(xs) - 1))

    fails_with(check_memory_vector, top_left_out,
               r"only the first 3 of the L \+ 1 = 4 layers: the mix runs over all")


def test_squeezing_the_query_axis_alone_passes_with_one_batch_row_and_one_head(capsys):
    def squeezed(q, k, v, bias):  # squeeze(-2) drops only the query axis: right
        if k.size(2) == 0:
            return torch.zeros_like(q)
        scores = (q[:, :, None] @ k.mT).squeeze(-2) / q.size(-1) ** 0.5 + bias
        return (scores.softmax(-1)[:, :, None] @ v).squeeze(-2)

    passes(check_feedback_attention, squeezed, capsys)


def loop(step=lambda x, t: x[:, t], mix=lambda model, outs: model.mix(torch.stack(outs))):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = model.project_memory(x[:, :0])
        tops = []
        for t in range(tokens.size(1)):
            outs = [step(x, t)]
            for i, layer in enumerate(model.layers):
                outs.append(layer(outs[-1], keys[i], values[i]))
            tops.append(outs[-1])
            new_keys, new_values = model.project_memory(mix(model, outs)[:, None])
            keys = [torch.cat(pair, 2) for pair in zip(keys, new_keys)]
            values = [torch.cat(pair, 2) for pair in zip(values, new_values)]
        return model.head(torch.stack(tops, 1))
    return token_loop


def test_a_loop_that_never_calls_the_mix_is_told_so():
    fails_with(check_token_loop, loop(mix=lambda model, outs: torch.stack(outs).sum(0)),
               r"never calls model\.mix")


def test_a_layer_given_every_step_at_once_is_not_told_about_a_slice():
    fails_with(check_token_loop, loop(step=lambda x, t: x),
               r"model\.layers\[0\] got x of shape \[2, 7, 12\]: a layer takes one step's "
               r"vectors, \[B, D\]: feed it x\[:, t\], then")
