"""Trial 60, notebook 03 (a learner's trial): distances made in float16 passed
`check_relative_bias` (whole numbers round past 2048, and the check's keys stopped at 300);
distances clamped at 256, a number written out, were blamed on a bfloat16 table's dtype;
embeddings detached in the token loop were blamed on a detached memory; a max over zero keys
(the notebook's own "subtract it yourself" route, no S = 0 case) raised with no name. Right:
int32 and float32 distances, the max subtracted by hand with its S = 0 case.
"""
import math

import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import (check_feedback_attention,
                                                  check_relative_bias, check_token_loop)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _bias(dtype=torch.int64, clamp=None):
    def relative_bias(table, s):
        d = torch.arange(s, 0, -1, device=table.device, dtype=dtype)
        d = d.clamp(max=clamp or table.size(1)).long()
        return table[:, (d - 1).clamp(max=table.size(1) - 1)]
    return relative_bias


case("distances_float16", check_relative_bias, _bias(torch.float16),
     r"float16 numbers, which round past 2048.*int64")
case("distances_clamped_at_256", check_relative_bias, _bias(clamp=256),
     r"clamped the distances at 256, a number written out.*table\.size\(1\)")
RIGHT["distances_int32"] = (check_relative_bias, _bias(torch.int32))
RIGHT["distances_float32"] = (check_relative_bias, _bias(torch.float32))


def _attention(dims=-1, guard=True):
    def feedback_attention(q, k, v, bias):
        if guard and k.size(2) == 0:
            return q.new_zeros(q.shape)
        s = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
        e = (s - s.amax(dim=dims, keepdim=True)).exp()
        return torch.einsum("bhs,bhsd->bhd", e / e.sum(-1, keepdim=True), v)
    return feedback_attention


EMPTY_MAX = r"no memory \(S = 0\) your max over the keys has nothing to reduce.*new_zeros"
case("amax_without_empty_case", check_feedback_attention, _attention(guard=False),
     EMPTY_MAX)
case("amax_over_heads_without_empty_case", check_feedback_attention,
     _attention(dims=(1, 2), guard=False), EMPTY_MAX)
RIGHT["amax_with_empty_case"] = (check_feedback_attention, _attention())


def _loop(detach_embeddings=False):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        x = x.detach() if detach_embeddings else x
        keys, values = map(list, model.project_memory(x[:, :0]))
        tops = []
        for t in range(tokens.size(1)):
            outs = [x[:, t]]
            for i, layer in enumerate(model.layers):
                outs.append(layer(outs[-1], keys[i], values[i]))
            tops.append(outs[-1])
            new_k, new_v = model.project_memory(model.mix(torch.stack(outs))[:, None])
            keys = [torch.cat(pair, 2) for pair in zip(keys, new_k)]
            values = [torch.cat(pair, 2) for pair in zip(values, new_v)]
        return model.head(torch.stack(tops, 1))
    return token_loop


case("embeddings_detached", check_token_loop, _loop(detach_embeddings=True),
     r"`model\.embed\.weight` alone gets no gradient.*embeddings were detached")
RIGHT["token_loop"] = (check_token_loop, _loop())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
