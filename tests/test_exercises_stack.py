"""Each checker of notebook 04 passes a correct solution and names each typical
mistake."""

import pytest
import torch
import torch.nn.functional as F

from labnn.exercises.kv_sharing_stack import stack_append as append_ex
from labnn.exercises.kv_sharing_stack import kv_sharing as kv_ex
from labnn.exercises.kv_sharing_stack import custom_backward as ex
from labnn.exercises.grading import ExerciseFailed, ExerciseNotDone

from checker_helpers import fails_with, passes


def function(forward, backward):
    """A torch.autograd.Function subclass from two plain functions (a learner's
    attempt)."""
    return type(
        "Attempt",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )


# ---------- Square ----------


def square_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def square_backward_with(local):
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return local(g, x)

    return backward


def in_place_forward(ctx, x):
    ctx.save_for_backward(x.clone())
    return x.mul_(x)  # squares the caller's x


def test_square_correct(capsys):
    passes(
        ex.check_square,
        function(square_forward, square_backward_with(lambda g, x: g * 2 * x)),
        capsys,
    )


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            function(square_forward, square_backward_with(lambda g, x: 2 * x)),
            "2x alone: multiply by grad_output",
        ),
        (
            function(square_forward, square_backward_with(lambda g, x: g)),
            "grad_output unchanged",
        ),
        (
            function(square_forward, square_backward_with(lambda g, x: g * x)),
            "missing the factor 2",
        ),
        (
            function(square_forward, square_backward_with(lambda g, x: g * x * x)),
            "by the OUTPUT x²",
        ),
        (
            function(square_forward, square_backward_with(lambda g, x: (g * 2 * x, g))),
            "exactly one gradient",
        ),
        (
            function(
                lambda ctx, x: 2 * x, square_backward_with(lambda g, x: g * 2 * x)
            ),
            "returns 2x, the derivative",
        ),
        (
            function(lambda ctx, x: x.clone(), square_backward_with(lambda g, x: g)),
            "returns x unchanged",
        ),
        (
            function(in_place_forward, square_backward_with(lambda g, x: g * 2 * x)),
            "modified its input `x` in place",
        ),
        (
            function(
                square_forward, square_backward_with(lambda g, x: g * 2 * x + 1e-3)
            ),
            r"gradient of Square.apply\(x\) differs .* at \[i=\d, j=\d\]",
        ),
        (lambda x: x * x, "pass the class itself, Square"),
    ],
)
def test_square_mistakes(fn, match):
    fails_with(
        ex.check_square, fn, r"a custom autograd Function \(square\): .*" + match
    )


@pytest.mark.filterwarnings("ignore:.*should not be instantiated")
def test_square_instance_is_not_the_class():
    fails_with(
        ex.check_square,
        function(square_forward, square_backward_with(lambda g, x: g * 2 * x))(),
        "pass the class itself",
    )


def test_square_stub_is_not_done():
    def stub(ctx, *args):
        raise NotImplementedError()

    with pytest.raises(ExerciseNotDone, match="not solved yet"):
        ex.check_square(function(stub, stub))


# ---------- value gradients ----------


def value_gradients(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        total[: g.size(0)] += g
    return total


def value_gradients_in_place(read_grads):
    total = read_grads[-1]  # an alias: the += below changes the caller's last read
    for g in read_grads[:-1]:
        total[: g.size(0)] += g
    return total


def value_gradients_right_aligned(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        total[total.size(0) - g.size(0) :] += g
    return total


def test_value_gradients_correct(capsys):
    passes(ex.check_value_gradients, value_gradients, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda r: r[-1].clone(), "last read's gradient only"),
        (
            lambda r: torch.stack([r[j][j] for j in range(len(r))]),
            "only the read at the step that pushed",
        ),
        (lambda r: torch.stack([g[0] for g in r]), "slot 0 of read j"),
        (value_gradients_right_aligned, "aligned at the end"),
        (
            lambda r: value_gradients(r) / torch.arange(len(r), 0, -1)[:, None],
            "averaged the reads",
        ),
        (lambda r: value_gradients(r) / len(r), "divided by T"),
        (value_gradients_in_place, r"modified its input `read_grads\[4\]` in place"),
        (lambda r: r[-1], r"returns a view of its input `read_grads\[4\]`"),
        (
            lambda r: value_gradients(r).sum(0),
            r"shape \[F\] = \[3\]: you summed over the "
            r"slots",
        ),
        (lambda r: value_gradients(r) + 1e-3, r"differs .* at \[j=\d, f=\d\]"),
    ],
)
def test_value_gradients_mistakes(fn, match):
    fails_with(
        ex.check_value_gradients, fn, "the gradient of a stacked value: .*" + match
    )


# ---------- Append ----------


def append_forward(ctx, top, value, buffer):
    n = top.size(1)
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


def append_backward(ctx, grad):
    return grad[:, : ctx.n], grad[:, ctx.n], None


def forward_variant(slot=0, data=True, copy=False, length=1):
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n + slot].copy_(value)
        ctx.n = n
        out = (buffer.data if data else buffer)[:, : n + length]
        return out.clone() if copy else out

    return forward


def cat_forward(ctx, top, value, buffer):
    ctx.n = top.size(1)
    return torch.cat([top, value[:, None]], 1)


def test_append_correct(capsys):
    passes(append_ex.check_append, function(append_forward, append_backward), capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            function(forward_variant(copy=True), append_backward),
            r"returns a new tensor "
            r"\(a copy\), not a view",
        ),
        (
            function(cat_forward, append_backward),
            r"returns a new tensor \(a copy\), not a "
            r"view",
        ),
        (
            function(forward_variant(data=False), append_backward),
            "return a view of `buffer.data`",
        ),
        (function(forward_variant(length=0), append_backward), r"returns \[B, n, F\]"),
        (
            function(forward_variant(slot=-1), append_backward),
            "slot n - 1, overwriting",
        ),
        (
            function(forward_variant(slot=1), append_backward),
            "slot n \\+ 1, one too far",
        ),
        (
            function(append_forward, lambda ctx, g: (None, g[:, ctx.n], None)),
            "gradients stop at the newest value",
        ),
        (
            function(append_forward, lambda ctx, g: (g[:, : ctx.n], g[:, 0], None)),
            "gradient of slot 0",
        ),
        (
            function(append_forward, lambda ctx, g: (g[:, : ctx.n], g[:, ctx.n])),
            "one gradient per input",
        ),
        (
            function(
                append_forward, lambda ctx, g: (g[:, : ctx.n], 2 * g[:, ctx.n], None)
            ),
            r"gradient for `value` \(expected grad\[:, n\]\).* times c = 2",
        ),
        (lambda top, value, buffer: None, "pass the class itself, Append"),
    ],
)
def test_append_mistakes(fn, match):
    fails_with(append_ex.check_append, fn, r"the Append function .*: .*" + match)


# ---------- shared keys and values ----------


def shared_kv(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def shared_kv_swapped_biases(m, norm, kv, n_heads):
    d = m.size(1)
    x = norm(m)
    k = F.linear(x, kv.weight[:d], kv.bias[d:])
    v = F.linear(x, kv.weight[d:], kv.bias[:d])
    return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)


def shared_kv_in_place(m, norm, kv, n_heads):
    m.sub_(m.mean(-1, keepdim=True))  # centres the caller's m
    return shared_kv(m, norm, kv, n_heads)


def test_shared_kv_correct(capsys):
    passes(kv_ex.check_shared_kv, shared_kv, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda m, n, kv, h: shared_kv(m, n, kv, h)[::-1],
            "keys and values are swapped",
        ),
        (
            lambda m, n, kv, h: shared_kv(m, lambda x: x, kv, h),
            r"normalize the memory "
            r"vector first",
        ),
        (shared_kv_swapped_biases, "the biases are swapped"),
        (
            lambda m, n, kv, h: tuple(
                t.view(m.size(0), -1, h).transpose(1, 2) for t in kv(n(m)).chunk(2, -1)
            ),
            "heads are split the wrong way",
        ),
        (
            lambda m, n, kv, h: tuple(kv(n(m)).view(m.size(0), h, 2, -1).unbind(2)),
            "interleaved per head",
        ),
        (
            lambda m, n, kv, h: tuple(t.detach() for t in shared_kv(m, n, kv, h)),
            "detached",
        ),
        (
            lambda m, n, kv, h: tuple(kv(n(m)).chunk(2, -1)),
            r"shape \[B, D\] = \[4, 12\]: "
            r"split it into heads",
        ),
        (lambda m, n, kv, h: kv(n(m)), "return a pair"),
        (shared_kv_in_place, "modified its input `m` in place"),
        (
            lambda m, n, kv, h: (
                shared_kv(m, n, kv, h)[0] * 1.01,
                shared_kv(m, n, kv, h)[1],
            ),
            r"k differs .* at \[b=\d, h=\d, d=\d\]",
        ),
    ],
)
def test_shared_kv_mistakes(fn, match):
    fails_with(
        kv_ex.check_shared_kv,
        fn,
        "one key/value projection shared by all layers: .*" + match,
    )


# ---------- the weight gradient ----------


def weight_gradient(xs, gs):
    return gs.flatten(0, 1).t() @ xs.flatten(0, 1)


def test_weight_gradient_correct(capsys):
    passes(kv_ex.check_weight_gradient, weight_gradient, capsys)


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda xs, gs: weight_gradient(xs, gs).t(), "transposed"),
        (lambda xs, gs: gs[-1].t() @ xs[-1], "last step's gradient only"),
        (
            lambda xs, gs: weight_gradient(xs, gs) / xs.size(0),
            "averaged over the steps",
        ),
        (
            lambda xs, gs: weight_gradient(xs, gs) / (xs.size(0) * xs.size(1)),
            "averaged over steps and batch",
        ),
        (lambda xs, gs: gs[:, 0].t() @ xs[:, 0], "only batch element 0"),
        (
            lambda xs, gs: gs.flatten(0, 1).t() @ xs.transpose(0, 1).flatten(0, 1),
            "paired with different",
        ),
        (
            lambda xs, gs: (
                gs.transpose_(0, 1).flatten(0, 1).t() @ xs.transpose(0, 1).flatten(0, 1)
            ),
            "modified its input `gs` in place",
        ),
        (
            lambda xs, gs: weight_gradient(xs, gs) + 1e-3,
            r"differs .* at \[o=\d, i=\d\]",
        ),
    ],
)
def test_weight_gradient_mistakes(fn, match):
    fails_with(
        kv_ex.check_weight_gradient,
        fn,
        "the weight gradient of a layer applied at every step: .*" + match,
    )


# ---------- issue 13 follow-up (learner trial): gradients, dtypes, specific diagnoses
# ----------


def shared_kv_variant(
    m,
    norm,
    kv,
    n_heads,
    *,
    detach_m=False,
    bias=True,
    fresh_norm=False,
    norm_after=False,
    dtype=None,
):
    x = m.detach() if detach_m else m
    if norm_after:
        k, v = kv(x).chunk(2, -1)
        k, v = norm(k), norm(v)
    else:
        x = F.layer_norm(x, x.shape[-1:]) if fresh_norm else norm(x)
        k, v = F.linear(x, kv.weight, kv.bias if bias else None).chunk(2, -1)
    k, v = (t.reshape(m.size(0), n_heads, -1) for t in (k, v))
    return (k.to(dtype), v.to(dtype)) if dtype else (k, v)


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(detach_m=True), "`m` gets no gradient.*detached"),
        (dict(bias=False), "bias is missing from the keys and values"),
        (dict(fresh_norm=True), "fresh layer_norm.*`norm`"),
        (dict(norm_after=True), "normalized after projecting"),
        (dict(dtype=torch.float32), "dtype torch.float32, expected torch.float64"),
    ],
)
def test_shared_kv_gradient_and_more(options, match):
    fails_with(
        kv_ex.check_shared_kv,
        lambda m, n, kv, h: shared_kv_variant(m, n, kv, h, **options),
        "one key/value projection shared by all layers: .*" + match,
    )


def square_forward_saving_output(ctx, x):
    y = x * x
    ctx.save_for_backward(y)
    return y


def test_square_backward_from_saved_output():
    fails_with(
        ex.check_square,
        function(
            square_forward_saving_output, square_backward_with(lambda g, y: g * 2 * y)
        ),
        r"a custom autograd Function \(square\): .*saved OUTPUT",
    )


def value_gradients_off_by_one(read_grads):
    total = torch.zeros_like(read_grads[-1])
    for t, g in enumerate(read_grads):
        total[:t] += g[:t]
    return total


@pytest.mark.parametrize(
    "fn, match",
    [
        (value_gradients_off_by_one, r"off by one.*t \+ 1"),
        (
            lambda r: value_gradients(r).float(),
            "dtype torch.float32, expected torch.float64",
        ),
    ],
)
def test_value_gradients_off_by_one_and_dtype(fn, match):
    fails_with(
        ex.check_value_gradients, fn, "the gradient of a stacked value: .*" + match
    )


def recopy_forward(ctx, top, value, buffer):
    n = top.size(1)
    buffer[:, :n].copy_(top)  # re-copies the whole history: O(T) per step
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            function(recopy_forward, append_backward),
            r"wrote into the old slots.*O\(T\)",
        ),
        (
            function(append_forward, lambda ctx, g: (g[:, 1:], g[:, 0], None)),
            "newest first",
        ),
    ],
)
def test_append_recopy_and_newest_first(fn, match):
    fails_with(append_ex.check_append, fn, r"the Append function .*: .*" + match)


@pytest.mark.parametrize(
    "fn, match",
    [
        (
            lambda xs, gs: weight_gradient(xs, gs) / xs.size(1),
            "divided by the batch size",
        ),
        (
            lambda xs, gs: gs.transpose(0, 1).flatten(0, 1).t() @ xs.flatten(0, 1),
            "paired with different",
        ),
        (
            lambda xs, gs: gs.sum((0, 1))[:, None] * xs.sum((0, 1))[None],
            "product of the sums",
        ),
        (
            lambda xs, gs: weight_gradient(xs, gs).float(),
            "dtype torch.float32, expected torch.float64",
        ),
    ],
)
def test_weight_gradient_more(fn, match):
    fails_with(
        kv_ex.check_weight_gradient,
        fn,
        "the weight gradient of a layer applied at every step: .*" + match,
    )


def test_append_backward_wrong_shape_is_explained():
    fails_with(
        append_ex.check_append,
        function(append_forward, lambda ctx, g: (g[:, ctx.n], g[:, : ctx.n], None)),
        r"the Append function .*: .*wrong shape.*grad\[:, :n\]",
    )


def square_forward_on_ctx(ctx, x):
    ctx.x = x  # no save_for_backward: a later in-place change of x goes unnoticed
    return x * x


def test_square_input_kept_on_ctx_named():  # issue 28
    fails_with(
        ex.check_square,
        function(square_forward_on_ctx, lambda ctx, g: g * 2 * ctx.x),
        r"a custom autograd Function \(square\): .*keeps x on ctx \(ctx\.x = x\).*"
        r"ctx\.save_for_backward\(x\)",
    )


def test_shared_kv_values_twice_named_as_the_keys_mistake():  # issue 28, trial 7
    fails_with(
        kv_ex.check_shared_kv,
        lambda m, norm, kv, h: (shared_kv(m, norm, kv, h)[1],) * 2,
        r"k is the same as v: kv\(norm\(m\)\) gives the keys as its first D outputs",
    )


def test_append_backward_past_the_end_with_the_right_length_saved():  # issue 28, trial 7
    """ctx.n is the old length: the slot read past the end is not blamed on ctx.n."""
    with pytest.raises(ExerciseFailed) as info:
        append_ex.check_append(function(
            append_forward, lambda ctx, g: (g[:, : ctx.n], g[:, ctx.n + 1], None)))
    message = str(info.value)
    assert "backward reads a slot past the end of grad" in message
    assert "forward saved" not in message


def value_gradients_leaving_out(skip):
    """A learner's loop over the reads t >= j that leaves out the reads `skip(j, T)`."""
    def value_gradients(read_grads):
        T = len(read_grads)
        out = torch.zeros_like(read_grads[-1])
        for j in range(T):
            for t in range(j, T):
                if t not in skip(j, T):
                    out[j] += read_grads[t][j]
        return out
    return value_gradients


def first_rows(T_of):
    """A learner's loop that takes T, the number of values, from `T_of(read_grads)`."""
    def value_gradients(read_grads):
        T = T_of(read_grads)
        return torch.stack([sum(g[j] for g in read_grads[j:]) for j in range(T)])
    return value_gradients


@pytest.mark.parametrize("fn, match", [  # issue 28, trial 8: slips named, not "differs"
    (function(square_forward, square_backward_with(lambda g, x: 2 * x.T @ g)),
     r"square\): backward uses a matrix product .*with \*, not @"),
    (function(square_forward, square_backward_with(lambda g, x: g @ (2 * x).T)),
     r"square\): backward uses a matrix product"),
])
def test_square_matrix_product_named(fn, match):
    fails_with(ex.check_square, fn, match)


@pytest.mark.parametrize("fn, match", [
    (value_gradients_leaving_out(lambda j, T: (j,)), r"off by one: each read's newest slot "
     r"is left out \(slicing \[:t\], or a loop over t > j\).*t = j included"),
    (value_gradients_leaving_out(lambda j, T: (2,)), r"read_grads\[2\] is left out: sum "
     r"read_grads\[t\]\[j\] over every read t >= j"),
    (value_gradients_leaving_out(lambda j, T: (T - 1,)), r"the last read, "
     r"read_grads\[T - 1\], is left out"),
    (first_rows(lambda rg: rg[0].size(-1)), r"has 3 rows, expected T = 5, one row per "
     r"value: T = len\(read_grads\), the number of reads \(steps\)\.$"),
    (first_rows(lambda rg: rg[0].size(0)), r"has 1 row, .*not read_grads\[0\]\.size\(0\)"),
])
def test_value_gradients_reads_left_out_named(fn, match):
    fails_with(ex.check_value_gradients, fn, match)


@pytest.mark.parametrize("fn, match", [
    (lambda m, norm, kv, h: tuple(z.reshape(m.size(0), h, -1)
                                  for z in kv(norm(m)).split(kv.in_features // h, -1)[:2]),
     r"k holds the first 6 of kv\(norm\(m\)\)'s 2D = 24 outputs.*split\(D_h, -1\) makes "
     r"pieces of size D_h = 6.*\.chunk\(2, -1\)"),
    (lambda m, norm, kv, h: tuple(z.reshape(m.size(0), -1)
                                  for z in kv(norm(m)).split(3, -1)[:2]),
     r"k holds the first 3 .*split\(3, -1\) makes pieces of size 3, not 3 pieces"),
    (lambda m, norm, kv, h: tuple(z.reshape(m.size(0), h, -1)
                                  for z in kv(m * norm.weight + norm.bias).chunk(2, -1)),
     r"without normalizing it .*call the module, norm\(m\)"),
])
def test_shared_kv_pieces_and_affine_named(fn, match):
    fails_with(kv_ex.check_shared_kv, fn, match)


@pytest.mark.parametrize("fn, match", [
    (lambda xs, gs: gs[..., :, None] * xs[..., None, :],
     r"has shape \[5, 2, 4, 3\] = \[T, B, D_out, D_in\]: one weight gradient per step and "
     r"example \(their sum is right\)"),
    (lambda xs, gs: torch.einsum("tbo,tbi->boi", gs, xs),
     r"= \[B, D_out, D_in\]: one weight gradient per example \(their sum is right\)"),
    (lambda xs, gs: torch.tensordot(gs, xs, dims=([0, 1], [1, 0])),
     r"tensordot paired axis 0 of its first tensor \(the steps\) with axis 1 of the second "
     r"\(the batch\).*dims=\(\[0, 1\], \[0, 1\]\)"),
    (lambda xs, gs: (xs.flatten(0, 1).T @ gs.flatten(0, 1)).view(gs.size(-1), -1),
     r"reshape is not a transpose"),
])
def test_weight_gradient_per_step_and_axes_named(fn, match):
    fails_with(kv_ex.check_weight_gradient, fn, match)


@pytest.mark.parametrize("fn, match", [  # stop 41's noticed items
    (function(square_forward, square_backward_with(lambda g, x: [g * 2 * x])),
     r"square\): Square\.backward returned a list: .*return grad_output \* 2 \* x"),
    (function(square_forward, square_backward_with(lambda g, x: g * 2 * x.abs())),
     r"square\): backward multiplies by \|x\| \(\.abs\(\)\) where x belongs: the sign"),
])
def test_square_list_and_abs_named(fn, match):
    fails_with(ex.check_square, fn, match)


def test_shared_kv_names_the_half_without_its_bias():  # stop 41's noticed items
    def values_without_bias(m, norm, kv, n_heads):
        k, v = shared_kv_variant(m, norm, kv, n_heads)
        return k, v - kv.bias[m.size(-1):].view(n_heads, -1)

    fails_with(kv_ex.check_shared_kv, values_without_bias,
               r"bias is missing from the values: kv\(x\)")
