# flake8: noqa: E501
"""Learner trial 30c, notebook 04: a list for a pair (shared_kv's result, Append.backward's
gradients), the typical mistakes behind torch's own errors named (grad sliced on the batch
axis, .T on a 3-D tensor, split(2, -1) unpacked), messages that blamed the wrong thing, and
every message of the exercises kept under 400 characters."""
import pytest
import torch
from checker_helpers import trial_case, trial_tests
from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.kv_sharing_stack.custom_backward import check_value_gradients
from labnn.exercises.kv_sharing_stack.kv_sharing import check_shared_kv, check_weight_gradient
from labnn.exercises.kv_sharing_stack.stack_append import check_append
from test_exercises_stack import append_backward as ap_backward

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def function(name, forward, backward):
    """A learner's Function from two plain functions."""
    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


# --- 04 Exercise 1, shared_kv
def kv_list(m, norm, kv, n_heads):  # right: a list of two
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return list((out[:, 0], out[:, 1]))


def kv_split_unpacked(m, norm, kv, n_heads):  # split(2, -1): pieces of size 2
    k, v = kv(norm(m)).split(2, -1)
    return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)


def kv_split_first_two(m, norm, kv, n_heads):  # split(2, -1)[:2]: the first two pieces
    k, v = kv(norm(m)).split(2, -1)[:2]
    return k, v


def kv_batch_index(m, norm, kv, n_heads):  # out[0]: batch entry 0
    out = kv(norm(m)).view(m.size(0), 2, n_heads, -1)
    return out[0], out[1]


def kv_float_modules(m, norm, kv, n_heads):  # module.float() converts the module in place
    out = kv.float()(norm.float()(m.float())).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def kv_float_linear(m, norm, kv, n_heads):  # kv.float() alone: its numbers stay the same
    out = kv.float()(norm(m).float()).view(m.size(0), 2, n_heads, -1)
    return out[:, 0], out[:, 1]


def kv_torch_split(m, norm, kv, n_heads):  # torch.split(y, 2, dim=-1), unpacked
    k, v = torch.split(kv(norm(m)), 2, dim=-1)
    return k, v


RIGHT["kv_list"] = (check_shared_kv, kv_list)
case("kv_float_linear", check_shared_kv, kv_float_linear, r"kv\.float\(\).*module itself.*in place")
case("kv_torch_split", check_shared_kv, kv_torch_split, r"pieces of size 2.*chunk\(2, -1\)")
case("kv_split_unpacked", check_shared_kv, kv_split_unpacked,
     r"split\(2, -1\).*pieces of size 2.*chunk\(2, -1\)")
case("kv_split_first_two", check_shared_kv, kv_split_first_two,
     r"^(?!.*size H = 2).*split\(2, -1\).*pieces of size 2.*chunk\(2, -1\)")
case("kv_batch_index", check_shared_kv, kv_batch_index,
     r"out\[0\].*batch entry 0.*out\[:, 0\], out\[:, 1\]")
case("kv_float_modules", check_shared_kv, kv_float_modules,
     r"\.float\(\).*module itself.*in place")


# --- 04 Exercise 4, Append
def writing(write):
    """The notebook's forward, with the slot written by `write(buffer, n, value, top)`."""
    def forward(ctx, top, value, buffer):
        n = top.size(1)
        write(buffer, n, value, top)
        ctx.n = n
        return buffer.data[:, : n + 1]
    return forward


def ap_cat_forward(ctx, top, value, buffer):  # a new tensor: torch.cat
    ctx.n = top.size(1)
    return torch.cat([top, value[:, None]], 1)


def ap_clone_forward(ctx, top, value, buffer):  # a copy of the buffer's prefix
    ctx.n = top.size(1)
    buffer[:, ctx.n].copy_(value)
    return buffer[:, : ctx.n + 1].clone()


def ap_case(tag, forward, backward, pattern):
    case(tag, check_append, function("Append", forward, backward), pattern)


# forward as the notebook's (slot n, then n + 1 slots) unless said
ap_forward = writing(lambda buffer, n, value, top: buffer[:, n].copy_(value))
RIGHT["ap"] = (check_append, function("Append", ap_forward, ap_backward))
ap_case("ap_list_backward", ap_forward, lambda ctx, grad: [grad[:, : ctx.n], grad[:, ctx.n], None],
        r"backward returned a list.*one gradient.*tuple.*return a, b, None")
ap_case("ap_dim0_backward", ap_forward, lambda ctx, grad: (grad[: ctx.n], grad[ctx.n], None),
        r"\[B, n\+1, F\].*step axis.*grad\[:, :n\], grad\[:, n\]")
ap_case("ap_top_long", ap_forward, lambda ctx, grad: (grad[:, : ctx.n + 1], grad[:, ctx.n], None),
        r"wrong shape.*grad\[:, :n\]")
ap_case("ap_value_keepdim", ap_forward,
        lambda ctx, grad: (grad[:, : ctx.n], grad[:, ctx.n : ctx.n + 1], None),
        r"wrong shape.*grad\[:, n\]")
# buffer[:, n] = value.float(): the slot holds the value rounded to float32
ap_case("ap_float", writing(lambda buffer, n, value, top: buffer[:, n].copy_(value.float())),
        ap_backward, r"^(?!.*did not write).*rounded to float32.*no \.float\(\)")
ap_case("ap_value_inplace", writing(lambda buffer, n, value, top: buffer[:, n].copy_(value.data.mul_(2))),
        ap_backward, r"value.*in place")
ap_case("ap_prefix", writing(lambda buffer, n, value, top: buffer[:, : n + 1].copy_(
    torch.cat([top, value[:, None]], 1))), ap_backward, r"old slots.*buffer\[:, n\]")
ap_case("ap_cat", ap_cat_forward, ap_backward, r"copy.*not a view of the buffer")
ap_case("ap_clone", ap_clone_forward, ap_backward, r"copy.*not a view of the buffer")


# --- 04 Exercise 3, value_gradients
def vg_into_input(read_grads):  # accumulates into the last read
    total = read_grads[-1]
    for g in read_grads[:-1]:
        total[: g.size(0)] += g
    return total


case("vg_into_input", check_value_gradients, vg_into_input, r"in place")


# --- 04 Exercise 5, weight_gradient
def wg_dot_t(xs, gs):  # .T on 3-D tensors reverses all axes
    return gs.T @ xs


def wg_first(xs, gs):  # the first step only
    return gs[0].T @ xs[0]


def wg_bmm_no_sum(xs, gs):  # one product per step, not summed
    return torch.bmm(gs.transpose(1, 2), xs)


def wg_no_batch_sum(xs, gs):  # one product per example
    return torch.einsum("tbo,tbi->boi", gs, xs)


def wg_outer_sums(xs, gs):  # the product of the sums
    return gs.sum((0, 1))[:, None] * xs.sum((0, 1))[None]


def wg_sum_steps(xs, gs):  # summed over the steps before the product
    return gs.sum(0).T @ xs.sum(0)


def wg_sum_batch(xs, gs):  # summed over the batch before the product
    return gs.sum(1).T @ xs.sum(1)


def wg_view_numbers(xs, gs):  # sizes as numbers
    return gs.view(10, 4).T @ xs.view(10, 3)


def wg_view_width(xs, gs):  # D_out as a number
    return gs.view(-1, 4).T @ xs.view(-1, xs.size(-1))


case("wg_dot_t", check_weight_gradient, wg_dot_t,
     r"\.T on a 3-D tensor reverses all.*gs\.flatten\(0, 1\)\.T @ xs\.flatten\(0, 1\)")
case("wg_first", check_weight_gradient, wg_first, r"first step")
case("wg_bmm_no_sum", check_weight_gradient, wg_bmm_no_sum, r"per step")
case("wg_no_batch_sum", check_weight_gradient, wg_no_batch_sum, r"per example")
case("wg_outer_sums", check_weight_gradient, wg_outer_sums, r"product of the sums")
case("wg_sum_steps", check_weight_gradient, wg_sum_steps, r"summed over the steps.*cross terms")
case("wg_sum_batch", check_weight_gradient, wg_sum_batch, r"summed over the batch.*cross terms")
case("wg_view_numbers", check_weight_gradient, wg_view_numbers, r"check's sizes")
case("wg_view_width", check_weight_gradient, wg_view_width, r"check's sizes")


test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)

# The trial counted 70 characters more than the message itself (what the notebook shows
# around it): the messages it found over 400 stay under 330 here.
COUNTED = ["ap_cat", "ap_clone", "ap_top_long", "ap_value_keepdim", "ap_value_inplace",
           "ap_prefix", "kv_float_modules", "vg_into_input", "wg_bmm_no_sum",
           "wg_no_batch_sum", "wg_sum_steps", "wg_sum_batch", "wg_outer_sums",
           "wg_view_numbers", "wg_view_width"]


@pytest.mark.parametrize("tag", COUNTED)
def test_message_fits_as_the_trial_counted(tag):
    check, fns, _ = CASES[tag]
    with pytest.raises(ExerciseFailed) as info:
        check(*fns)
    assert len(str(info.value)) + 70 < 400, str(info.value)
