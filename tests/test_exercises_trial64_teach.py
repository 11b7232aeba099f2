"""Trial 64 (a reader of notebook 03): a token loop that made the memory vector m but projected
the top layer's output got a message ending "(made, then not the one projected?)", which does
not say who made what; it now ends "(if you made m, project m itself, not outs[-1])".
"""
import torch
from checker_helpers import fails_with

from labnn.exercises.feedback_transformer import check_token_loop


def projects_the_top(model, tokens):
    x = model.embed(tokens)
    keys, values = map(list, model.project_memory(x[:, :0]))
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            outs.append(layer(outs[-1], k, v))
        tops.append(outs[-1])
        m = model.mix(torch.stack(outs))  # made, then not projected
        assert m.shape == outs[-1].shape
        nk, nv = model.project_memory(outs[-1][:, None])
        keys = [torch.cat(p, 2) for p in zip(keys, nk)]
        values = [torch.cat(p, 2) for p in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


def test_projecting_the_top_says_to_project_m():
    fails_with(check_token_loop, projects_the_top,
               r"top layer's output.*\(if you made m, project m itself, not outs\[-1\]\)\.$")
