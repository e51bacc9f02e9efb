"""Criteria evaluated in Python, without building a CEL activation, where that gives CEL's value.

Converting context values into CEL is most of a step's cost: the binding tries types in turn
and builds a Python exception for each miss (the W3 score node's activation of two doubles, a
string and an int: ~3.7 µs; its three criteria through CEL ~0.8; the same in Python ~1.8 with
reading and checking the variables). So a criterion made only of constructs whose CEL
semantics plain Python reproduces exactly on the values it is given is compiled here, at
publish, into a Python function; the step runs it on the node's flat variables and takes its
answer **only** when every value had a type and range where the two agree. Anything else (an
unusual value, a missing field, a type mix) gives :data:`UNSURE`, and the step evaluates the
node through CEL as before, from the start: a criterion is pure, so the answer is always CEL's.

The subset (anything outside it is not compiled: the criterion always goes through CEL):
flat field reads (``event.country``, ``metrics.x``, ``apps.n.outcome``); int, double, simple
string and bool literals; ``&&``, ``||`` (both operands evaluated, both must be bool), ``!``;
``< <= > >= == !=`` between two doubles, two ints, a double and an int of magnitude at most
2**53, two ASCII strings or two bools; ``in`` a list literal of strings or numbers;
``+ - * /`` on two finite doubles with a finite result (no division by zero); unary ``-`` on
a double or an int (but int64's least); ``double(x)`` of a double or an int of magnitude at
most 2**53. Values the step accepts: finite floats, ints within int64 (scores and metrics
read as doubles, as the activation converts them), ASCII strings, bools, None; a node holding
any other value in a variable it reads goes through CEL whole (its activation could fail).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from lark import Token, Tree

from workflows.activation import ReadPlan, StepContext, flat_values

UNSURE = object()  # the criterion's value is CEL's to tell
Fn = Callable[[Mapping[str, Any]], Any]  # flat variable name -> value; a value or UNSURE

_EXACT = 2 ** 53  # an int of at most this magnitude is the same number as a double
_INT_MIN, _INT_MAX = -(2 ** 63), 2 ** 63 - 1
_isfinite = math.isfinite


class _Unsupported(Exception):
    """The criterion uses a construct outside the subset: it is left to CEL."""


def compile_direct(tree: Tree, flat_names: Mapping[tuple[str, ...], str]) -> Fn | None:
    """A Python function giving the criterion's value or UNSURE; None when it is outside the
    subset. ``flat_names``: each record path the criterion reads -> its flat variable name.

    The function is generated source: one expression of calls to the helpers below (a tree
    of closures cost ~3x more per criterion). A helper given a value outside the subset
    raises ``_Unsure``, as a missing variable raises KeyError: both mean UNSURE."""
    constants: list[Any] = []
    try:
        expr = _source(tree, flat_names, constants)
    except _Unsupported:
        return None
    namespace: dict[str, Any] = {**_HELPERS, "UNSURE": UNSURE, "_Unsure": _Unsure}
    namespace.update({f"c{i}": c for i, c in enumerate(constants)})
    code = (f"def criterion(v):\n"
            f"    try:\n"
            f"        value = {expr}\n"
            f"    except (KeyError, ArithmeticError, _Unsure):\n"
            f"        return UNSURE\n"
            f"    return value if value is True or value is False else UNSURE\n")
    exec(compile(code, "<workflows.direct>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace["criterion"]


def direct_variables(plan: ReadPlan, ctx: StepContext) -> dict[str, Any] | None:
    """The node's flat variables as the activation would hold them (``flat_values``: the
    fields present, scores and metrics ints as doubles), or None when one of them is a
    value outside the subset: the node then goes through CEL whole, whose activation may
    fail on it (and fails every edge alike)."""
    variables: dict[str, Any] = {}
    try:
        for var, value, as_double in flat_values(plan, ctx):
            t = value.__class__
            if t is float:
                if not _isfinite(value):
                    return None
            elif t is str:
                if not value.isascii():
                    return None
            elif t is int:
                if not _INT_MIN <= value <= _INT_MAX:
                    return None
                if as_double:
                    value = float(value)  # a score of 85 reads as 85.0
            elif t is not bool and value is not None:
                return None
            variables[var] = value
    except Exception:  # noqa: BLE001 - odd context data: CEL's activation tells
        return None
    return variables


# ----------------------------------------------------------------------------- the helpers
# Every value reaching them is of the subset already: a variable checked by
# ``direct_variables``, a literal checked at compile time, or a result checked by them.
class _Unsure(Exception):
    """A value outside the subset: the criterion is CEL's to evaluate."""


_SAME = frozenset({float, int, str, bool})


def _comparable(a: Any, b: Any) -> None:
    ta, tb = a.__class__, b.__class__
    if ta is tb:
        if ta in _SAME:
            return
    elif (ta is float and tb is int and -_EXACT <= b <= _EXACT) or (
            ta is int and tb is float and -_EXACT <= a <= _EXACT):
        return
    raise _Unsure


def _lt(a: Any, b: Any) -> bool:
    if a.__class__ is not b.__class__ or a.__class__ not in _SAME:
        _comparable(a, b)
    return a < b


def _le(a: Any, b: Any) -> bool:
    if a.__class__ is not b.__class__ or a.__class__ not in _SAME:
        _comparable(a, b)
    return a <= b


def _gt(a: Any, b: Any) -> bool:
    if a.__class__ is not b.__class__ or a.__class__ not in _SAME:
        _comparable(a, b)
    return a > b


def _ge(a: Any, b: Any) -> bool:
    if a.__class__ is not b.__class__ or a.__class__ not in _SAME:
        _comparable(a, b)
    return a >= b


def _eq(a: Any, b: Any) -> bool:
    if a.__class__ is not b.__class__ or a.__class__ not in _SAME:
        _comparable(a, b)
    return a == b


def _ne(a: Any, b: Any) -> bool:
    if a.__class__ is not b.__class__ or a.__class__ not in _SAME:
        _comparable(a, b)
    return a != b


def _in(a: Any, members: tuple[Any, ...]) -> bool:
    for m in members:
        if a.__class__ is not m.__class__:
            _comparable(a, m)
    return a in members


def _bool(x: Any) -> bool:
    if x is True or x is False:
        return x
    raise _Unsure


def _or(a: Any, b: Any) -> bool:  # both evaluated: CEL's short-cut and error rules aside
    if (a is True or a is False) and (b is True or b is False):
        return a or b
    raise _Unsure


def _and(a: Any, b: Any) -> bool:
    if (a is True or a is False) and (b is True or b is False):
        return a and b
    raise _Unsure


def _not(a: Any) -> bool:
    if a is True:
        return False
    if a is False:
        return True
    raise _Unsure


def _neg(a: Any) -> Any:
    t = a.__class__
    if t is float or (t is int and _INT_MIN < a):  # -(int64's least) overflows
        return -a
    raise _Unsure


def _double(a: Any) -> float:
    t = a.__class__
    if t is float:
        return a
    if t is int and -_EXACT <= a <= _EXACT:
        return float(a)
    raise _Unsure


def _finite(r: float) -> float:
    if _isfinite(r):
        return r
    raise _Unsure


def _add(a: Any, b: Any) -> float:
    if a.__class__ is float and b.__class__ is float:  # ints (overflow), strings: CEL's
        return _finite(a + b)
    raise _Unsure


def _sub(a: Any, b: Any) -> float:
    if a.__class__ is float and b.__class__ is float:
        return _finite(a - b)
    raise _Unsure


def _mul(a: Any, b: Any) -> float:
    if a.__class__ is float and b.__class__ is float:
        return _finite(a * b)
    raise _Unsure


def _div(a: Any, b: Any) -> float:
    if a.__class__ is float and b.__class__ is float and b != 0.0:
        return _finite(a / b)
    raise _Unsure


_HELPERS = {f.__name__: f for f in (_lt, _le, _gt, _ge, _eq, _ne, _in, _bool, _or, _and,
                                    _not, _neg, _double, _add, _sub, _mul, _div)}
_RELATIONS = {"relation_lt": "_lt", "relation_le": "_le", "relation_gt": "_gt",
              "relation_ge": "_ge", "relation_eq": "_eq", "relation_ne": "_ne"}
_ARITHMETIC = {"addition_add": "_add", "addition_sub": "_sub", "multiplication_mul": "_mul",
               "multiplication_div": "_div"}


# ----------------------------------------------------------------------------- the compiler
_PASS = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition",
                   "multiplication", "unary", "member", "primary", "paren_expr", "exprlist"})


def _source(node: Any, names: Mapping[tuple[str, ...], str], constants: list[Any]) -> str:
    """The Python expression of ``node``; constants go to ``constants`` (named c0, c1, ...)."""
    if not isinstance(node, Tree):
        raise _Unsupported(repr(node))
    kind, kids = node.data, node.children
    if kind in _PASS and len(kids) == 1:
        return _source(kids[0], names, constants)
    if kind in ("conditionalor", "conditionaland") and len(kids) == 2:
        op = "_or" if kind == "conditionalor" else "_and"
        return f"{op}({_source(kids[0], names, constants)}, {_source(kids[1], names, constants)})"
    if kind == "relation":
        op_tree, rhs = kids
        left = _source(op_tree.children[0], names, constants)
        if op_tree.data == "relation_in":
            return f"_in({left}, {_constant(_list_literal(rhs), constants)})"
        if op_tree.data not in _RELATIONS:
            raise _Unsupported(op_tree.data)
        return f"{_RELATIONS[op_tree.data]}({left}, {_source(rhs, names, constants)})"
    if kind in ("addition", "multiplication"):
        op_tree, rhs = kids
        if op_tree.data not in _ARITHMETIC:
            raise _Unsupported(op_tree.data)
        return (f"{_ARITHMETIC[op_tree.data]}({_source(op_tree.children[0], names, constants)}, "
                f"{_source(rhs, names, constants)})")
    if kind == "unary":
        op, operand = kids
        inner = _source(operand, names, constants)
        if op.data == "unary_not":
            return f"_not({inner})"
        if op.data == "unary_neg":
            return f"_neg({inner})"
        raise _Unsupported(op.data)
    if kind == "member_dot":
        path = _path(node)
        if path is None or path not in names:
            raise _Unsupported("not a flat field")
        return f"v[{_constant(names[path], constants)}]"
    if kind == "ident_arg":
        fname = str(kids[0])
        args = kids[1].children if len(kids) > 1 else []
        if fname == "double" and len(args) == 1:
            return f"_double({_source(args[0], names, constants)})"
        raise _Unsupported(fname)
    if kind == "literal":
        return _constant(_literal(kids[0]), constants)
    raise _Unsupported(kind)


def _constant(value: Any, constants: list[Any]) -> str:
    constants.append(value)
    return f"c{len(constants) - 1}"


def _path(node: Tree) -> tuple[str, ...] | None:
    """``event.country`` -> ("event", "country"); None for anything but a pure field chain."""
    parts: list[str] = []
    while True:
        if node.data in ("member", "primary") and len(node.children) == 1:
            node = node.children[0]
        elif node.data == "member_dot":
            parts.append(str(node.children[1]))
            node = node.children[0]
        elif node.data == "ident":
            parts.append(str(node.children[0]))
            return tuple(reversed(parts))
        else:
            return None


def _literal(token: Token) -> Any:
    text = str(token)
    if token.type == "INT_LIT":
        digits = text[1:] if text[:1] == "-" else text
        if not digits.isdigit() or not digits.isascii():  # hex and the like: left to CEL
            raise _Unsupported(text)
        value = int(text)
        if not _INT_MIN <= value <= _INT_MAX:
            raise _Unsupported(text)
        return value
    if token.type == "FLOAT_LIT":
        if not all(c in "0123456789.eE+-" for c in text):
            raise _Unsupported(text)
        value = float(text)
        if not _isfinite(value):
            raise _Unsupported(text)
        return value
    if token.type == "STRING_LIT":
        if (len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'"
                and "\\" not in text and text[0] not in text[1:-1] and text.isascii()):
            return text[1:-1]
        raise _Unsupported(text)  # escapes, raw or triple-quoted strings
    if token.type == "BOOL_LIT":
        return text == "true"
    raise _Unsupported(token.type)


def _list_literal(node: Tree) -> tuple[Any, ...]:
    """The constant members of a list literal of strings, or of numbers (no bools)."""
    while node.data in _PASS and len(node.children) == 1 and node.data != "exprlist":
        node = node.children[0]
    if node.data != "list_lit" or len(node.children) != 1:
        raise _Unsupported("not a non-empty list literal")
    members = []
    for expr in node.children[0].children:
        constants: list[Any] = []
        source = _source(expr, {}, constants)  # a literal needs no variable
        try:
            value = eval(source, {**_HELPERS,  # noqa: S307 - our own source
                                  **{f"c{i}": c for i, c in enumerate(constants)}})
        except (_Unsure, ArithmeticError):
            raise _Unsupported("a member that is no constant of the subset") from None
        members.append(value)
    kinds = {m.__class__ for m in members}
    if not (kinds == {str} or kinds <= {int, float}):
        raise _Unsupported("a list of mixed or boolean members")
    return tuple(members)
