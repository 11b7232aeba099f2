"""Trial 69, notebook 01 (a learner's trial of the five exercises).

Misnamed: in Exercise 2, a [B, T, S] mask that the answer ignores (it masks only when
`mask.dim() == 2`) or reduces over the batch (`mask.any(0)`, `mask.all(0)`) got a generic
"differs"; one mask for every batch row is now named, beside the per-batch loop reusing
`mask[0]` named before. In Exercise 5, an answer that computes with copies of the module's
layers (`copy.deepcopy(mha)`, a new `nn.Linear` filled by `load_state_dict` or `copy_`) was
told that `mha.out_proj.bias` was detached or turned into a Python number; a gradient check
that finds leaves of the answer's own in its graph now names the copies. In Exercises 2 and
5, a tensor made on the CPU in an answer the meta device cannot run (a loop on `.item()`)
was refused without naming the operation that mixed it in; the audit's error names it, and
so does the message now ("in `*`, torch's mul", "in index_fill"), as on the meta device.
In Exercise 3, a mask made on the notebook's `device` (a GPU in Colab) was told to use
"device=x.device, the inputs' device": the exercise has no input tensor; it is now told to
make the mask on the CPU, as the exercise says.
"""
import copy
import math

import torch

from checker_helpers import judge, trial_case, trial_tests

from labnn.exercises.self_attention import (check_attention, check_causal_mask,
                                            check_multi_head_attention)
from labnn.training import device_audit

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _attention(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        return s.softmax(-1) @ v
    w = s.masked_fill(~mask, float("-inf")).softmax(-1)
    return w.masked_fill(~mask.any(-1, keepdim=True), 0.0) @ v


def _batch_mask(reduce):
    def attention(q, k, v, mask=None):
        return _attention(q, k, v, reduce(mask) if mask is not None and mask.dim() == 3
                          else mask)
    return attention


ONE_MASK = r"every batch row b uses {}.*; use mask\[b\]"
case("attention_mask_3d_ignored", check_attention, _batch_mask(lambda m: None),
     ONE_MASK.format(r"no mask: a mask not \[T, S\] is ignored"))
case("attention_mask_batch_any", check_attention, _batch_mask(lambda m: m.any(0)),
     ONE_MASK.format(r"the mask reduced over the batch, mask\.any\(0\)"))
case("attention_mask_batch_all", check_attention, _batch_mask(lambda m: m.all(0)),
     ONE_MASK.format(r"the mask reduced over the batch, mask\.all\(0\)"))
case("attention_mask_batch0", check_attention, _batch_mask(lambda m: m[0]),
     ONE_MASK.format(r"mask\[0\], batch 0's mask"))


def _mha(layers=lambda mha: (mha.qkv, mha.out_proj), attend=_attention):
    def multi_head_attention(x, mha, mask=None):
        qkv, out_proj = layers(mha)
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in qkv(x).chunk(3, dim=-1))
        return out_proj(attend(q, k, v, mask).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


def _loaded(layer):  # a new Linear with the layer's weights: its own leaves
    new = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None,
                          device=layer.weight.device, dtype=layer.weight.dtype)
    new.load_state_dict(layer.state_dict())
    return new


COPIES = r"computed from \d+ tensor\(s\) of its own that require grad: copies.*deepcopy"
case("mha_deepcopy", check_multi_head_attention,
     _mha(lambda mha: (lambda c: (c.qkv, c.out_proj))(copy.deepcopy(mha))), COPIES)
case("mha_linears_loaded", check_multi_head_attention,
     _mha(lambda mha: (_loaded(mha.qkv), _loaded(mha.out_proj))), COPIES)

def _empty_rows_by_item(fill):  # a Python loop over the queries, on .item()
    def attention(q, k, v, mask=None):
        if mask is None:
            return _attention(q, k, v)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(
            ~mask, float("-inf")).softmax(-1)
        for i in range(mask.size(-2)):
            if not mask[..., i, :].any().item():
                w = fill(w, i)
        return w @ v
    return attention


def _rows_kept(q, k, v, mask=None):  # a CPU tensor of ones, zeroed by a loop on .item()
    if mask is None:
        return _attention(q, k, v)
    w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(
        ~mask, float("-inf")).softmax(-1)
    keep = torch.ones(mask.shape[:-1] + (1,), dtype=w.dtype)
    for i in range(mask.size(-2)):
        if mask[..., i, :].sum().item() == 0:
            keep[..., i, :] = 0
    return w.nan_to_num() * keep @ v


CPU = r"mixes its inputs with a tensor made on the CPU \(in {}\)"
case("attention_rows_kept_by_item", check_attention, _rows_kept,
     CPU.format(r"`\*`, torch's mul"))
case("mha_item_loop_cpu_index", check_multi_head_attention, _mha(attend=_empty_rows_by_item(
    lambda w, i: w.index_fill(-2, torch.tensor([i]), 0.0))), CPU.format("index_fill"))

RIGHT["attention_plain"] = (check_attention, _attention)
RIGHT["mha_plain"] = (check_multi_head_attention, _mha())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


def causal_mask_mine(t):  # on the notebook's `device` (cell 2: pick_device(), a GPU in Colab)
    return torch.ones(t, t, dtype=torch.bool, device=device_audit.ACCELERATOR).tril()


def test_causal_mask_on_notebook_device(capsys):
    """Under the audit, as the notebook runs with LABNN_DEVICE=audit."""
    with device_audit.DeviceAudit():
        judge(check_causal_mask, (causal_mask_mine,),
              r"no input tensor to take a device from.*default device, the CPU", capsys)
