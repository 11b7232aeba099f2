"""Crash hints `python_slips` adds for every exercise, read from the failing expression:
`&` / `|` between comparisons without parentheses (a chained comparison), and
`requires_grad_(False)` on a computed tensor where `.detach()` was meant, `torch.bmm` on
4-D tensors, `1 - mask` on a bool mask, `q.size(3)` on a 3-D tensor, and an operand kept
in a name that lacks an axis of the other (`den = e.sum(-1)`, then `e / den`), and
Python's `not` on a tensor where `~` was meant (`not mask`), and `x[i, j] = v` with `v` of
another dtype than `x` (an indexed write does not convert).
"""

from __future__ import annotations

import ast
import re

import torch

from labnn.exercises.grading.expressions import OPS, evaluate, plain_value


def and_or_precedence(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`a >= b & c <= d`: `&` (or `|`) binds tighter than comparisons, so Python reads the
    chained comparison `a >= (b & c) <= d`, which asks one truth of a whole tensor."""
    if not (isinstance(err, RuntimeError) and "Boolean value of Tensor" in str(err)):
        return None
    for cmp in (n for n in ast.walk(node) if isinstance(n, ast.Compare)):
        sides = [cmp.left, *cmp.comparators]
        bits = [k for k, s in enumerate(sides) if isinstance(s, ast.BinOp)
                and isinstance(s.op, (ast.BitAnd, ast.BitOr))]
        if len(cmp.ops) < 2 or not bits:
            continue
        op = "&" if isinstance(sides[bits[0]].op, ast.BitAnd) else "|"
        fix = ""
        if len(cmp.ops) == 2 and bits == [1]:
            mid = sides[1]
            fix = (f": `({ast.unparse(ast.Compare(cmp.left, cmp.ops[:1], [mid.left]))}) {op} "
                   f"({ast.unparse(ast.Compare(mid.right, cmp.ops[1:], sides[2:]))})`")
        return (f"`{op}` binds tighter than `>=`/`<=`: `a >= b {op} c <= d` is read as "
                f"`a >= (b {op} c) <= d`; put each comparison in parentheses, "
                f"`(a >= b) {op} (c <= d)`{fix}.")
    return None


def requires_grad_on_result(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`x.requires_grad_(False)` on a tensor computed in the graph: torch refuses it (only
    leaves' flags change); `.detach()` is what cuts a computed tensor from the graph."""
    if not (isinstance(err, RuntimeError)
            and "can only change requires_grad flags of leaf variables" in str(err)):
        return None
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_":
            x = ast.unparse(call.func.value)
            return ("x.requires_grad_(False) only works on a leaf tensor; a computed tensor "
                    "is cut from the graph with .detach(), which returns a new tensor: "
                    f"`{x}.detach()`.")
    return None


def bmm_on_4d(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`torch.bmm` (or `baddbmm`) on 4-D heads: torch says "must be a 3D tensor"."""
    if not (isinstance(err, RuntimeError) and "must be a 3D tensor" in str(err)):
        return None
    if not any(isinstance(n, ast.Attribute) and n.attr in ("bmm", "baddbmm")
               for n in ast.walk(node)):
        return None
    return ("torch.bmm takes 3-D tensors only; on 4-D heads use q @ k.transpose(-2, -1) "
            "(torch.matmul broadcasts over any leading axes).")


def bool_subtraction(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`1 - mask` on a bool mask: torch refuses to subtract booleans."""
    said = str(err)
    if not (isinstance(err, RuntimeError) and "Subtraction" in said and "bool" in said):
        return None
    for op in (n for n in ast.walk(node) if isinstance(n, ast.BinOp)):
        if not isinstance(op.op, ast.Sub):
            continue
        for side in (op.left, op.right):
            value = plain_value(side, env)
            if getattr(value, "dtype", None) == torch.bool:
                m = ast.unparse(side)
                return (f"`{ast.unparse(op)}` on a bool mask: torch does not subtract "
                        f"booleans; invert it with ~{m} (True = may attend becomes "
                        "True = masked).")
    return None


def axis_from_front(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`q.size(3)` / `q.shape[3]` on a tensor with fewer axes: an axis counted from the
    front (written for 4-D heads) where the check also passes fewer axes."""
    said = str(err)
    if not (isinstance(err, IndexError) and ("Dimension out of range" in said
                                              or "tuple index out of range" in said)):
        return None
    for n in ast.walk(node):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "size" and len(n.args) == 1):
            obj, arg = n.func.value, n.args[0]
        elif (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute)
              and n.value.attr == "shape"):
            obj, arg = n.value.value, n.slice
        else:
            continue
        if not (isinstance(arg, ast.Constant) and type(arg.value) is int and arg.value > 0):
            continue
        t = plain_value(obj, env)
        if isinstance(t, torch.Tensor) and arg.value >= t.dim():
            fix = ast.unparse(obj) + (".size(-1)" if isinstance(n, ast.Call) else ".shape[-1]")
            return (f"{ast.unparse(n)} assumes {arg.value + 1}-D input (heads); the check also "
                    f"passes {t.dim()}-D {list(t.shape)}: count axes from the end, e.g. {fix} "
                    "for the last one.")
    return None


def axis_dropped_earlier(err: Exception, node: ast.expr, env: dict) -> str | None:
    """A broadcast error in `a op b` where `b`'s value (a name, or an expression of one,
    e.g. `den` from `den = e.sum(-1)` a line before) has `a`'s shape without one axis, as
    a reduction without `keepdim=True` leaves it, and `a op b.unsqueeze(axis)` runs."""
    if not (isinstance(err, RuntimeError) and "must match the size" in str(err)
            and isinstance(node, ast.BinOp) and node.op.__class__ in OPS):
        return None
    try:
        with torch.no_grad():
            sides = evaluate(node.left, env, calls=True), evaluate(node.right, env, calls=True)
    except Exception:
        return None
    if not all(isinstance(t, torch.Tensor) for t in sides):
        return None
    op = OPS[node.op.__class__]
    for short, full in ((1, 0), (0, 1)):
        a, b = sides[full], sides[short]
        if b.dim() != a.dim() - 1:
            continue
        for axis in range(a.dim() - 1, -1, -1):  # the last axis first: a softmax's sum
            if a.shape[:axis] + a.shape[axis + 1:] != b.shape:
                continue
            args = (a, b.unsqueeze(axis)) if full == 0 else (b.unsqueeze(axis), a)
            try:
                with torch.no_grad():
                    op(*args)
            except Exception:
                continue
            name, other = ast.unparse((node.left, node.right)[short]), ast.unparse(
                (node.left, node.right)[full])
            where = "its last axis" if axis == a.dim() - 1 else f"its axis {axis}"
            return (f"`{name}` has shape {list(b.shape)}: `{other}` {list(a.shape)} without "
                    f"{where}, as a reduction without keepdim=True leaves it (torch: "
                    f"{str(err).splitlines()[0]}): reduce with keepdim=True, e.g. "
                    f".sum(-1, keepdim=True), .amax(-1, keepdim=True).")
    return None


BEFORE = "<before>"  # the key of the failing line's text before the expression, in `env`


def tensor_not(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`not mask` (or `not (j > i)`) on a tensor of several values: Python asks one truth
    of the whole tensor, where `~` inverts each entry. `not name` alone is named only as a
    call's argument (`f(not mask)`): as a condition (`x if not mem else y`) it is the test
    of an optional argument that `grading.slips.truth_of_optional` names."""
    if not (isinstance(err, RuntimeError) and "Boolean value of Tensor" in str(err)):
        return None
    argument = str(env.get(BEFORE, "")).rstrip().endswith(("(", ","))
    for op in (n for n in ast.walk(node)
               if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)
               and (argument or not isinstance(n.operand, ast.Name))):
        try:
            with torch.no_grad():
                value = evaluate(op.operand, env, calls=True)
        except Exception:
            continue
        if isinstance(value, torch.Tensor) and value.numel() > 1:
            x = ast.unparse(op.operand)
            x = x if isinstance(op.operand, (ast.Name, ast.Attribute, ast.Call)) else f"({x})"
            return (f"`{ast.unparse(op)}` asks one truth of a whole tensor ({value.numel()} "
                    f"values, ambiguous): Python's `not` does not work entry by entry; invert "
                    f"each entry with `~{x}` (or `{x}.logical_not()`).")
    return None


def index_put_dtype(err: Exception, node: ast.expr, env: dict) -> str | None:
    """`x[rows, cols] = v` (index_put_) with `v` of another dtype than `x`: an indexed write
    with tensor indices does not convert, where `x[rows, cols] = 3` would."""
    got = re.search(r"dtypes match, got (\w+) for the destination and (\w+) for the source",
                    str(err))
    if not isinstance(err, RuntimeError) or got is None:
        return None
    store = isinstance(node, ast.Subscript)
    what = f"`{ast.unparse(node)} = ...`" if store else "index_put_"
    x = ast.unparse(node.value) if store else "x"
    return (f"{what} writes {got[2]} values into a {got[1]} tensor: a write through tensor "
            "indices (index_put_) does not convert dtypes. Write values of the destination's "
            f"dtype: leave out the cast, or convert them with .to({x}.dtype).")
