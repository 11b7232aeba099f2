# flake8: noqa: E501
"""Learner trial 29c, notebook 04: off-by-one slots of Append named as such (not as
top.size(0)), a saved buffer written in place, a backward with no return, and other typical
wrong answers of Exercises 2-5."""
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests
from labnn.exercises.kv_sharing_stack.custom_backward import check_square, check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_weight_gradient
from labnn.exercises.kv_sharing_stack.stack_append import check_append

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def function(name, forward, backward):
    """A learner's Function from two plain functions."""
    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


# --- 04 Exercise 4, Append
def ap_backward(ctx, grad):
    return grad[:, : ctx.n], grad[:, ctx.n], None


def appender(write, keep):
    """forward writing slot n + write and returning the first n + keep slots."""
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        buffer[:, n + write].copy_(value)
        ctx.n = n
        return buffer.data[:, : n + keep]
    return function("Append", forward, ap_backward)


def ap_saves_buffer_forward(ctx, top, value, buffer):  # saves the buffer it writes into
    n = top.size(1)
    buffer[:, n].copy_(value)
    ctx.save_for_backward(buffer)
    ctx.n = n
    return buffer.data[:, : n + 1]


def ap_saves_buffer_backward(ctx, grad):  # reads the saved buffer back: its version moved on
    (buffer,) = ctx.saved_tensors
    return grad[:, : ctx.n], grad[:, ctx.n], None


def ap_n_from_saved_backward(ctx, grad):  # n from the saved top, not from ctx.n
    (top,) = ctx.saved_tensors
    return grad[:, : top.size(1)], grad[:, top.size(1)], None


def ap_saves_top_forward(ctx, top, value, buffer):  # saves top: a view of buffer.data, fine
    n = top.size(1)
    buffer[:, n].copy_(value)
    ctx.save_for_backward(top)
    return buffer.data[:, : n + 1]


def ap_len_forward(ctx, top, value, buffer):  # n = len(top): the batch size
    n = len(top)
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


def ap_features_forward(ctx, top, value, buffer):  # n = top.size(-1): the features
    n = top.size(-1)
    buffer[:, n].copy_(value)
    ctx.n = n
    return buffer.data[:, : n + 1]


def ap_unsqueeze_forward(ctx, top, value, buffer):  # writes value[:, None], [B, 1, F]
    n = top.size(1)
    buffer[:, n : n + 1] = value[:, None]
    ctx.n = n
    return buffer.data[:, : n + 1]


def ap_keepdim_backward(ctx, grad):  # value's gradient kept as [B, 1, F]
    return grad[:, : ctx.n], grad[:, ctx.n : ctx.n + 1], None


def ap_last_backward(ctx, grad):  # grad[:, -1] for value: slot n is the last of n + 1
    return grad[:, : ctx.n], grad[:, -1], None


def ap_narrow_forward(ctx, top, value, buffer):  # writes through .data, narrow for the view
    n = top.size(1)
    buffer.data[:, n] = value
    ctx.n = n
    return buffer.data.narrow(1, 0, n + 1)


RIGHT["ap"] = (check_append, appender(0, 1))
RIGHT["ap_last"] = (check_append, function("Append", appender(0, 1).forward, ap_last_backward))
RIGHT["ap_narrow"] = (check_append, function("Append", ap_narrow_forward, ap_backward))
RIGHT["ap_saves_top"] = (check_append, function("Append", ap_saves_top_forward, ap_n_from_saved_backward))
RIGHT["ap_unsqueeze"] = (check_append, function("Append", ap_unsqueeze_forward, ap_backward))
case("ap_write_n_plus_1", check_append, appender(1, 1), r"off by one.*slot n \+ 1")
case("ap_short", check_append, appender(0, 0), r"off by one.*include the new slot")
case("ap_long", check_append, appender(0, 2), r"off by one.*n \+ 2 slots, one too many")
case("ap_write_n_minus_1_short", check_append, appender(-1, 0),
     r"^(?!.*top\.size\(0\)).*off by one.*slot n - 1.*include the new slot")
case("ap_write_n_plus_1_short", check_append, appender(1, 0),
     r"^(?!.*top\.size\(0\)).*off by one.*slot n \+ 1.*include the new slot")
case("ap_saves_buffer", check_append,
     function("Append", ap_saves_buffer_forward, ap_saves_buffer_backward),
     r"^(?!.*view of `?buffer\.data).*save_for_backward\(buffer\).*in place.*ctx\.n = n")
case("ap_len_top", check_append, function("Append", ap_len_forward, ap_backward),
     r"len\(top\).*batch size.*top\.size\(1\)")
case("ap_features", check_append, function("Append", ap_features_forward, ap_backward),
     r"top\.size\(-1\).*features.*top\.size\(1\)")
case("ap_keepdim", check_append, function("Append", appender(0, 1).forward, ap_keepdim_backward),
     r"grad\[:, n\]|shape")


# --- 04 Exercise 2, Square
def sq_forward(ctx, x):
    ctx.save_for_backward(x)
    return x * x


def sq_no_return(ctx, grad_output):  # computes the gradient, forgets to return it
    (x,) = ctx.saved_tensors
    grad_output * 2 * x


def sq_ctx_forward(ctx, x):  # keeps x as a plain attribute
    ctx.x = x
    return x * x


def sq_ctx_backward(ctx, grad_output):
    return grad_output * 2 * ctx.x


def sq_tuple_backward(ctx, grad_output):  # x = ctx.saved_tensors: the tuple, not x
    x = ctx.saved_tensors
    return grad_output * 2 * x[0] if isinstance(x, torch.Tensor) else grad_output * 2 * x


def sq_called_backward(ctx, grad_output):  # ctx.saved_tensors() called
    (x,) = ctx.saved_tensors()
    return grad_output * 2 * x


def sq_right_backward(ctx, grad_output):
    (x,) = ctx.saved_tensors
    return grad_output * 2 * x


def sq_pow_forward(ctx, x):
    ctx.save_for_backward(x)
    return x ** 2


RIGHT["sq"] = (check_square, function("Square", sq_forward, sq_right_backward))
RIGHT["sq_pow"] = (check_square, function("Square", sq_pow_forward, sq_right_backward))
case("sq_no_return", check_square, function("Square", sq_forward, sq_no_return),
     r"returned None.*one gradient per input of forward.*grad_output \* 2 \* x")
case("sq_ctx_x", check_square, function("Square", sq_ctx_forward, sq_ctx_backward),
     r"ctx\.save_for_backward\(x\).*autograd checks x was not modified")
case("sq_saved_tuple", check_square, function("Square", sq_forward, sq_tuple_backward),
     r"tuple|\(x,\) = ctx\.saved_tensors")
case("sq_saved_called", check_square, function("Square", sq_forward, sq_called_backward),
     r"saved_tensors is an attribute.*without \(\)")


# --- 04 Exercise 3, value_gradients
def vg_stack(read_grads):  # torch.stack over reads of different lengths
    return torch.stack(read_grads).sum(0)


def vg_cat(read_grads):  # concatenates the reads: T(T+1)/2 rows
    return torch.cat(read_grads)


def vg_list(read_grads):  # a list of rows, not a tensor
    T = len(read_grads)
    return [sum(read_grads[t][j] for t in range(j, T)) for j in range(T)]


def vg_pad_sum(read_grads):  # pads each read to T rows, then sums: right
    T = len(read_grads)
    return sum(F.pad(g, (0, 0, 0, T - g.size(0))) for g in read_grads)


def vg_assign(read_grads):  # = instead of +=: each read overwrites the earlier ones
    total = torch.zeros_like(read_grads[-1])
    for g in read_grads:
        total[: g.size(0)] = g
    return total


RIGHT["vg_pad"] = (check_value_gradients, vg_pad_sum)
case("vg_assign", check_value_gradients, vg_assign, r"last read.*(add|sum)")
case("vg_stack", check_value_gradients, vg_stack, r"torch\.stack.*\[t \+ 1, F\].*out\[:t \+ 1\]")
case("vg_cat", check_value_gradients, vg_cat, r"torch\.cat.*one after another")
case("vg_list", check_value_gradients, vg_list, r"torch\.Tensor.*list")


# --- 04 Exercise 5, weight_gradient
def wg_bmm(xs, gs):  # a product per step, summed: right until trial 49b (one is asked)
    return torch.bmm(gs.transpose(1, 2), xs).sum(0)


def wg_last(xs, gs):  # the last step only
    return gs[-1].T @ xs[-1]


def wg_batch_first(xs, gs):  # xs flattened batch-first, gs step-first
    return gs.flatten(0, 1).T @ xs.transpose(0, 1).flatten(0, 1)


def wg_first_batch(xs, gs):  # one sequence only: the batch's first
    return gs[:, 0].T @ xs[:, 0]


def wg_einsum(xs, gs):  # right
    return torch.einsum("tbo,tbi->oi", gs, xs)


def wg_mean_rows(xs, gs):  # averaged over the T * B rows
    return gs.flatten(0, 1).T @ xs.flatten(0, 1) / (xs.size(0) * xs.size(1))


RIGHT["wg_einsum"] = (check_weight_gradient, wg_einsum)
case("wg_mean_rows", check_weight_gradient, wg_mean_rows, r"(mean|averag|divid).*(sum|add)")
case("wg_bmm", check_weight_gradient, wg_bmm, r"one matrix product")
case("wg_last", check_weight_gradient, wg_last, r"last step|every step")
case("wg_batch_first", check_weight_gradient, wg_batch_first, r"same way|paired|different \(t, b\)")
case("wg_first_batch", check_weight_gradient, wg_first_batch, r"batch|every (sequence|example)|\bb\b")



# sizes written as numbers: right only at the checks' own (T 5, B 2, F 3, D_in 3, D_out 4)
def wg_numbers(xs, gs):
    return gs.reshape(10, 4).T @ xs.reshape(10, 3)


def vg_numbers(read_grads):
    total = torch.zeros(5, 3, dtype=torch.float64)
    for g in read_grads:
        total[: g.size(0)] += g
    return total


case("wg_numbers", check_weight_gradient, wg_numbers, r"right at the check's sizes, not at these")
case("vg_numbers", check_value_gradients, vg_numbers, r"right at the check's sizes, not at these")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
