"""Python slips behind a crash, named for every exercise from the error and the expression
that raised it: a size computed with `/` (a float), a tuple such as `ctx.saved_tensors`
used as a tensor, a method used without its call (`t.element_size`), a reduction that
drops the axis the other operand still has (`.sum(-1)` without `keepdim=True`), `and` /
`or` between tensor comparisons, an assignment through two subscripts (`x[i][j] = v`,
which writes into a copy), and those of `operator_slips`.

The expression is read from the learner's own frame in the traceback (the columns Python
3.11 records for each instruction, as in the `^^^^` of a traceback). Only plain names,
attributes and constant subscripts of it are evaluated, plus, to confirm a reduction's
fix, calls of tensor methods and torch functions that do not work in place. A hint is
given only when the error and those values make it certain; otherwise `name_python_slip`
returns and the learner's own error is raised.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import os
import re
import sysconfig
import types

import torch

from labnn.exercises.grading.expressions import OPS, evaluate, plain_value
from labnn.exercises.grading.operator_slips import (BEFORE, and_or_precedence, axis_dropped_earlier,
                                                   axis_from_front, bmm_on_4d,
                                                   bool_subtraction, index_put_dtype,
                                                   requires_grad_on_result, tensor_not)
from labnn.exercises.grading.outcomes import fail, first_line

_SKIP = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, __import__("labnn")))
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_REDUCTIONS = {"sum", "mean", "any", "all", "amax", "amin", "logsumexp", "prod", "norm",
               "std", "var", "count_nonzero", "nansum", "nanmean"}


def name_python_slip(err: Exception) -> None:
    """Fail with a hint when the expression that raised `err` shows a known Python slip;
    otherwise return."""
    site = _failing_site(err)
    if site is None:
        return
    node, env = site
    for hint in (_float_size, _tuple_or_method_operand, _dropped_axis, axis_dropped_earlier,
                 _tensor_and_or, _int_for_tensor, _weight_not_transposed, _builtin_max_min,
                 _chained_store, and_or_precedence, requires_grad_on_result, bmm_on_4d,
                 bool_subtraction, axis_from_front, tensor_not, index_put_dtype):
        message = hint(err, node, env)
        if message:
            fail(message)


def other_exercise(what: str, err: Exception) -> None:
    """Fail when the learner's function that refused the check's arguments (TypeError)
    bears another exercise's name than the call `what` (`weight_gradient` handed to the
    check of `value_gradients`, `Append` to `Square`'s): a cell's answer checked by another."""
    said = re.match(r"(\w+)(\.forward)?\(\) (?:takes|missing|got)", str(err))
    want, tb = re.match(r"(\w+)[.(]", what), err.__traceback__  # `what` opens with the call
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    inner = tb.tb_frame.f_code.co_filename if tb else ""  # the call, not one in the answer
    if (isinstance(err, TypeError) and said and want and inner.startswith(_SKIP)
            and said[1] != want[1] and (not said[2] or ".apply(" in what)):  # a Function's
        fail(f"this check calls {want[1]}, but it was handed {said[1]}, which refused the "
             f"arguments ({first_line(err)}): the answer of another exercise? Hand the check "
             "the function (or class) of its own cell.")


def _failing_site(err: Exception) -> tuple[ast.expr, dict] | None:
    """The expression (parsed) of the innermost learner frame of `err`'s traceback that
    was running when it raised, and that frame's names; None when unknown."""
    tb, found = err.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith(_STDLIB):
            found = tb
        tb = tb.tb_next
    if found is None:
        return None
    code, frame = found.tb_frame.f_code, found.tb_frame
    try:
        positions = list(code.co_positions())[found.tb_lasti // 2]
        line, end, col, end_col = positions
        lines = linecache.getlines(code.co_filename, frame.f_globals)[line - 1:end]
        text = [s.encode() for s in lines]
        before = text[0][:col].decode()  # what the line holds before it: `f(` for an argument
        text[-1] = text[-1][:end_col]  # first the end: the two may be one line
        text[0] = text[0][col:]
        segment = b"".join(text).decode()
        node = ast.parse(f"({segment})", mode="eval").body
    except Exception:  # no source (a REPL line), no positions, or not an expression
        return None
    env = {**vars(builtins), **frame.f_globals, **frame.f_locals, BEFORE: before}
    return node, env


def _float_size(err: Exception, node: ast.expr, env: dict) -> str | None:
    """A float handed where torch or Python wants an int (a size, a count, an index):
    an argument (or index) that is `a / b`, or a name that holds a float."""
    said = str(err)
    if not isinstance(err, TypeError) or "float" not in said or not (
            "int" in said or "slice indices" in said):
        return None
    if isinstance(node, ast.Call):
        args = [*node.args, *(k.value for k in node.keywords)]
    elif isinstance(node, ast.Subscript):
        args = [node.slice]
    else:
        return None
    args = [e for a in args for e in _parts(a)]
    for arg in args:
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div):
            fix = ast.unparse(ast.BinOp(arg.left, ast.FloorDiv(), arg.right))
            return (f"`{ast.unparse(arg)}` is a float: `/` is true division, it gives a "
                    "float even when the division is exact (24 / 4 = 6.0), and sizes, "
                    f"counts and indices must be ints: use integer division, `{fix}`.")
    for arg in args:
        value = plain_value(arg, env) if isinstance(arg, (ast.Name, ast.Attribute)) else None
        if isinstance(value, float):
            return (f"`{ast.unparse(arg)}` is a float ({value!r}), where an int is needed "
                    "(a size, a count or an index): compute it as an int, e.g. `a // b` "
                    "rather than `a / b`.")
    return None


def _parts(node: ast.expr) -> list[ast.expr]:
    """`node`, or the elements of a tuple, list, slice or starred argument."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return [e for n in node.elts for e in _parts(n)]
    if isinstance(node, ast.Slice):
        return [n for n in (node.lower, node.upper, node.step) if n is not None]
    if isinstance(node, ast.Starred):
        return _parts(node.value)
    return [node]


def _tuple_or_method_operand(err: Exception, node: ast.expr, env: dict) -> str | None:
    """An operand of arithmetic that is a tuple (or list) of tensors, such as
    `ctx.saved_tensors`, or a method not called, such as `t.element_size`."""
    if not isinstance(err, TypeError):
        return None
    for operand in _operands(node):
        value = plain_value(operand, env)
        expr = ast.unparse(operand)
        if (isinstance(value, (tuple, list)) and value
                and all(isinstance(v, torch.Tensor) for v in value)):
            kind, n = type(value).__name__, len(value)
            names = ", ".join("xyzuvw"[i % 6] for i in range(n)) + "," * (n == 1)
            return (f"`{expr}` is a {kind} of {n} tensor{'s' * (n > 1)}, not a tensor: "
                    f"unpack it first, `{names} = {expr}`, then compute with the "
                    f"tensor{'s' * (n > 1)}.")
        if isinstance(operand, ast.Attribute) and isinstance(value, (
                types.MethodType, types.BuiltinMethodType, types.MethodWrapperType)):
            return (f"`{expr}` is a method, not its value: call it, `{expr}()`.")
    return None


def _operands(node: ast.expr) -> list[ast.expr]:
    """The operands of the arithmetic in `node` (not inside a call: a call that returned
    did not raise), innermost last."""
    if isinstance(node, ast.BinOp):
        return [*_operands(node.left), node.left, *_operands(node.right), node.right]
    if isinstance(node, ast.UnaryOp):
        return [*_operands(node.operand), node.operand]
    return []


def _dropped_axis(err: Exception, node: ast.expr, env: dict) -> str | None:
    """A broadcast error in `a op b` where one operand is a reduction along a dim without
    `keepdim=True`, and the same expression with `keepdim=True` runs."""
    if not isinstance(err, RuntimeError) or "must match the size" not in str(err):
        return None
    if not isinstance(node, ast.BinOp) or node.op.__class__ not in OPS:
        return None
    for side in ("left", "right"):
        call = getattr(node, side)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in _REDUCTIONS and (call.args or call.keywords)
                and all(k.arg != "keepdim" for k in call.keywords)):
            continue
        kept = ast.Call(call.func, call.args,
                        [*call.keywords, ast.keyword("keepdim", ast.Constant(True))])
        fixed = ast.BinOp(**{**vars(node), side: kept})
        try:
            with torch.no_grad():
                evaluate(fixed, env, calls=True)
        except Exception:
            continue
        other = ast.unparse(getattr(node, "right" if side == "left" else "left"))
        return (f"`{ast.unparse(call)}` drops the reduced axis, so it no longer lines up "
                f"with `{other}` (torch: {str(err).splitlines()[0]}): keep the axis, "
                f"`{ast.unparse(kept)}`.")
    return None


def _tensor_and_or(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`a and b` (or `or`) on comparisons of tensors: Python asks one truth of a whole
    tensor (other operands, e.g. `mask and ...` meant as `is not None`, are left alone)."""
    if not (isinstance(err, RuntimeError) and isinstance(node, ast.BoolOp)
            and "Boolean value of Tensor" in str(err)
            and all(isinstance(v, ast.Compare) for v in node.values)):
        return None
    word, op = ("and", "&") if isinstance(node.op, ast.And) else ("or", "|")
    fixed = f" {op} ".join(f"({ast.unparse(v)})" for v in node.values)
    return (f"`{word}` asks one truth of a whole tensor (ambiguous); combine tensors "
            f"elementwise with {op}, each side in parentheses: `{fixed}`.")


_MATH = {"sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tanh"}  # math has them too


def _int_for_tensor(err: Exception, node: ast.expr, env: dict) -> str | None:
    """An int (a size such as `t`) handed to a torch function that wants a tensor, e.g.
    `torch.tril(t)`: torch says "must be Tensor, not int"."""
    if not isinstance(err, TypeError) or "must be Tensor, not int" not in str(err):
        return None
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            value = plain_value(arg, env)
            if isinstance(value, int) and not isinstance(value, bool):
                a, func = ast.unparse(arg), ast.unparse(call.func)
                if func.split(".")[-1] in _MATH:  # a number's function, not a size's tensor
                    name = func.split(".")[-1]
                    root = f" or {a} ** 0.5" if name == "sqrt" else ""
                    return (f"`{a}` is a Python int ({value}), but `{func}` takes tensors: "
                            f"use math.{name}({a}){root}.")
                return (f"`{a}` is an int ({value}), but `{func}` needs a tensor: "
                        f"build one from it first, e.g. `torch.ones({a}, {a}, "
                        f"dtype=torch.bool)` (a [{a}, {a}] square of True) or "
                        f"`torch.arange({a})`, then apply `{func}` to that tensor.")
    return None


def _weight_not_transposed(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`x @ layer.weight` with `layer` an `nn.Linear`: its weight is `[out, in]`, so the
    product fails where `x @ layer.weight.T` (what `layer(x)` computes) runs."""
    if not isinstance(err, RuntimeError) or "cannot be multiplied" not in str(err):
        return None
    for op in ast.walk(node):
        if not (isinstance(op, ast.BinOp) and isinstance(op.op, ast.MatMult)
                and isinstance(op.right, ast.Attribute) and op.right.attr == "weight"):
            continue
        layer = plain_value(op.right.value, env)
        try:
            with torch.no_grad():
                width = evaluate(op.left, env, calls=True).shape[-1]
        except Exception:  # a call of a module (`norm(m) @ kv.weight`): torch's own shapes
            said = re.search(r"\(\d+x(\d+) and \d+x\d+\)", str(err))
            width = int(said[1]) if said else None
        if isinstance(layer, torch.nn.Linear) and width == layer.in_features:
            x, name = ast.unparse(op.left), ast.unparse(op.right.value)
            return (f"`{ast.unparse(op)}` fails: a Linear's weight is [out_features, "
                    f"in_features] = [{layer.out_features}, {layer.in_features}]; call "
                    f"`{name}({x})` (it computes {x} @ weight.T + bias).")
    return None


def _builtin_max_min(err: Exception, node: ast.expr, env: dict) -> str | None:
    """Python's `max(x, 0)` (or `min`) on a tensor `x`: it asks one truth of `x > 0`."""
    if not (isinstance(err, RuntimeError) and "Boolean value of Tensor" in str(err)):
        return None
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        name = call.func.id if isinstance(call.func, ast.Name) else None
        if name not in ("max", "min") or env.get(name) is not getattr(builtins, name):
            continue
        try:
            with torch.no_grad():
                values = [evaluate(a, env, calls=True) for a in call.args]
        except Exception:
            continue
        if any(isinstance(v, torch.Tensor) for v in values):
            bound, fn = ("min", "maximum") if name == "max" else ("max", "minimum")
            c = next((v for v in values if isinstance(v, (int, float))), 0)
            return (f"Python's {name}() compares the whole tensor with {c} (ambiguous): use "
                    f"torch.clamp(x, {bound}={c}) or x.clamp({bound}={c}) (elementwise), or "
                    f"torch.{fn}.")
    return None


def _chained_store(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`x[i][j] = v`: the first subscript with a tensor (or list) index makes a copy, and
    the assignment writes into that copy; here the shapes did not even fit."""
    if not (isinstance(err, RuntimeError) and "cannot be broadcast to indexing result"
            in str(err) and isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Subscript)):
        return None
    outer, inner = node, node.value
    first, second = ast.unparse(inner.slice), ast.unparse(outer.slice)
    base = ast.unparse(inner.value)
    return (f"{ast.unparse(node)} = ... indexes twice: {base}[{first}] with a tensor index "
            f"is a new tensor (a copy), so the assignment would write into the copy, never "
            f"into {base}. Index once, with both indices: {base}[{first}, {second}] = ... "
            f"(torch said: {str(err).strip().splitlines()[0]})")
