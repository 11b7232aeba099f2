"""Trial 51b: a blind learner trial of notebook 04's five exercises.

Wrong answers that passed: a weight gradient summed by `torch.addbmm` (a product per step,
the batched `bmm` then a sum the notebook refuses) or computed entry by entry (an elementwise
product and a sum, or a `dot`, for each of the D_out·D_in entries); an `Append` that writes
every slot from n on at each push (clearing or filling the rest) or copies the whole buffer
back (`buffer.copy_(new)`), work of O(C) per push; an `Append` whose first push returns
`value.unsqueeze(1)`, not a view of the buffer; a backward returning float64 gradients for
float32 inputs (autograd casts them back). Messages: in IPython, where a class defined in a
cell has no source, a `.squeeze()` in `Square` or `Append` was blamed on sizes written as
numbers, with torch's error cut mid-word; an `Append.forward` with `.squeeze()` and a weight
gradient reshaped to the batch size's width escaped with torch's raw errors; a width written
as a number (`gs.reshape(-1, 3)`) was told it was `xs.size(-1)`.
"""
import linecache

import pytest
import torch
import torch.nn.functional as F
from checker_helpers import trial_case, trial_tests

from labnn.exercises.grading import ExerciseFailed
from labnn.exercises.kv_sharing_stack import check_append, check_square, check_weight_gradient

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
PRODUCTS = r"one (matrix )?product"
ENTRIES = r"entry by entry"


# ---- Exercise 5: weight_gradient ----
def wg_addbmm(xs, gs):
    return torch.addbmm(xs.new_zeros(gs.shape[-1], xs.shape[-1]), gs.transpose(1, 2), xs)


def wg_entry_loop(xs, gs):
    return torch.stack([torch.stack([(gs[..., o] * xs[..., i]).sum()
                                     for i in range(xs.shape[-1])])
                        for o in range(gs.shape[-1])])


def wg_entry_dot(xs, gs):
    g, x = gs.flatten(0, 1), xs.flatten(0, 1)
    return torch.stack([torch.stack([g[:, o] @ x[:, i] for i in range(x.shape[-1])])
                        for o in range(g.shape[-1])])


def wg_linear_per_step(xs, gs):
    return sum(F.linear(gs[t].T, xs[t].T) for t in range(xs.shape[0]))


def wg_addmv_per_column(xs, gs):
    g, x = gs.flatten(0, 1), xs.flatten(0, 1)
    return torch.stack([torch.addmv(g.new_zeros(g.shape[-1]), g.T, x[:, i])
                        for i in range(x.shape[-1])], 1)


def wg_width_b(xs, gs):
    return gs.reshape(-1, gs.shape[1]).T @ xs.reshape(-1, xs.shape[1])


def wg_width_3(xs, gs):
    return gs.reshape(-1, 3).T @ xs.reshape(-1, 3)


case("wg_addbmm", check_weight_gradient, wg_addbmm, r"addbmm.*" + PRODUCTS)
case("wg_entry_loop", check_weight_gradient, wg_entry_loop, ENTRIES)
case("wg_entry_dot", check_weight_gradient, wg_entry_dot, ENTRIES)
case("wg_linear_per_step", check_weight_gradient, wg_linear_per_step, PRODUCTS)
case("wg_addmv_per_column", check_weight_gradient, wg_addmv_per_column, PRODUCTS)
case("wg_width_batch", check_weight_gradient, wg_width_b, r"batch size")
case("wg_width_number", check_weight_gradient, wg_width_3, r"number")
RIGHT["wg_linear_no_bias"] = (check_weight_gradient,
                              lambda xs, gs: F.linear(gs.flatten(0, 1).T, xs.flatten(0, 1).T))
RIGHT["wg_inner"] = (check_weight_gradient,
                     lambda xs, gs: torch.inner(gs.flatten(0, 1).T, xs.flatten(0, 1).T))
RIGHT["wg_multi_dot"] = (check_weight_gradient, lambda xs, gs: torch.linalg.multi_dot(
    [gs.flatten(0, 1).T, xs.flatten(0, 1)]))
RIGHT["wg_addbmm_one_batch"] = (check_weight_gradient, lambda xs, gs: torch.addbmm(
    xs.new_zeros(gs.shape[-1], xs.shape[-1]), gs.flatten(0, 1).T[None], xs.flatten(0, 1)[None]))


# ---- Exercise 4: Append ----
def _append(write, result=lambda buffer, value, n: buffer.data[:, : n + 1]):
    def forward(ctx, top, value, buffer):
        n = top.shape[1]
        ctx.n = n
        write(buffer, value, n)
        return result(buffer, value, n)

    def backward(ctx, grad):
        return grad[:, : ctx.n], grad[:, ctx.n], None
    return type("Append", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def _zero_tail(buffer, value, n):
    buffer.data[:, n:] = 0
    buffer.data[:, n] = value


def _fill_tail(buffer, value, n):
    buffer.data[:, n:] = value.unsqueeze(1)


def _copy_all(buffer, value, n):
    new = buffer.data.clone()
    new[:, n] = value
    buffer.data.copy_(new)


def _slot(buffer, value, n):
    buffer.data[:, n] = value


def _squeezed(buffer, value, n):
    return buffer.data[:, : n + 1].squeeze()


def _value_first(buffer, value, n):
    return value.unsqueeze(1) if n == 0 else buffer.data[:, : n + 1]


case("append_zeros_tail", check_append, _append(_zero_tail), r"slots? .*after n|n \+ 1")
case("append_fills_tail", check_append, _append(_fill_tail), r"slots? .*after n|n \+ 1")
case("append_copies_whole_buffer", check_append, _append(_copy_all), r"whole buffer")
case("append_forward_squeeze", check_append, _append(_slot, _squeezed), r"\.squeeze\(\)")
case("append_first_push_value_view", check_append, _append(_slot, _value_first),
     r"n = 0.*view of the buffer")
for tag, write in (
        ("select_copy", lambda b, v, n: b.data.select(1, n).copy_(v)),
        ("narrow_copy", lambda b, v, n: b.data.narrow(1, n, 1).copy_(v.unsqueeze(1))),
        ("slice_setitem", lambda b, v, n: b.data.__setitem__((slice(None), slice(n, n + 1)),
                                                             v[:, None])),
        ("index_copy", lambda b, v, n: b.data.index_copy_(
            1, torch.tensor([n], device=b.device), v.unsqueeze(1))),
        ("advanced_index", lambda b, v, n: b.data.__setitem__(
            (torch.arange(b.shape[0], device=b.device), n), v)),
        ("no_data", lambda b, v, n: b[:, n].copy_(v))):
    RIGHT[f"append_{tag}"] = (check_append, _append(write))


# ---- float64 gradients for float32 inputs (Exercises 2 and 4) ----
def _square_double(ctx, x):
    ctx.save_for_backward(x)
    return x * x


SquareDouble = type("Square", (torch.autograd.Function,), {
    "forward": staticmethod(_square_double),
    "backward": staticmethod(lambda ctx, g: (2 * ctx.saved_tensors[0] * g).double())})
AppendDouble = _append(_slot)
AppendDouble.backward = staticmethod(lambda ctx, g: (g[:, : ctx.n].double(),
                                                     g[:, ctx.n].double(), None))
case("square_backward_double", check_square, SquareDouble, r"float64.*\.double\(\)")
case("append_backward_double", check_append, AppendDouble, r"float64.*\.double\(\)")


# ---- M1: IPython, where a class defined in a cell has no source ----
def _cell_class(source: str, name: str):
    """A class as an IPython cell defines it: its functions' source registered in linecache
    under the cell's fake filename, the class's own `inspect.getsource` failing."""
    filename = f"<ipython-input-51b-{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    space = {"torch": torch, "__name__": "__ipython_cell_51b__"}
    exec(compile(source, filename, "exec"), space)
    return space[name]


_CELL = """
class {name}(torch.autograd.Function):
    @staticmethod
    def forward(ctx, {args}):
        {forward}
    @staticmethod
    def backward(ctx, grad):
        {backward}
"""
_APPEND = dict(args="top, value, buffer", forward="n = top.shape[1]; ctx.n = n; "
               "buffer.data[:, n] = value; return buffer.data[:, :n + 1]")
_SQUARE = dict(args="x", forward="ctx.save_for_backward(x); return x * x")
IPY = {
    "AppendBackSqueeze": dict(_APPEND, backward="return grad[:, :-1], grad[:, -1:].squeeze(), "
                              "None"),
    "AppendIndexSqueeze": dict(_APPEND, backward="return grad[:, :-1], grad[:, -1].squeeze(), "
                               "None"),
    "SquareBackSqueeze": dict(_SQUARE, backward="return (2 * ctx.saved_tensors[0] * grad)"
                              ".squeeze()"),
    "SquareForwardSqueeze": dict(_SQUARE, forward="ctx.save_for_backward(x); return (x * x)"
                                 ".squeeze()", backward="return 2 * ctx.saved_tensors[0] * "
                                 "grad.view_as(ctx.saved_tensors[0])"),
}
for name, parts in IPY.items():
    check = check_append if name.startswith("Append") else check_square
    case(f"ipython_{name}", check, _cell_class(_CELL.format(name=name, **parts), name),
         r"\.squeeze\(\) with no dim")
RIGHT["ipython_square"] = (check_square, _cell_class(_CELL.format(
    name="SquareRight", backward="return 2 * ctx.saved_tensors[0] * grad", **_SQUARE),
    "SquareRight"))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


def test_cell_class_has_no_source():
    """The simulation holds: the class's source is missing, its functions' is not."""
    import inspect
    cls = CASES["ipython_SquareBackSqueeze"][1][0]
    with pytest.raises((OSError, TypeError)):
        inspect.getsource(cls)
    assert ".squeeze(" in inspect.getsource(cls.backward)


def test_torch_error_quoted_whole_words():
    """A quoted torch error keeps its useful part (the two shapes) and is cut, if at all, at
    a word boundary, never mid-word ("... - got )")."""
    said = ("Function SquareBackward returned an invalid gradient at index 0 - got [3] but "
            "expected shape compatible with [1, 3]")

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            if g.shape[0] == 1:
                raise RuntimeError(said)
            return 2 * ctx.saved_tensors[0] * g

    with pytest.raises(ExerciseFailed) as info:
        check_square(Square)
    message = str(info.value)
    quote = message.split("raised RuntimeError (", 1)[1].split("):", 1)[0]
    assert "[1, 3]" in quote, message
    kept = quote.removesuffix("…").rstrip()
    assert kept in said and (said.endswith(kept) or said[said.index(kept) + len(kept)] == " "
                             ), message
