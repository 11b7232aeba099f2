"""Trial 65, notebook 04 (kv_sharing_stack): wrong answers the checks refused with a generic
"differs" (or a wrong) message. Square's backward written with the Jacobian as a matrix,
`grad_output @ torch.diag_embed(2 * x)` (right for a 1-D x only; on a 2-D x autograd sums the
broadcast product back to x's shape), is named. A stack read newest first, `.flip`: Append
returning `buffer.data[:, :n + 1].flip(1)` was told only "a copy", and value_gradients adding
each read flipped got "differs"; both now name the order. value_gradients with each slot's
gradient credited one slot off (`g[1:]` into `out[:t]`, or an index t - 1 where t belongs)
is named as a shift by one slot. An Append that counts n itself between calls (writing slot 0
while top holds 5) was told only the result's shape, and one that saves the buffer's capacity
as n (ctx.n = buffer.size(1)) was told a global or class attribute held n: both are named.
Square's backward grad_output / (2 * x), the chain rule inverted, got 'differs' (-inf against
-0 where x = 0): named. A weight gradient whose steps are paired through a .roll (wrapping around) is named like the
shifted slice it is.
"""
import torch

from checker_helpers import autograd_function, square_with, trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import (check_append, check_square, check_value_gradients,
                                              check_weight_gradient)

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
_square = square_with


JACOBIAN = r"diag_embed.*elementwise|x\.sum\(0\).*elementwise"
case("square_backward_g_at_diag_embed", check_square,
     _square(lambda x, g: g @ torch.diag_embed(2 * x)), JACOBIAN)
case("square_backward_g_at_diag_embed_times_2", check_square,
     _square(lambda x, g: 2 * (g @ torch.diag_embed(x))), JACOBIAN)
case("square_backward_x_summed_over_rows", check_square,
     _square(lambda x, g: g * 2 * x.sum(0)), JACOBIAN)


class _SquareDiagEmbed(torch.autograd.Function):  # the source names diag_embed
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output @ torch.diag_embed(2 * x)


class _SquareDiagEmbedMean(_SquareDiagEmbed):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.unsqueeze(0) @ torch.diag_embed(2 * x)).mean(0)


case("square_backward_diag_embed_in_source", check_square, _SquareDiagEmbed,
     r"grad_output @ torch\.diag_embed\(2 \* x\) multiplies.*1-D x only")
case("square_backward_diag_embed_mean", check_square, _SquareDiagEmbedMean,
     r"multiplies by torch\.diag_embed.*elementwise")
case("square_backward_divides_by_2x", check_square, _square(lambda x, g: g / (2 * x)),
     r"divides grad_output by the local derivative 2x.*multiplies")
case("square_backward_divides_by_x_times_2", check_square,
     _square(lambda x, g: (g / x) / 2), r"divides grad_output by the local derivative 2x")
RIGHT["square_jacobian_per_row"] = (check_square, _square(
    lambda x, g: (g.unsqueeze(-2) @ torch.diag_embed(2 * x)).squeeze(-2)))


def _append(read):
    def forward(ctx, top, value, buffer):
        n = ctx.n = top.size(1)
        buffer.data[:, n] = value
        return read(buffer.data[:, :n + 1])

    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, ctx.n], None
    return autograd_function("Append", forward, backward)


NEWEST_FIRST = r"newest first.*flip"
case("append_forward_flip", check_append, _append(lambda s: s.flip(1)), NEWEST_FIRST)
case("append_forward_index_reversed", check_append,
     _append(lambda s: s[:, torch.arange(s.size(1) - 1, -1, -1)]), NEWEST_FIRST)


def _backward_at_n(ctx, grad):
    return grad[:, :ctx.n], grad[:, ctx.n], None


def _counted():
    count = [0]  # n kept between calls, as on the class or in a global

    def forward(ctx, top, value, buffer):
        n = ctx.n = count[0]
        count[0] += 1
        buffer.data[:, n] = value
        return buffer.data[:, :n + 1]

    def backward(ctx, grad):
        return grad[:, :ctx.n], grad[:, ctx.n], None
    return autograd_function("Append", forward, backward)


case("append_n_counted_between_calls", check_append, _counted(),
     r"writes slot 0 and returns 1 slot, though top already holds n = 5: .*top\.size\(1\)")


def _capacity_saved(ctx, top, value, buffer):
    n = top.size(1)
    buffer.data[:, n] = value
    ctx.n = buffer.size(1)  # the capacity C, not the length n
    return buffer.data[:, :n + 1]


case("append_ctx_n_is_capacity", check_append,
     autograd_function("Append", _capacity_saved, _backward_at_n),
     r"ctx\.n = buffer\.size\(1\), the buffer's capacity.*top\.size\(1\)")


def _summed(slot_of, flip=False):
    def value_gradients(read_grads):
        total = torch.zeros_like(read_grads[-1])
        for t, g in enumerate(read_grads):
            slot_of(total, t, g.flip(0) if flip else g)
        return total
    return value_gradients


def _add(total, t, g):
    total[:t + 1] += g


def _one_up(total, t, g):
    total[:t] += g[1:]


def _one_down(total, t, g):
    total[1:t + 1] += g[:t]


def _reverse_chain_t_minus_1(read_grads):
    out, carry = torch.zeros_like(read_grads[-1]), torch.zeros_like(read_grads[-1])
    for t in reversed(range(len(read_grads))):
        carry = carry[:t + 1] + read_grads[t]
        out[t] = carry[t - 1] if t else carry[0]
    return out


def _shifted_rows(read_grads):
    total = _summed(_add)(read_grads)
    return torch.cat([total[:1] * 0, total[:-1]])


case("value_gradients_reads_flipped", check_value_gradients, _summed(_add, flip=True),
     NEWEST_FIRST)
SHIFTED = r"one slot off.*out\[:t \+ 1\] \+= read_grads\[t\]"
case("value_gradients_slot_j_plus_1", check_value_gradients, _summed(_one_up), SHIFTED)
case("value_gradients_slot_j_minus_1", check_value_gradients, _summed(_one_down), SHIFTED)
case("value_gradients_reverse_chain_t_minus_1", check_value_gradients,
     _reverse_chain_t_minus_1, SHIFTED)
case("value_gradients_rows_shifted_down", check_value_gradients, _shifted_rows, SHIFTED)

STEP_ROLLED = r"g of step t meets x of the step before or after.*\.roll"
case("weight_gradient_steps_rolled", check_weight_gradient,
     lambda xs, gs: gs.roll(1, 0).flatten(0, 1).T @ xs.flatten(0, 1), STEP_ROLLED)
case("weight_gradient_steps_rolled_back", check_weight_gradient,
     lambda xs, gs: gs.flatten(0, 1).T @ xs.roll(1, 0).flatten(0, 1), STEP_ROLLED)

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
