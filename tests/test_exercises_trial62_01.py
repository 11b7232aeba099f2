"""Trial 62, notebook 01: a multi-head attention that merged its heads with `.view` after
`transpose(1, 2)` crashed with torch's "view size is not compatible", and the check's notice
said the attention functions of Ex. 1-2 might be counting axes from the front: the notice
now names the `.view` of transposed heads and the reshape that merges them. A float32 step
in an exercise with no square root (notebook 02's `update_memory`) was told to use
`math.sqrt(d)`: only the attention exercises name it now.
"""
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import check_multi_head_attention
from labnn.exercises.transformer_xl import check_update_memory

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _merged_by_view(x, mha, mask=None):
    b, t, d = x.shape
    q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
               for z in mha.qkv(x).chunk(3, dim=-1))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return mha.out_proj((s.softmax(-1) @ v).transpose(1, 2).view(b, t, d))


case("heads_merged_by_view", check_multi_head_attention, _merged_by_view,
     r"\.view on transposed heads.*\.reshape\(B, T, D\)")



def _memory_via_float32(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], 1)
    return x[:, max(0, x.size(1) - mem_len):].float().to(h.dtype).detach()


case("memory_float32_step", check_update_memory, _memory_via_float32,
     r"^(?!.*sqrt).*float32 step.*torch\.tensor\(n\): use the number n")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
