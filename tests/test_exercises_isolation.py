"""Issue 29, "checkers can be poisoned": each check runs in a state the learner's code
cannot carry over, names the global change an answer makes, and leaves the session's
own state as it found it."""

import math

import pytest
import torch

from labnn.exercises.self_attention import masked_attention as ex
from labnn.exercises.feedback_transformer import memory_vector as ex_fb
from labnn.exercises.self_attention import multi_head as ex_heads
from labnn.exercises.kv_sharing_stack import kv_sharing as ex_kv
from labnn.exercises.feedback_transformer import token_loop as ex_loop
from labnn.exercises.grading import ExerciseNotDone

from checker_helpers import fails_with, passes


@pytest.fixture(autouse=True)
def torch_state():
    """Put back whatever a test (or a checker that fails to) leaves changed, so that one
    test cannot poison the next one in this worker."""
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    deterministic = torch.are_deterministic_algorithms_enabled()
    precision = torch.get_float32_matmul_precision()
    patched = {name: vars(torch.Tensor).get(name) for name in ("softmax", "__matmul__")}
    softmax = torch.softmax
    yield
    torch.set_grad_enabled(grad)
    torch.set_default_dtype(dtype)
    torch.set_default_device(None)
    torch.use_deterministic_algorithms(deterministic)
    torch.set_float32_matmul_precision(precision)
    torch.softmax = softmax
    for name, value in patched.items():
        if value is None and name in vars(torch.Tensor):
            delattr(torch.Tensor, name)
        elif value is not None:
            setattr(torch.Tensor, name, value)


def weights(q, k):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)


def memory_vector(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(dim=0), xs)


def mha_fn(x, mha, mask=None):
    b, t, d = x.shape
    q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
               for z in mha.qkv(x).chunk(3, dim=-1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = scores.softmax(-1)
    if mask is not None:  # a query that may attend nothing gets zeros
        w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return mha.out_proj((w @ v).transpose(1, 2).reshape(b, t, d))


def shared_kv(m, norm, kv, n_heads):
    k, v = kv(norm(m)).view(m.size(0), 2, n_heads, -1).unbind(1)
    return k, v


def token_loop(model, tokens):
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        tops.append(outs[-1])
        k, v = model.project_memory(model.mix(torch.stack(outs))[:, None])
        keys = [torch.cat(pair, 2) for pair in zip(keys, k)]
        values = [torch.cat(pair, 2) for pair in zip(values, v)]
    return model.head(torch.stack(tops, 1))


# ---------- gradient mode ----------

def test_switching_gradients_off_is_named_and_does_not_reach_the_next_check(capsys):
    def grad_off(q, k):
        torch.set_grad_enabled(False)
        return weights(q, k)

    fails_with(ex.check_attention_weights, grad_off,
               match=r"calling attention_weights\(q, k\) .*your function switched "
                     r"gradients off for all later code \(`torch.set_grad_enabled\(False\)`")
    assert torch.is_grad_enabled()
    passes(ex_fb.check_memory_vector, memory_vector, capsys=capsys)


def test_switching_gradients_off_is_named_rather_than_a_detached_result():
    def grad_off(xs, w):
        torch.set_grad_enabled(False)
        return memory_vector(xs, w)

    fails_with(ex_fb.check_memory_vector, grad_off, match="switched gradients off")


def test_no_grad_entered_without_with_is_named():
    def entered(xs, w):
        torch.no_grad().__enter__()
        return memory_vector(xs, w)

    fails_with(ex_fb.check_memory_vector, entered, match="switched gradients off")
    assert torch.is_grad_enabled()


def test_a_session_with_gradients_off_is_checked_with_gradients_and_kept_so(capsys):
    torch.set_grad_enabled(False)
    passes(ex_fb.check_memory_vector, memory_vector, capsys=capsys)
    assert not torch.is_grad_enabled()


def test_inference_mode_left_on_is_named_and_undone(capsys):
    held = []

    def inference_on(q, k):
        held.append(torch.inference_mode())
        held[-1].__enter__()
        return weights(q, k)

    fails_with(ex.check_attention_weights, inference_on, match="inference mode")
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    passes(ex_fb.check_memory_vector, memory_vector, capsys=capsys)
    held.clear()


def test_an_answer_computed_in_inference_mode_is_told_so():
    fails_with(ex_fb.check_memory_vector, torch.inference_mode()(memory_vector),
               match=r"detached from its inputs .*inference mode")


# ---------- default dtype and device, deterministic algorithms ----------

def test_changing_the_default_dtype_is_named_and_undone(capsys):
    def float64_default(q, k):
        torch.set_default_dtype(torch.float64)
        return weights(q, k)

    fails_with(ex.check_attention_weights, float64_default,
               match=r"changed the default dtype to torch.float64 "
                     r"\(`torch.set_default_dtype`\)")
    assert torch.get_default_dtype() == torch.float32
    passes(ex_fb.check_feedback_attention, _feedback_attention, capsys=capsys)


def test_a_session_with_another_default_dtype_is_checked_in_float32(capsys):
    seen = []

    def recorded(q, k):
        seen.append(q.dtype)
        return weights(q, k)

    torch.set_default_dtype(torch.float64)
    passes(ex.check_attention_weights, recorded, capsys=capsys)
    # every call in float32 but the last, which asks: is float64 kept?
    assert seen == [torch.float32] * (len(seen) - 1) + [torch.float64]
    passes(ex_fb.check_feedback_attention, _feedback_attention, capsys=capsys)
    assert torch.get_default_dtype() == torch.float64


def test_changing_the_default_device_is_named_and_undone(capsys):
    def meta_default(q, k):
        torch.set_default_device("meta")
        return weights(q, k)

    fails_with(ex.check_attention_weights, meta_default,
               match=r"changed the default device to meta \(`torch.set_default_device`")
    assert torch.get_default_device() == torch.device("cpu")
    # undone as a new session has it, not with the None on which torch 2.9's own
    # get_default_device fails
    context = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)
    assert getattr(context, "device_context", "unset") == "unset"
    passes(ex_fb.check_feedback_attention, _feedback_attention, capsys=capsys)


def test_a_device_context_left_entered_is_named_and_undone(capsys):
    def entered(q, k):
        torch.device("meta").__enter__()
        return weights(q, k)

    fails_with(ex.check_attention_weights, entered, match="changed the default device to meta")
    assert torch.get_default_device() == torch.device("cpu")
    passes(ex.check_attention_weights, weights, capsys=capsys)


def test_a_session_with_a_meta_default_device_is_checked_on_the_cpu(capsys):
    torch.set_default_device("meta")
    passes(ex_fb.check_feedback_attention, _feedback_attention, capsys=capsys)
    assert torch.get_default_device() == torch.device("meta")


def test_the_default_device_is_read_where_torchs_getter_fails(monkeypatch):
    # torch 2.9's get_default_device raises AttributeError once set_default_device(None)
    # has run (which the checks do to undo a learner's default device): every later
    # check crashed there (seen in `make test-torch TORCH=torch==2.9.1`)
    from labnn.exercises.grading import isolation

    def fails_after_a_reset():
        raise AttributeError("'NoneType' object has no attribute 'device'")

    monkeypatch.setattr(torch, "get_default_device", fails_after_a_reset)
    assert isolation._default_device() == torch.device("cpu")
    with torch.device("meta"):
        assert isolation._default_device() == torch.device("meta")


def test_turning_deterministic_algorithms_on_is_named_and_undone():
    def deterministic(q, k):
        torch.use_deterministic_algorithms(True)
        return weights(q, k)

    fails_with(ex.check_attention_weights, deterministic,
               match=r"torch.use_deterministic_algorithms\(True\)")
    assert not torch.are_deterministic_algorithms_enabled()


def test_lowering_the_matmul_precision_is_named_and_undone():
    def medium(q, k):
        torch.set_float32_matmul_precision("medium")
        return weights(q, k)

    fails_with(ex.check_attention_weights, medium,
               match=r"changed the float32 matmul precision to 'medium'")
    assert torch.get_float32_matmul_precision() == "highest"


# ---------- the random stream ----------

def test_an_answer_that_reseeds_passes_and_the_sessions_random_stream_is_kept(capsys):
    def reseeds(q, k):
        torch.manual_seed(123)
        return weights(q, k)

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    passes(ex.check_attention_weights, reseeds, capsys=capsys)
    assert torch.equal(torch.rand(3), expected)


def test_checks_that_build_their_inputs_from_the_global_stream_leave_it_alone(capsys):
    from labnn.exercises.three_memories.memory_limits import check_cache_bytes

    def cache_bytes(cache):
        if hasattr(cache, "kv") and isinstance(cache.kv, torch.Tensor):
            return cache.kv.nbytes
        pairs = [tuple(b) for b in cache.kv] if hasattr(cache, "kv") else cache
        return sum(k.nbytes + v.nbytes for k, v in pairs)

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    passes(check_cache_bytes, cache_bytes, capsys=capsys)
    assert torch.equal(torch.rand(3), expected)


# ---------- torch's own functions replaced ----------

def test_replacing_a_torch_method_is_named_and_undone(capsys):
    softmax = torch.Tensor.softmax

    def patched(q, k):
        torch.Tensor.softmax = lambda self, dim: (self - self).exp() / self.size(dim)
        return weights(q, k)

    fails_with(ex.check_attention_weights, patched,
               match=r"replaced `torch.Tensor.softmax` with its own")
    assert torch.Tensor.softmax is softmax
    passes(ex.check_attention_weights, weights, capsys=capsys)


def test_replacing_a_torch_function_is_named_and_undone():
    softmax = torch.softmax

    def patched(q, k):
        torch.softmax = lambda x, dim: x
        return weights(q, k)

    fails_with(ex.check_attention_weights, patched, match=r"replaced `torch.softmax`")
    assert torch.softmax is softmax


def test_a_session_that_replaced_a_torch_method_is_checked_with_torchs_own(capsys):
    def uniform(self, dim):
        return (self - self).exp() / self.size(dim)

    torch.Tensor.softmax = uniform
    passes(ex.check_attention_weights,
           lambda q, k: torch.nn.functional.softmax(
               q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1),
           capsys=capsys)
    fails_with(ex.check_attention_weights, lambda q, k: (q @ k.transpose(-2, -1)).softmax(-1),
               match=r"forgot to divide the scores by sqrt\(d\)")
    assert vars(torch.Tensor)["softmax"] is uniform


# ---------- the reference's own parameters ----------

def test_zeroing_the_modules_weights_is_named_not_misdiagnosed(capsys):
    def zeroes(x, mha, mask=None):
        with torch.no_grad():
            for p in mha.parameters():
                p.zero_()
        return mha_fn(x, mha, mask)

    fails_with(ex_heads.check_multi_head_attention, zeroes,
               match=r"calling multi_head_attention\(x, mha, mask\), your function "
                     r"changed `mha` in place: its parameter `qkv.weight`")
    passes(ex_heads.check_multi_head_attention, mha_fn, capsys=capsys)


def test_replacing_a_submodule_is_named():
    def replaces(x, mha, mask=None):
        mha.out_proj = torch.nn.Identity()
        return mha_fn(x, mha, mask)

    fails_with(ex_heads.check_multi_head_attention, replaces,
               match=r"changed `mha` in place: `mha.out_proj` is now another object")


def test_switching_the_module_to_training_mode_is_named():
    def trains(x, mha, mask=None):
        mha.train()
        return mha_fn(x, mha, mask)

    fails_with(ex_heads.check_multi_head_attention, trains,
               match=r"changed `mha` in place: `mha.training` was False, now True")


def test_changing_the_norm_of_shared_kv_is_named():
    def scales(m, norm, kv, n_heads):
        with torch.no_grad():
            norm.weight.mul_(2)
        return shared_kv(m, norm, kv, n_heads)

    fails_with(ex_kv.check_shared_kv, scales,
               match=r"changed `norm` in place: its parameter `weight`")


def test_changing_the_models_weights_in_the_token_loop_is_named(capsys):
    def perturbs(model, tokens):
        with torch.no_grad():
            model.embed.weight.add_(1.0)
        return token_loop(model, tokens)

    fails_with(ex_loop.check_token_loop, perturbs,
               match=r"changed `model` in place: its parameter `embed.weight`")
    passes(ex_loop.check_token_loop, token_loop, capsys=capsys)


def test_freezing_the_models_parameters_is_named():
    def freezes(model, tokens):
        for p in model.parameters():
            p.requires_grad_(False)
        return token_loop(model, tokens)

    fails_with(ex_loop.check_token_loop, freezes,
               match=r"changed `model` in place: .*`embed.weight`.*requires_grad")


# ---------- what still goes through ----------

def test_a_stub_is_still_not_done_and_an_interrupt_still_interrupts():
    def stub(q, k):
        raise NotImplementedError()

    with pytest.raises(ExerciseNotDone):
        ex.check_attention_weights(stub)

    def interrupted(q, k):
        torch.set_grad_enabled(False)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ex.check_attention_weights(interrupted)
    assert torch.is_grad_enabled()


def _feedback_attention(q, k, v, bias):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


def test_a_module_converted_in_place_is_named_by_its_dtype():
    # float64 weights made from float32 numbers: .float() keeps every value, not the dtype
    from torch import nn

    from labnn.exercises.grading.module_state import module_change, module_state

    layer = nn.Linear(3, 4).double()
    with torch.no_grad():
        layer.weight.copy_(layer.weight.float().double())
    before = module_state(layer)
    layer.float()
    said = module_change("kv", layer, before)
    assert said and "is now torch.float32, was torch.float64" in said and ".float()" in said
