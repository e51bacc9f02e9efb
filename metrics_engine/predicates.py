"""Predicate expressions of WHERE and RATIO: canonical text and compilation to a closure.

An expression is a nested tuple, e.g. ``("cmp", "=", ("field", "channel"), ("lit", "cnp"))``.
``compile_expr`` turns it into ``f(event) -> value``; a predicate holds when the value is
truthy. SQL null rules, simplified: a missing field is ``None``; arithmetic or a comparison
with ``None`` gives ``None`` (false); comparing values of unrelated types is false.

>>> f = compile_expr(("cmp", ">", ("field", "amount"), ("lit", 100)))
>>> f({"amount": 150}), f({"amount": 50}), f({})
(True, False, None)
>>> render(("and", ("isnull", ("field", "ip")), ("in", ("field", "mcc"), (5411, 5812))))
'(ip IS NULL AND mcc IN (5411, 5812))'
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

Expr = tuple
Compiled = Callable[[Mapping[str, Any]], Any]

_CMP = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def _lit_text(v: Any) -> str:
    if v is None:
        return "NULL"
    if v is True:
        return "TRUE"
    if v is False:
        return "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(v)


def render(e: Expr | None) -> str:
    """Canonical text of an expression (fully parenthesised binary operators)."""
    if e is None:
        return ""
    tag = e[0]
    if tag == "lit":
        return _lit_text(e[1])
    if tag == "field":
        return e[1]
    if tag == "neg":
        return f"-{render(e[1])}"
    if tag in ("arith", "cmp"):
        return f"({render(e[2])} {e[1]} {render(e[3])})"
    if tag == "in":
        return f"{render(e[1])} IN ({', '.join(_lit_text(v) for v in e[2])})"
    if tag == "isnull":
        return f"{render(e[1])} IS NULL"
    if tag == "not":
        return f"NOT {render(e[1])}"
    if tag in ("and", "or"):
        return f"({render(e[1])} {tag.upper()} {render(e[2])})"
    raise ValueError(f"unknown expression node {tag!r}")


def compile_expr(e: Expr) -> Compiled:
    """Compile an expression into a closure over an event mapping."""
    tag = e[0]
    if tag == "lit":
        value = e[1]
        return lambda ev: value
    if tag == "field":
        name = e[1]
        return lambda ev: ev.get(name)
    if tag == "neg":
        inner = compile_expr(e[1])

        def neg(ev):
            v = inner(ev)
            return None if v is None else -v
        return neg
    if tag == "cmp":
        op = _CMP[e[1]]
        # Fast path for the common "field OP literal".
        if e[2][0] == "field" and e[3][0] == "lit" and e[3][1] is not None:
            name, lit = e[2][1], e[3][1]

            def cmp_field(ev):
                v = ev.get(name)
                if v is None:
                    return None
                try:
                    return op(v, lit)
                except TypeError:
                    return False
            return cmp_field
        left, right = compile_expr(e[2]), compile_expr(e[3])

        def cmp(ev):
            a, b = left(ev), right(ev)
            if a is None or b is None:
                return None
            try:
                return op(a, b)
            except TypeError:
                return False
        return cmp
    if tag == "arith":
        op = _ARITH[e[1]]
        left, right = compile_expr(e[2]), compile_expr(e[3])

        def arith(ev):
            a, b = left(ev), right(ev)
            if a is None or b is None:
                return None
            try:
                return op(a, b)
            except (TypeError, ZeroDivisionError):
                return None
        return arith
    if tag == "in":
        inner = compile_expr(e[1])
        values = frozenset(e[2])

        def in_(ev):
            v = inner(ev)
            if v is None:
                return None
            try:
                return v in values
            except TypeError:
                return False
        return in_
    if tag == "isnull":
        inner = compile_expr(e[1])
        return lambda ev: inner(ev) is None
    if tag == "not":
        inner = compile_expr(e[1])

        def not_(ev):
            v = inner(ev)
            return None if v is None else not v
        return not_
    if tag == "and":
        left, right = compile_expr(e[1]), compile_expr(e[2])
        return lambda ev: bool(left(ev)) and bool(right(ev))
    if tag == "or":
        left, right = compile_expr(e[1]), compile_expr(e[2])
        return lambda ev: bool(left(ev)) or bool(right(ev))
    raise ValueError(f"unknown expression node {tag!r}")
