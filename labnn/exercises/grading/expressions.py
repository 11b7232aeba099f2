"""The values of the learner's expression, read back from the frame that raised: what the
crash hints of `python_slips` and `operator_slips` check before they name a slip.

`plain_value` reads names, attributes (not private), constants and constant subscripts, and
calls nothing; `evaluate(..., calls=True)` also runs arithmetic, single comparisons and calls
of tensor methods and torch functions that do not work in place, to confirm that a fix runs.
"""

from __future__ import annotations

import ast
import operator
import types

import torch

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
       ast.Pow: operator.pow, ast.MatMult: operator.matmul, ast.BitAnd: operator.and_,
       ast.BitOr: operator.or_}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}
_UNSAFE = {"backward", "register_hook", "retain_grad", "numpy", "tolist", "item"}


def plain_value(node: ast.expr, env: dict):
    """The value of a name, attribute or constant subscript, without calling anything
    (None when `node` is anything else or cannot be evaluated)."""
    try:
        return evaluate(node, env, calls=False)
    except Exception:
        return None


def evaluate(node: ast.expr, env: dict, calls: bool):
    """Evaluate a side-effect-free expression: names, attributes (not private),
    constants, subscripts, arithmetic and, with `calls`, single comparisons and calls of
    tensor methods and torch functions that do not work in place; anything else raises
    `ValueError`."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
        return getattr(evaluate(node.value, env, calls), node.attr)
    if isinstance(node, ast.Subscript):
        index = evaluate(node.slice, env, calls)
        return evaluate(node.value, env, calls)[index]
    if isinstance(node, ast.Slice):
        return slice(*(None if n is None else evaluate(n, env, calls)
                       for n in (node.lower, node.upper, node.step)))
    if isinstance(node, ast.Tuple):
        return tuple(evaluate(e, env, calls) for e in node.elts)
    if calls and isinstance(node, ast.BinOp) and node.op.__class__ in OPS:
        return OPS[node.op.__class__](evaluate(node.left, env, calls),
                                      evaluate(node.right, env, calls))
    if (calls and isinstance(node, ast.Compare) and len(node.ops) == 1
            and node.ops[0].__class__ in _COMPARE):  # one comparison: no truth asked
        return _COMPARE[node.ops[0].__class__](evaluate(node.left, env, calls),
                                               evaluate(node.comparators[0], env, calls))
    if calls and isinstance(node, ast.UnaryOp) and node.op.__class__ in _UNARY:
        return _UNARY[node.op.__class__](evaluate(node.operand, env, calls))
    if calls and isinstance(node, ast.Call) and _pure(node, env):
        return evaluate(node.func, env, calls)(
            *(evaluate(a, env, calls) for a in node.args),
            **{k.arg: evaluate(k.value, env, calls) for k in node.keywords})
    raise ValueError(f"not evaluated: {ast.unparse(node)}")


def _pure(node: ast.Call, env: dict) -> bool:
    """Whether `node` calls a tensor method or a torch function that does not work in
    place (no trailing `_`, no `out=`), with no `*args` or `**kwargs`."""
    func = node.func
    if (not isinstance(func, ast.Attribute) or func.attr.endswith("_")
            or func.attr in _UNSAFE or any(k.arg in (None, "out") for k in node.keywords)
            or any(isinstance(a, ast.Starred) for a in node.args)):
        return False
    owner = evaluate(func.value, env, calls=True)
    if owner is torch:  # torch's own operators only (not torch.save, torch.manual_seed)
        return isinstance(getattr(torch, func.attr, None), types.BuiltinFunctionType)
    return isinstance(owner, torch.Tensor) or owner is torch.nn.functional
