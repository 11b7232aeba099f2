"""The `Shape:` sections of the annotated source say what the code returns: each case runs
one function or module and compares the shapes of what it returns with the shapes its
docstring names after `->`, the legend's letters (`labnn`) given small distinct sizes."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from labnn.compiled import ring_steps, rings
from labnn.feedback import layer as fb_layer
from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
from labnn.nn import attention
from labnn.transformer import TransformerConfig, TransformerLM
from labnn.xl import cache as xl_cache, memory, relative_attention as rel
from labnn.xl.model import TransformerXL, XLConfig

B, H, D_h, M, T, L, V = 2, 3, 4, 5, 6, 2, 13
D, S = H * D_h, M + T
N_NEW = 3  # tokens a generation appends, `n`
LETTERS = {"B": B, "H": H, "D_h": D_h, "D": D, "M": M, "T": T, "S": S, "L": L, "V": V,
           "R": S, "C": M + T, "F": 4 * D, "T0": T, "n": N_NEW, "mem_len": M, "min": min,
           "W": M}


def returned_shapes(fn) -> list[list[int]]:
    """The shapes a docstring's `Shape:` section names after its `->`, in order; a pair
    named before one, "`(k, v)` each `[...]`", counts it twice; a leading `...` is none;
    one of a list, "`L x [...]`", is its first."""
    doc = inspect.getdoc(fn)
    section = doc.split("Shape:", 1)[1].split("\n\n", 1)[0]
    after = section.split("->", 1)[1]
    shapes, start = [], 0
    for match in re.finditer(r"\[([^\[\]]*)\]", after):
        before, start = after[start:match.start()], match.end()
        dims = re.split(r",\s*(?![^()]*\))", match.group(1))  # not inside min(...)
        dims = [d for d in dims if d.strip() != "..."]
        shape = [eval(dim, {}, dict(LETTERS)) for dim in dims]
        shapes += [shape] * (2 if "(k, v)" in before and "each" in before else 1)
    return shapes


def flat(out) -> list[list[int]]:
    """The shapes of the tensors in `out`, depth first (a KV pair gives two)."""
    if isinstance(out, torch.Tensor):
        return [list(out.shape)]
    if isinstance(out, (tuple, list)):
        return [s for o in out for s in flat(o)]
    return []


def mha():
    return attention.MultiHeadAttention(D, H).eval()


def memory_kv():
    return torch.randn(B, H, M, D_h), torch.randn(B, H, M, D_h)


def relative():
    return rel.RelativeMultiHeadAttention(D, H).eval()


def lm():
    return TransformerLM(TransformerConfig(V, seq_len=32, d_model=D, n_heads=H,
                                           n_layers=L)).eval()


def xl():
    return TransformerXL(XLConfig(V, d_model=D, n_heads=H, n_layers=L, mem_len=M)).eval()


def tokens():
    return torch.randint(V, (B, T))


def layer_kvs():
    return [memory_kv() for _ in range(L)]


def feedback(kv: bool = False):
    size = dict(d_model=D, n_heads=H, n_layers=L, attn_len=M)
    if kv:
        return FeedbackTransformerKV(FeedbackKVConfig(V, **size)).eval()
    return FeedbackTransformer(FeedbackConfig(V, **size)).eval()


def xl_step_cache():
    return xl().step(torch.randint(V, (B, M)))[1]


def xl_one_token():
    model = xl()
    cache = model.step(torch.randint(V, (B, M)))[1]
    return xl_cache.attend_one_token(model.blocks[0].attn, torch.randn(B, D), cache.kv[0],
                                     cache.rel_keys[0])[:1]


def ring_step(kind: str):
    """One token through the compiled step of `kind` (run eagerly), after a prompt of
    `T` tokens; the logits."""
    prompt, token = tokens(), torch.randint(V, (B, 1))
    if kind == "xl":
        model = xl()
        ring = rings.xl_ring(model.step(prompt)[1], T)
        return ring_steps.xl_ring_step(model, model.embed(token)[:, 0], ring)
    if kind == "transformer":
        model = lm()
        ring = rings.transformer_ring(model(prompt, use_cache=True)[1], T, T + 1)
        return ring_steps.transformer_ring_step(model, model.embed(token, ring.count)[:, 0],
                                                ring)
    model = feedback(kv=True)
    ring = rings.feedback_ring(model(prompt)[1], M)
    return ring_steps.feedback_ring_step(model, model.embed(token[:, 0]), ring)


CASES = {
    "xl_ring_step": (ring_steps.xl_ring_step, lambda: ring_step("xl")),
    "transformer_ring_step": (ring_steps.transformer_ring_step,
                              lambda: ring_step("transformer")),
    "feedback_ring_step": (ring_steps.feedback_ring_step, lambda: ring_step("feedback")),
    "masked_softmax": (attention.masked_softmax,
                       lambda: attention.masked_softmax(torch.randn(B, H, T, S),
                                                        attention.causal_mask(T, S))),
    "scaled_dot_product_attention": (
        attention.scaled_dot_product_attention,
        lambda: attention.scaled_dot_product_attention(
            torch.randn(B, H, T, D_h), torch.randn(B, H, S, D_h), torch.randn(B, H, S, D_h))),
    "MultiHeadAttention.split_heads": (attention.MultiHeadAttention.split_heads,
                                       lambda: mha().split_heads(torch.randn(B, T, D))),
    "MultiHeadAttention.project": (attention.MultiHeadAttention.project,
                                   lambda: mha().project(torch.randn(B, T, D), memory_kv())),
    "MultiHeadAttention.project_kv": (attention.MultiHeadAttention.project_kv,
                                      lambda: mha().project_kv(torch.randn(B, M, D))),
    "MultiHeadAttention.forward": (
        attention.MultiHeadAttention.forward,
        lambda: mha()(torch.randn(B, T, D), attention.causal_mask(T, S), cache=memory_kv(),
                      need_weights=True)[:2]),
    "TransformerLM.forward": (
        TransformerLM.forward,
        lambda: (lambda out: (out[0], out[1][0][0]))(lm()(tokens(), layer_kvs(),
                                                          use_cache=True))),
    "TransformerLM.attention_maps": (TransformerLM.attention_maps,
                                     lambda: lm().attention_maps(tokens())[0]),
    "TransformerLM.generate": (TransformerLM.generate,
                               lambda: lm().generate(tokens(), N_NEW)),
    "TransformerXL.forward": (
        TransformerXL.forward,
        lambda: (lambda out: (out[0], out[1][0]))(
            xl()(tokens(), [torch.randn(B, M, D) for _ in range(L)]))),
    "TransformerXL.attention_maps": (
        TransformerXL.attention_maps,
        lambda: xl().attention_maps(tokens(), [torch.randn(B, M, D) for _ in range(L)])[0]),
    "TransformerXL.step": (
        TransformerXL.step,
        lambda: (lambda model: (lambda out: (out[0], out[1].kv[0].keys))(
            model.step(tokens(), model.step(tokens())[1])))(xl())),
    "TransformerXL.generate": (TransformerXL.generate, lambda: xl().generate(tokens(), N_NEW)),
    "update_memory": (memory.update_memory,
                      lambda: memory.update_memory(torch.randn(B, M, D), torch.randn(B, T, D), M)),
    "attend_one_token": (xl_cache.attend_one_token, xl_one_token),
    "read_tokens": (xl_cache.read_tokens,
                    lambda: xl_cache.read_tokens(xl().blocks, torch.randn(B, T, D),
                                                 xl_step_cache())[:1]),
    "read_one_token": (xl_cache.read_one_token,
                       lambda: xl_cache.read_one_token(xl().blocks, torch.randn(B, D),
                                                       xl_step_cache())[:1]),
    "FeedbackTransformer.forward": (FeedbackTransformer.forward,
                                    lambda: feedback()(tokens())[0]),
    "FeedbackTransformerKV.forward": (FeedbackTransformerKV.forward,
                                      lambda: feedback(kv=True)(tokens())[0]),
    "FeedbackBase.step": (type(feedback()).step, lambda: feedback().step(tokens()[:, 0])[0]),
    "FeedbackBase.generate": (type(feedback()).generate,
                              lambda: feedback(kv=True).generate(tokens(), N_NEW)),
    "TransformerLM.embed": (TransformerLM.embed, lambda: lm().embed(tokens(), M)),
    "TransformerLM.attention_mask": (TransformerLM.attention_mask,
                                     lambda: lm().attention_mask(T, M, "cpu")),
    "relative_shift": (rel.relative_shift, lambda: rel.relative_shift(torch.randn(T, S))),
    "heads_first": (rel.heads_first, lambda: rel.heads_first(torch.randn(S, H, D_h))),
    "relative_scores": (
        rel.relative_scores,
        lambda: rel.relative_scores(torch.randn(B, H, T, D_h), torch.randn(B, H, D_h, S),
                                    torch.randn(H, D_h, S), torch.randn(H, D_h),
                                    torch.randn(H, D_h))),
    "RelativeMultiHeadAttention.scores": (
        rel.RelativeMultiHeadAttention.scores,
        lambda: relative().scores(torch.randn(B, H, T, D_h), torch.randn(B, H, S, D_h),
                                  relative().relative_keys(S))),
    "RelativeMultiHeadAttention.forward": (
        rel.RelativeMultiHeadAttention.forward,
        lambda: relative()(torch.randn(B, T, D),
                           attention.causal_mask(T, S), cache=memory_kv(),
                           need_weights=True)[:2]),
    "XLBlock.memory_cache": (
        type(xl().blocks[0]).memory_cache,
        lambda: xl().blocks[0].memory_cache(torch.randn(B, M, D))),
    "LayerMix.forward": (fb_layer.LayerMix.forward,
                         lambda: fb_layer.LayerMix(L + 1)(torch.randn(L + 1, B, D))),
    "RelativeBias.forward": (fb_layer.RelativeBias.forward,
                             lambda: fb_layer.RelativeBias(H, 8)(S)),
    "feedback_weights": (fb_layer.feedback_weights,
                         lambda: fb_layer.feedback_weights(torch.randn(B, H, D_h),
                                                           torch.randn(B, H, S, D_h),
                                                           torch.randn(H, S))),
    "feedback_attention": (fb_layer.feedback_attention,
                           lambda: fb_layer.feedback_attention(
                               torch.randn(B, H, D_h), torch.randn(B, H, S, D_h),
                               torch.randn(B, H, S, D_h), torch.randn(H, S))),
    "FeedbackLayer.forward": (
        fb_layer.FeedbackLayer.forward,
        lambda: fb_layer.FeedbackLayer(D, H, 4 * D, 8)(torch.randn(B, D),
                                                       torch.randn(B, H, S, D_h),
                                                       torch.randn(B, H, S, D_h))),
    "FeedbackTransformer.project_memory": (
        FeedbackTransformer.project_memory,
        lambda: FeedbackTransformer(FeedbackConfig(V, d_model=D, n_heads=H, n_layers=L))
        .project_memory(torch.randn(B, M, D))[0][:1]),
    "FeedbackTransformerKV._block": (
        FeedbackTransformerKV._block,
        lambda: FeedbackTransformerKV(FeedbackKVConfig(V, d_model=D, n_heads=H, n_layers=L))
        ._block(torch.randn(B, T, D), torch.randn(B, T, D), torch.randn(2, B, H, M, D_h))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_shape_section_names_what_the_code_returns(name):
    fn, run = CASES[name]
    torch.manual_seed(0)
    with torch.inference_mode():  # a KVBuffer is written in place
        got = flat(run())
    assert got == returned_shapes(fn), f"{name}: returns {got}, its Shape section says so?"
