"""Trial 63, notebook 03 (a learner's trial): a token loop whose memory vector was off by a
little (scaled by 1.05, or with 0.01 of the top layer added) crashed the check itself with
"IndexError: index 0 is out of bounds" (the check's tolerance said "differs", the search for
the first step off used another, which found none); and one off by less (0.001 of the top
layer added), right within the tolerance on the check's model but not after its weights
changed, was told that it "keeps something between calls" although it keeps nothing.
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import check_token_loop

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _loop(model, tokens, scale=1.0, top=0.0):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        m = model.mix(torch.stack(outs)) * scale + top * outs[-1]
        k, v = model.project_memory(m[:, None])
        keys = [torch.cat(p, 2) for p in zip(keys, k)]
        values = [torch.cat(p, 2) for p in zip(values, v)]
    return model.head(torch.stack(tops, 1))


# Exercise 4: a memory vector a little off
case("token_loop_memory_scaled_105", check_token_loop, lambda m, t: _loop(m, t, scale=1.05),
     r"^(?!.*index 0 is out of bounds).*differ from step t = 1 on")
case("token_loop_memory_plus_0_01_top", check_token_loop, lambda m, t: _loop(m, t, top=0.01),
     r"^(?!.*index 0 is out of bounds).*differ from step t = 1 on")
case("token_loop_memory_plus_0_001_top", check_token_loop,
     lambda m, t: _loop(m, t, top=1e-3),
     r"as on a copy of this model.*or has a small mistake in every step")
RIGHT["token_loop_plain"] = (check_token_loop, _loop)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
