"""Each checker of notebook 03 passes a correct solution and names each typical
mistake."""

import math
from pathlib import Path

import nbformat
import pytest
import torch

from labnn.exercises.feedback_transformer import memory_vector as ex
from labnn.exercises.feedback_transformer import token_loop as loop_ex
from labnn.exercises.grading import ExerciseFailed, ExerciseNotDone

from checker_helpers import fails_with, passes


# ---------- memory vector ----------


def memory_vector(xs, w):
    return torch.einsum("l,lbd->bd", w.softmax(dim=0), xs)


def memory_vector_in_place(xs, w):
    xs *= w.softmax(0)[:, None, None]  # scales the caller's tensor
    return xs.sum(0)


def test_memory_vector_correct(capsys):
    passes(ex.check_memory_vector, memory_vector, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda xs, w: torch.einsum("l,lbd->bd", w, xs),
            "raw logits w as weights: take softmax",
        ),
        (lambda xs, w: xs.mean(0), "plain average of the layers"),
        (lambda xs, w: xs[-1], "top layer only"),
        (
            lambda xs, w: torch.einsum("l,lbd->bd", w[1:].softmax(0), xs[1:]),
            r"embedding xs\[0\] is left out",
        ),
        (
            lambda xs, w: torch.einsum("l,lbd->bd", w.softmax(0).flip(0), xs),
            "in reverse order",
        ),
        (lambda xs, w: torch.einsum("l,lbd->bd", w.log_softmax(0), xs), "log_softmax"),
        (lambda xs, w: memory_vector(xs, w).softmax(-1), "no softmax over D"),
        (
            lambda xs, w: torch.einsum("l,lbd->bd", w, xs).softmax(-1),
            r"softmax runs over D, on the mix of the raw logits w: it belongs to the layer",
        ),
        (
            lambda xs, w: w.softmax(0)[:, None, None] * xs,
            "one entry per layer, \\[L\\+1, B, D\\]",
        ),
        (
            lambda xs, w: (w.softmax(0)[:, None, None] * xs).sum(1),
            r"has shape \[4, 12\], "
            r"expected \[2, 12\]",
        ),
        (memory_vector_in_place, "modified its input `xs` in place"),
        (lambda xs, w: memory_vector(xs, w) + 0.01, r"differs .* at \[b=\d, d=\d+\]"),
    ],
)
def test_memory_vector_mistakes(fn, match):
    fails_with(ex.check_memory_vector, fn, "memory vector \\(layer mix\\): .*" + match)


def test_memory_vector_stub_is_not_done():
    def stub(xs, w):
        raise NotImplementedError()

    with pytest.raises(ExerciseNotDone, match="not solved yet"):
        ex.check_memory_vector(stub)


# ---------- relative bias ----------


def relative_bias(table, s):
    distance = torch.arange(s, 0, -1).clamp(max=table.size(1))
    return table[:, distance - 1]


def test_relative_bias_correct(capsys):
    passes(ex.check_relative_bias, relative_bias, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda t, s: t[:, torch.arange(1, s + 1).clamp(max=t.size(1)) - 1],
            "oldest first",
        ),
        (
            lambda t, s: t[:, torch.arange(s, 0, -1).clamp(max=t.size(1) - 1)],
            "off by one",
        ),
        (
            lambda t, s: t[:, torch.arange(s, 0, -1).clamp(max=t.size(1) - 1) - 1],
            "clamped one too early",
        ),
        (
            lambda t, s: t[:, torch.arange(s, 0, -1) - 1],
            r"relative_bias\(table, 7\): .* "
            r"clamp them",
        ),
        (
            lambda t, s: t[:, torch.arange(s, 0, -1.0).clamp(max=t.size(1)) - 1],
            "must be a LongTensor",
        ),
        (lambda t, s: relative_bias(t, s).t(), r"\[S, H\]: heads come first"),
        (
            lambda t, s: t[:, torch.arange(s).clamp(max=t.size(1)) - 1],
            r"s - j = s, \.\.\., 1",
        ),
        (lambda t, s: relative_bias(t, s) * 2, r"differs .* at \[h=\d, j=\d\]"),
    ],
)
def test_relative_bias_mistakes(fn, match):
    fails_with(ex.check_relative_bias, fn, "relative position bias: .*" + match)


def test_relative_bias_in_place_is_named():
    def in_place(table, s):
        table.mul_(1.0).add_(0.0)[0, 0] = 5.0  # writes into the caller's table
        return relative_bias(table, s)

    fails_with(ex.check_relative_bias, in_place, "modified its input `table` in place")


# ---------- feedback attention ----------


def attention(q, k, v, bias, scale=True, dim=-1, guard=True):
    if guard and k.size(2) == 0:
        return torch.zeros_like(q)
    scores = (
        torch.einsum("bhd,bhsd->bhs", q, k) / (math.sqrt(q.size(-1)) if scale else 1.0)
        + bias
    )
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(dim=dim), v)


def attention_in_place(q, k, v, bias):
    q /= math.sqrt(q.size(-1))  # the caller's q is scaled too
    if k.size(2) == 0:
        return torch.zeros_like(q)
    return torch.einsum(
        "bhs,bhsd->bhd", (torch.einsum("bhd,bhsd->bhs", q, k) + bias).softmax(-1), v
    )


def test_feedback_attention_correct(capsys):
    passes(ex.check_feedback_attention, attention, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda q, k, v, b: attention(q, k, v, b, scale=False),
            r"forgot to divide q·k by "
            r"sqrt\(d_head\)",
        ),
        (
            lambda q, k, v, b: attention(q / math.sqrt(q.size(-1)), k, v, b),
            r"divided q·k "
            r"by d_head",
        ),
        (lambda q, k, v, b: attention(q, k, v, 0 * b), "relative bias is missing"),
        (lambda q, k, v, b: attention(q, k, v, -b), "bias is subtracted"),
        (
            lambda q, k, v, b: attention(q, k, v, b.exp()),
            r"you added bias.exp\(\) to the scores: add the bias as it is",
        ),
        (
            lambda q, k, v, b: attention(q, k, v, b, dim=1),
            r"softmax runs over the heads "
            r"\(dim 1\)",
        ),
        (lambda q, k, v, b: attention(q, k, k, b), "you weighted the keys"),
        (
            lambda q, k, v, b: (
                torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.size(-1)) + b
            ).softmax(-1),
            r"returns \[B, H, S\]: those are the attention weights",
        ),
        (
            lambda q, k, v, b: q if k.size(2) == 0 else attention(q, k, v, b),
            "the output is zeros, not q",
        ),
        (
            lambda q, k, v, b: (
                attention(q, k, v, b) if k.size(2) else torch.full_like(q, math.nan)
            ),
            "contains NaN",
        ),
        (attention_in_place, "modified its input `q` in place"),
        (
            lambda q, k, v, b: attention(q, k, v, b) + 1e-2,
            r"differs .* at \[b=\d, h=\d, "
            r"d=\d\]",
        ),
    ],
)
def test_feedback_attention_mistakes(fn, match):
    fails_with(ex.check_feedback_attention, fn, "feedback attention: .*" + match)


# ---------- the token loop ----------


def learner_loop(
    model, tokens, *, detach=False, chain=True, logits_from="top", mix_input="all"
):
    """A learner's token loop with one mistake switched on (written independently of the
    checker)."""
    x = model.embed(tokens)
    keys, values = model.project_memory(x[:, :0])
    tops = []
    for t in range(tokens.size(1)):
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1] if chain else x[:, t], keys[i], values[i]))
        stacked = {
            "all": outs,
            "top_twice": outs[1:] + [outs[-1]],
            "layers": outs[1:],
            "embedding_last": outs[1:] + outs[:1],
        }[mix_input]
        m = model.mix(torch.stack(stacked))
        if detach:
            m = m.detach()
        tops.append(outs[-1] if logits_from == "top" else m)
        new_keys, new_values = model.project_memory(m[:, None])
        keys = [torch.cat(pair, dim=2) for pair in zip(keys, new_keys)]
        values = [torch.cat(pair, dim=2) for pair in zip(values, new_values)]
    return model.head(torch.stack(tops, dim=1))


def token_loop(model, tokens):
    """The correct loop: `learner_loop` with no mistake switched on."""
    return learner_loop(model, tokens)


def calls_forward(model, tokens):
    return model(tokens)[0]


def calls_step(model, tokens):
    state, out = None, []
    for t in range(tokens.size(1)):
        logits, state = model.step(tokens[:, t], state)
        out.append(logits)
    return torch.stack(out, 1)


def test_token_loop_correct(capsys):
    passes(loop_ex.check_token_loop, token_loop, capsys)


@pytest.mark.parametrize(
    "mistake, match",
    [
        (dict(memory="top"), "reaches model.project_memory is the top layer's output"),
        (dict(memory="embedding"), "memory vector is the token's embedding"),
        (dict(grow="none"), "the memory never grows"),
        (dict(grow="replace"), "sees only the previous step's memory"),
        (dict(grow="prepend"), "put in front: keys are kept oldest first"),
    ],
)
def test_token_loop_mistakes(mistake, match):
    fails_with(
        loop_ex.check_token_loop,
        lambda m, x: loop_ex._loop(m, x, **mistake),
        "the feedback token loop: .*" + match,
    )


@pytest.mark.parametrize(
    "fn, match",
    [
        (calls_forward, r"calls model\.forward\(\.\.\.\), the reference itself"),
        (calls_step, r"calls model\.step\(\.\.\.\), the reference itself"),
        (
            lambda m, x: token_loop(m, x).transpose(0, 1),
            r"\[T, B, V\] = \[7, 2, 9\]: "
            r"stack the steps along dim 1",
        ),
        (
            lambda m, x: m.head.norm(token_loop(m, x)[..., :1].expand(-1, -1, 12)),
            r"\[B, T, D\].*model\.head",
        ),
        (
            lambda m, x: token_loop(m, x).roll(1, dims=1),
            r"come one step late: position t holds the logits of step t - 1 "
            r"\(position 0 the last step's: a \.roll\(1, dims=1\)\?\)",
        ),
        (
            lambda m, x: torch.cat(
                [token_loop(m, x)[:, :3], token_loop(m, x)[:, 3:] * 1.1], 1
            ),
            r"from step t = 3 on .*at \[b=\d, t=\d, v=\d\]",
        ),
    ],
)
def test_token_loop_other_mistakes(fn, match):
    fails_with(loop_ex.check_token_loop, fn, "the feedback token loop: .*" + match)


# ---------- cache sizes ----------


def cache_bytes(n_layers, d_model, n_tokens, size):
    return 2 * n_layers * d_model * n_tokens * size, 2 * d_model * n_tokens * size


def test_cache_bytes_correct(capsys):
    passes(loop_ex.check_cache_bytes, cache_bytes, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda L, D, T, s: (L * D * T * s, 2 * D * T * s),
            "keys AND values for every layer",
        ),
        (
            lambda L, D, T, s: (2 * D * T * s, 2 * D * T * s),
            "PER LAYER: multiply by n_layers",
        ),
        (
            lambda L, D, T, s: (2 * L * D * T * s, 2 * L * D * T * s),
            "ONCE for all layers",
        ),
        (
            lambda L, D, T, s: (2 * L * D * T * s, 3 * D * T * s),
            "not the memory vectors",
        ),
        (lambda L, D, T, s: cache_bytes(L, D, T, s)[::-1], "swapped"),
        (lambda L, D, T, s: (2 * L * D * T, 2 * D * T), "counts numbers, not bytes"),
        (
            lambda L, D, T, s: (2 * L * D * s, 2 * D * s),
            "ONE token's entry: multiply by n_tokens",
        ),
        (lambda L, D, T, s: (16 * L * D * T * s, 16 * D * T * s), "in bits"),
        (
            lambda L, D, T, s: (2 * L * D * T * s // 8, 2 * D * T * s),
            r"transformer_bytes is 8 times too small: bytes_per_number already counts",
        ),
        (
            lambda L, D, T, s: tuple(float(b) for b in cache_bytes(L, D, T, s)),
            "returned floats",
        ),
        (
            lambda L, D, T, s: tuple(torch.tensor(b) for b in cache_bytes(L, D, T, s)),
            "should be an int, got Tensor",
        ),
    ],
)
def test_cache_bytes_mistakes(fn, match):
    fails_with(loop_ex.check_cache_bytes, fn, "cache sizes: .*" + match)


def test_cache_bytes_takes_the_two_sizes_as_a_list_too(capsys):
    # the right numbers in a list are a right answer: the exercise asks for two ints
    passes(loop_ex.check_cache_bytes, lambda L, D, T, s: [*cache_bytes(L, D, T, s)], capsys)


# ---------- issue 13 follow-up (learner trial): gradients, dtypes, specific diagnoses
# ----------


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda xs, w: memory_vector(xs, w).detach(), "detached from its inputs"),
        (
            lambda xs, w: memory_vector(xs, w.detach()),
            "`w` gets no gradient.*detached",
        ),
        (
            lambda xs, w: memory_vector(xs.detach(), w),
            "`xs` gets no gradient.*detached",
        ),
        (
            lambda xs, w: memory_vector(xs.double(), w.double()),
            "dtype torch.float64, expected torch.float32",
        ),
        (lambda xs, w: (w.softmax(0)[:, None, None] * xs).mean(0), r"mean.*1/\(L\+1\)"),
    ],
)
def test_memory_vector_gradient_dtype_and_mean(fn, match):
    fails_with(ex.check_memory_vector, fn, "memory vector \\(layer mix\\): .*" + match)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda t, s: relative_bias(t.detach(), s),
            "`table` gets no gradient.*detach",
        ),
        (
            lambda t, s: relative_bias(t.double(), s),
            "dtype torch.float64, expected torch.float32",
        ),
        (
            lambda t, s: t[:, (torch.arange(s, 0, -1) - 1) % t.size(1)],
            r"wrap around.*clamp",
        ),
    ],
)
def test_relative_bias_gradient_dtype_and_wrap(fn, match):
    fails_with(ex.check_relative_bias, fn, "relative position bias: .*" + match)


def attention_scaled(q, k, v, bias, scale):
    if k.size(2) == 0:
        return torch.zeros_like(q)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / scale + bias
    return torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda q, k, v, b: attention(q, k, v, b.detach()),
            "`bias` gets no gradient.*detached",
        ),
        (lambda q, k, v, b: attention(q, k.detach(), v, b), "`k` gets no gradient"),
        (lambda q, k, v, b: attention(q, k, v, b).detach(), "detached from its inputs"),
        (
            lambda q, k, v, b: attention(
                q.double(), k.double(), v.double(), b.double()
            ),
            "dtype torch.float64, expected torch.float32",
        ),
        (
            lambda q, k, v, b: attention_scaled(
                q, k, v, b, math.sqrt(q.size(-1) * q.size(1))
            ),
            r"sqrt\(H·d_head\)",
        ),
        (lambda q, k, v, b: attention(q, k, v, b.flip(-1)), r"reversed along the keys"),
    ],
)
def test_feedback_attention_gradient_dtype_and_more(fn, match):
    fails_with(ex.check_feedback_attention, fn, "feedback attention: .*" + match)


@pytest.mark.parametrize(
    "mistake, match",
    [
        (dict(detach=True), r"`model\.mix\.logits` gets no gradient.*memory vector"),
        (
            dict(chain=False),
            r"layers are not chained.*each layer was fed the embedding",
        ),
        (dict(logits_from="memory"), r"logits come from the memory vector.*TOP layer"),
        (dict(mix_input="top_twice"), r"model\.mix.*embedding"),
        (dict(mix_input="embedding_last"), r"model\.mix.*embedding first"),
        (dict(mix_input="layers"), r"model\.mix got 2 entries.*L\+1 = 3"),
    ],
)
def test_token_loop_gradient_and_first_step(mistake, match):
    fails_with(
        loop_ex.check_token_loop,
        lambda m, x: learner_loop(m, x, **mistake),
        "the feedback token loop: .*" + match,
    )


@pytest.mark.parametrize(
    "mistake",
    [dict(chain=False), dict(logits_from="memory"), dict(mix_input="top_twice")],
)
def test_token_loop_never_blames_attention_wrongly(mistake):
    with pytest.raises(ExerciseFailed) as err:
        loop_ex.check_token_loop(lambda m, x: learner_loop(m, x, **mistake))
    assert "attention must return zeros" not in str(err.value)
    assert "projected (model.project_memory)" not in str(err.value)


def test_token_loop_generic_first_step_message_lists_what_matters():
    def off_at_start(model, tokens):
        out = token_loop(model, tokens)
        return torch.cat([out[:, :1] * 1.5, out[:, 1:]], 1)

    with pytest.raises(
        ExerciseFailed,
        match=r"first step, t = "
        r"0.*empty.*chained.*model\.head",
    ) as err:
        loop_ex.check_token_loop(off_at_start)
    assert "must return zeros" not in str(err.value)


@pytest.mark.parametrize(
    "mistake, match",
    [
        (dict(own=True), "reads its own memory vector"),
        (dict(layer_keys=False), r"first layer's keys.*keys\[i\]"),
    ],
)
def test_token_loop_own_memory_and_shared_keys(mistake, match):
    fails_with(
        loop_ex.check_token_loop,
        lambda m, x: loop_ex._loop(m, x, **mistake),
        "the feedback token loop: .*" + match,
    )


def test_token_loop_statement_asks_for_what_the_messages_name():
    """The check's messages speak of appending each step's keys and values (torch.cat
    along dim 2): the statement asks for exactly that, not for a whole memory re-projected
    (issue 28, trial 7)."""
    path = Path(__file__).resolve().parents[1] / "notebooks" / "03_feedback_transformer.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    statement = next(c.source for c in cells if c.source.startswith("### The token loop"))
    for said in ("model.project_memory(m[:, None])", "append the new keys and values",
                 "torch.cat(..., dim=2)"):
        assert said in statement, said
