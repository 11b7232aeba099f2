"""Trial 68, notebook 04 (kv_sharing_stack): wrong answers the checks refused with a generic
message. A value gradient reversed along an axis (`total.flip(0)`) got "the right values in
the wrong places"; a weight gradient with an .abs() on the result, its inputs centred
(`X - X.mean(0)`) or one step's gs met by xs summed over the steps got "differs"; keys or
values projected from norm(m) + m or from m averaged over the batch, or mixed across heads,
got "differs"; Append's value gradient averaged over the batch and top's gradient with
value's slot added were told which gradient differed but not how; a `.view(H, B, -1)` of a
chunked half crashed with torch's "view size is not compatible". Each is now named, by the
relation (`grading.relations`: reversed, |w|, a mean over an axis, a term broadcast along an
axis) or by the exercise's own table.
"""
import torch

from checker_helpers import autograd_function, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_shared_kv,
                                              check_value_gradients, check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _value_gradients(then=lambda total: total):
    def value_gradients(read_grads):
        total = torch.zeros_like(read_grads[-1])
        for g in read_grads:
            total[:g.size(0)] += g
        return then(total)
    return value_gradients


case("value_gradients_flipped_steps", check_value_gradients,
     _value_gradients(lambda t: t.flip(0)), r"reversed along axis j.*flip\(0\)")
case("value_gradients_flipped_features", check_value_gradients,
     _value_gradients(lambda t: t.flip(-1)), r"reversed along axis f")
case("value_gradients_flipped_both", check_value_gradients,
     _value_gradients(lambda t: t.flip(0, 1)), r"reversed along every axis")
case("value_gradients_abs", check_value_gradients,
     _value_gradients(torch.abs), r"absolute value.*\.abs\(\)")
case("value_gradients_mean_over_steps", check_value_gradients,
     _value_gradients(lambda t: t.mean(0, keepdim=True).expand_as(t)), r"mean over axis j")


def _rows(xs, gs):
    return gs.flatten(0, 1), xs.flatten(0, 1)


def _weight(fn):
    return lambda xs, gs: fn(*_rows(xs, gs), xs, gs)


case("weight_gradient_abs_of_product", check_weight_gradient,
     _weight(lambda G, X, xs, gs: (G.T @ X).abs()), r"absolute value.*\.abs\(\)")
case("weight_gradient_x_centred_rows", check_weight_gradient,
     _weight(lambda G, X, xs, gs: G.T @ (X - X.mean(0))), r"xs \(or gs, the same sum\) has its mean over the T\*B rows taken off")
case("weight_gradient_g_centred_steps", check_weight_gradient,
     _weight(lambda G, X, xs, gs: (gs - gs.mean(0)).flatten(0, 1).T @ X),
     r"xs \(or gs, the same sum\) has its mean over dim 0 taken off")
case("weight_gradient_first_step_g_summed_x", check_weight_gradient,
     lambda xs, gs: gs[0].T @ xs.sum(0), r"gs\[0\].*meets xs summed over the steps")
case("weight_gradient_summed_g_last_step_x", check_weight_gradient,
     lambda xs, gs: gs.sum(0).T @ xs[-1], r"gs summed over the steps meets xs\[-1\]")
case("weight_gradient_flipped_rows", check_weight_gradient,
     _weight(lambda G, X, xs, gs: (G.T @ X).flip(0)), r"reversed along axis o")
RIGHT["weight_gradient_einsum"] = (check_weight_gradient,
                                   lambda xs, gs: torch.einsum("tbo,tbi->oi", gs, xs))


def _shared_kv(before=lambda m, norm: norm(m)):
    def shared_kv(m, norm, kv, n_heads):
        out = kv(before(m, norm)).view(m.size(0), 2, n_heads, -1)
        return out[:, 0], out[:, 1]
    return shared_kv


case("shared_kv_residual", check_shared_kv, _shared_kv(lambda m, norm: norm(m) + m),
     r"k is a projection of norm\(m\) \+ m")
case("shared_kv_batch_mean", check_shared_kv,
     _shared_kv(lambda m, norm: norm(m.mean(0, keepdim=True)).expand_as(m)),
     r"k is the same for every batch entry")


def _keys_of_mean(m, norm, kv, n_heads):
    batch = m.size(0)
    k = kv(norm(m.mean(0, keepdim=True).expand_as(m))).view(batch, 2, n_heads, -1)[:, 0]
    return k, kv(norm(m)).view(batch, 2, n_heads, -1)[:, 1]


case("shared_kv_keys_of_batch_mean", check_shared_kv, _keys_of_mean,
     r"k is the same for every batch entry.*averaged over the batch")


def _values_heads_mixed(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1].transpose(1, 2).reshape(m.size(0), n_heads, -1)


case("shared_kv_values_heads_mixed", check_shared_kv, _values_heads_mixed,
     r"v holds each memory vector's own D numbers in other places.*heads mixed")


def _keys_permuted_in_row(m, norm, kv, n_heads):
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[:, 0].flip(-1), out[:, 1]


case("shared_kv_keys_head_width_reversed", check_shared_kv, _keys_permuted_in_row,
     r"k holds each memory vector's own D numbers in other places")


def _view_heads_first(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, -1)
    return (k.view(n_heads, m.size(0), -1).transpose(0, 1),
            v.view(n_heads, m.size(0), -1).transpose(0, 1))


case("shared_kv_view_heads_first", check_shared_kv, _view_heads_first,
     r"\.view of a tensor that is not contiguous.*mixes batch entries into heads")


def _view_of_half(m, norm, kv, n_heads):
    k, v = kv(norm(m)).chunk(2, -1)
    return k.mT.view(m.size(0), n_heads, -1), v.mT.view(m.size(0), n_heads, -1)


case("shared_kv_view_of_transpose", check_shared_kv, _view_of_half,
     r"\.view of a tensor that is not contiguous")
RIGHT["shared_kv_chunk_reshape"] = (check_shared_kv, lambda m, norm, kv, n_heads: tuple(
    t.reshape(m.size(0), n_heads, -1) for t in kv(norm(m)).chunk(2, -1)))
RIGHT["shared_kv_unflatten"] = (check_shared_kv, lambda m, norm, kv, n_heads: kv(
    norm(m)).unflatten(-1, (2, n_heads, -1)).unbind(1))


def _forward(ctx, top, value, buffer):
    n = ctx.n = top.size(1)
    buffer.data[:, n] = value
    return buffer.data[:, :n + 1]


def _append(backward):
    return autograd_function("Append", _forward, backward)


case("append_value_gradient_batch_mean_broadcast", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n].mean(0).expand_as(g[:, ctx.n]), None)),
     r"gradient for `value`.*mean over axis b")
case("append_value_gradient_batch_sum_broadcast", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n], g[:, ctx.n].sum(0, keepdim=True).expand_as(
         g[:, ctx.n]), None)), r"gradient for `value`.*sum over axis b")
case("append_top_gradient_plus_value_slot", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n] + g[:, ctx.n:ctx.n + 1], g[:, ctx.n], None)),
     r"gradient for `top` adds value's slot, grad\[:, n\], to each of top's n slots")
case("append_top_gradient_plus_first_slot", check_append,
     _append(lambda ctx, g: (g[:, :ctx.n] + g[:, :1], g[:, ctx.n], None)),
     r"gradient for `top`.*plus a term the same all along axis n")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
