"""Crash hints `python_slips` adds for every exercise, read from the failing expression:
`&` / `|` between comparisons without parentheses (a chained comparison), and
`requires_grad_(False)` on a computed tensor where `.detach()` was meant.
"""

from __future__ import annotations

import ast


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
