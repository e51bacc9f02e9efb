"""A static type checker for CEL criteria over cel-python's parse tree.

Neither Python CEL library checks types before evaluation, so this module walks the syntax tree
produced by cel-python's maintained Lark grammar (no parser of our own) and infers a type for
each sub-expression against the records known at an edge. It reports unknown variables, fields
and functions, operator misuse (CEL never coerces ``int`` and ``double`` in arithmetic) and a
result that is not ``bool``. It also records which record fields a criterion reads, so the step
converts only those fields into CEL values.

Caller: :func:`check` with the source and the root records; catch :class:`CheckError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from celpy.celparser import CELParseError, CELParser
from lark import Token, Tree
from lark.exceptions import LarkError

from workflows.cel_types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    NUMERIC,
    ORDERED,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    AnyType,
    CelType,
    Record,
    list_of,
    map_of,
)

tree_depth_max = 400  # keeps the recursive walk far below Python's recursion limit
Path = tuple[str, ...]


class CheckError(ValueError):
    """A criterion that does not parse or type-check; ``code`` classifies it for Problems."""

    def __init__(self, code: str, message: str, span: tuple[int, int] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.span = span  # [start, end) characters of the offending sub-expression, if known


@dataclass(frozen=True)
class CheckResult:
    type: AnyType
    # Record paths the criterion reads, e.g. ("event", "country"), ("apps", "review", "outcome");
    # a shorter path such as ("event",) means the whole record is read (dynamic index, size()).
    paths: frozenset[Path]
    # When every read is a plain field selection: (start, end, path) of each one in the
    # source, so the caller may bind fields as flat variables; None otherwise (has(), size()).
    selections: tuple[tuple[int, int, Path], ...] | None
    tree: Tree | None = None  # the parse tree (``workflows.direct`` compiles from it)


@dataclass(frozen=True)
class _Ref:
    """A sub-expression that is a pure record path; ``leaf`` when it selects a value field."""

    path: Path
    start: int
    end: int
    leaf: bool


def parse(source: str) -> Tree:
    """Parse with cel-python's grammar; raise CheckError('criteria_syntax') on any failure."""
    try:
        tree = CELParser().parse(source)
    except CELParseError as e:
        raise CheckError("criteria_syntax", f"syntax error: {_first_line(e)}",
                         _line_col_span(source, e.line, e.column)) from None
    except (LarkError, ValueError, RecursionError) as e:
        raise CheckError("criteria_syntax", f"syntax error: {type(e).__name__}") from None
    depth = _depth(tree)
    if depth > tree_depth_max:
        raise CheckError(
            "criteria_limit", f"expression nested too deeply ({depth} > {tree_depth_max} levels)"
        )
    return tree


def check(source: str, roots: dict[str, AnyType]) -> CheckResult:
    """Type-check ``source`` against the root records; the result must be bool (or dyn)."""
    tree = parse(source)
    checker = _Checker(roots)
    t, ref = checker.visit(tree, {})
    checker.use(ref)
    if t not in (BOOL, DYN):
        raise CheckError("criteria_type", f"a criterion must be bool, this one is {t}",
                         _span(tree))
    selections = tuple(sorted(checker.selections)) if checker.flattenable else None
    return CheckResult(type=t, paths=frozenset(checker.paths), selections=selections, tree=tree)


def _span(node: Tree) -> tuple[int, int] | None:
    meta = node.meta
    if meta.empty:
        return None
    return meta.start_pos, meta.end_pos


def _line_col_span(source: str, line: int | None, column: int | None) -> tuple[int, int] | None:
    """The rest of the line from a parse error's 1-based line and column."""
    if not line or not column:
        return None
    lines = source.split("\n")
    if line > len(lines):
        return None
    start = sum(len(x) + 1 for x in lines[: line - 1]) + column - 1
    start = max(0, min(start, len(source)))
    end = sum(len(x) + 1 for x in lines[:line]) - 1
    return (start, max(start, min(end, len(source))))


def _first_line(e: Exception) -> str:
    text = str(e.args[0]) if e.args else str(e)
    return " ".join(text.split())[:200]


def _depth(tree: Tree) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in node.children if isinstance(c, Tree))
    return deepest


_ARITH = {"addition_add": "+", "addition_sub": "-", "multiplication_mul": "*",
          "multiplication_div": "/", "multiplication_mod": "%"}
_RELATION = {"relation_lt": "<", "relation_le": "<=", "relation_gt": ">", "relation_ge": ">=",
             "relation_eq": "==", "relation_ne": "!=", "relation_in": "in"}
_CONVERSIONS: dict[str, tuple[frozenset[CelType], CelType]] = {
    "int": (frozenset({INT, UINT, DOUBLE, STRING, TIMESTAMP}), INT),
    "uint": (frozenset({INT, UINT, DOUBLE, STRING}), UINT),
    "double": (frozenset({INT, UINT, DOUBLE, STRING}), DOUBLE),
    "string": (frozenset({INT, UINT, DOUBLE, STRING, BOOL, BYTES, TIMESTAMP, DURATION}), STRING),
    "bytes": (frozenset({STRING, BYTES}), BYTES),
    "timestamp": (frozenset({STRING, INT, TIMESTAMP}), TIMESTAMP),
    "duration": (frozenset({STRING, DURATION}), DURATION),
}
_STRING_METHODS = {"contains", "startsWith", "endsWith", "matches"}
_MACROS = {"all", "exists", "exists_one", "map", "filter"}


class _Checker:
    def __init__(self, roots: dict[str, AnyType]):
        self.roots = roots
        self.paths: set[Path] = set()
        self.selections: set[tuple[int, int, Path]] = set()
        self.flattenable = True

    def use(self, ref: _Ref | None, flat: bool = True) -> None:
        if ref is None:
            return
        self.paths.add(ref.path)
        if flat and ref.leaf:
            self.selections.add((ref.start, ref.end, ref.path))
        else:
            self.flattenable = False

    def fail(self, code: str, message: str) -> CheckError:
        return CheckError(code, message)

    # Each visit returns (type, ref): ref is set while the expression is a pure record path
    # such as event.country, so a parent can extend it; any other use records it as read.
    def visit(self, node: Tree, scope: dict[str, AnyType]) -> tuple[AnyType, _Ref | None]:
        try:
            return self._visit(node, scope)
        except CheckError as e:
            if e.span is None:  # the innermost node that failed names the span
                e.span = _span(node)
            raise

    def _visit(self, node: Tree, scope: dict[str, AnyType]) -> tuple[AnyType, _Ref | None]:
        kind = node.data
        kids = node.children
        if kind in ("expr", "conditionalor", "conditionaland", "relation", "addition",
                    "multiplication", "unary", "member", "primary",
                    "paren_expr") and len(kids) == 1:
            return self.visit(kids[0], scope)
        if kind == "member_dot":
            return self._member_dot(node, scope)
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise self.fail("criteria_unsupported", f"unsupported CEL construct: {kind}")
        return method(kids, scope)

    def value(self, node: Tree, scope: dict[str, AnyType]) -> AnyType:
        t, ref = self.visit(node, scope)
        self.use(ref)
        return t

    def _expr(self, kids, scope):
        cond, a, b = (self.value(k, scope) for k in kids)
        if cond not in (BOOL, DYN):
            raise self.fail("criteria_type", f"the condition of ?: must be bool, not {cond}")
        return _join(a, b, "?:"), None

    def _conditionalor(self, kids, scope):
        return self._logic(kids, scope, "||")

    def _conditionaland(self, kids, scope):
        return self._logic(kids, scope, "&&")

    def _logic(self, kids, scope, op):
        for k in kids:
            t = self.value(k, scope)
            if t not in (BOOL, DYN):
                raise self.fail("criteria_type", f"operands of {op} must be bool, not {t}")
        return BOOL, None

    def _relation(self, kids, scope):
        op_tree, rhs = kids
        op = _RELATION[op_tree.data]
        lhs = op_tree.children[0]
        a, a_path = self.visit(lhs, scope)
        b, b_path = self.visit(rhs, scope)
        self.use(a_path)
        self.use(b_path)
        if op in ("==", "!=", "in"):
            self._check_enum(a_path.path if a_path else None, rhs)
            if op != "in":
                self._check_enum(b_path.path if b_path else None, lhs)
        if op == "in":
            _check_in(a, b)
        elif op in ("==", "!="):
            if not _comparable(a, b):
                raise self.fail("criteria_type", f"cannot compare {a} {op} {b}")
        elif not _ordered(a, b):
            raise self.fail("criteria_type", f"cannot order {a} {op} {b}")
        return BOOL, None

    def _check_enum(self, path: Path | None, other: Tree) -> None:
        """A string field with known values (a review's outcome) compared with a literal that
        is not one of them is a typo that would silently never match."""
        if path is None or len(path) < 2:
            return
        record = self.roots.get(path[0])
        for name in path[1:-1]:
            record = record.fields.get(name) if isinstance(record, Record) else None
        if not isinstance(record, Record) or path[-1] not in record.enums:
            return
        allowed = record.enums[path[-1]]
        for literal in _string_literals(other):
            if literal not in allowed:
                raise self.fail("criteria_unknown",
                                f"{'.'.join(path)} is never {literal!r} "
                                f"(it is one of: {', '.join(sorted(allowed))})")

    def _addition(self, kids, scope):
        return self._arith(kids, scope)

    def _multiplication(self, kids, scope):
        return self._arith(kids, scope)

    def _arith(self, kids, scope):
        op_tree, rhs = kids
        op = _ARITH[op_tree.data]
        a = self.value(op_tree.children[0], scope)
        b = self.value(rhs, scope)
        if DYN in (a, b):
            return DYN, None
        if isinstance(a, Record) or isinstance(b, Record) or a != b:
            hint = " (CEL never mixes int and double: convert with double(x) or int(x))" if (
                a in NUMERIC and b in NUMERIC) else ""
            raise self.fail("criteria_type", f"no operator {a} {op} {b}{hint}")
        allowed = NUMERIC - {DOUBLE} if op == "%" else NUMERIC
        if op == "+":
            allowed = allowed | {STRING, BYTES}
        if a in allowed or (op == "+" and a.name == "list"):
            return a, None
        raise self.fail("criteria_type", f"no operator {a} {op} {b}")

    def _unary(self, kids, scope):
        op, operand = kids
        t = self.value(operand, scope)
        if op.data == "unary_not":
            if t not in (BOOL, DYN):
                raise self.fail("criteria_type", f"! needs a bool, not {t}")
            return BOOL, None
        if t not in (INT, DOUBLE, DYN):
            raise self.fail("criteria_type", f"unary - needs int or double, not {t}")
        return t, None

    def _member_dot(self, node, scope):
        base, name = node.children[0], str(node.children[1])
        t, ref = self.visit(base, scope)
        if isinstance(t, Record):
            if name in t.fields:
                field = t.fields[name]
                return field, _extend(ref, name, node, field)
            if t.open:
                self.use(ref)
                return DYN, None
            raise self.fail("criteria_unknown", _unknown_field(t, name))
        self.use(ref)
        if t == DYN:
            return DYN, None
        if t.name == "map":
            if t.key not in (STRING, DYN):
                raise self.fail("criteria_type", f"cannot select .{name} on {t}")
            return t.elem, None
        raise self.fail("criteria_type", f"cannot select .{name} on {t}")

    def _member_index(self, kids, scope):
        base, index = kids
        t = self.value(base, scope)
        i = self.value(index, scope)
        if isinstance(t, Record):
            # Dynamic access to a record reads all of it; its fields may have any type.
            if i not in (STRING, DYN):
                raise self.fail("criteria_type", f"{t}[...] needs a string key, not {i}")
            return DYN, None
        if t == DYN:
            return DYN, None
        if t.name == "list":
            if i not in (INT, UINT, DYN):
                raise self.fail("criteria_type", f"a list index must be int, not {i}")
            return t.elem, None
        if t.name == "map":
            if not _comparable(t.key, i):
                raise self.fail("criteria_type", f"key {i} does not fit {t}")
            return t.elem, None
        raise self.fail("criteria_type", f"cannot index {t}")

    def _member_object(self, kids, scope):
        raise self.fail("criteria_unsupported", "message construction is not supported")

    def _member_dot_arg(self, kids, scope):
        base, name = kids[0], str(kids[1])
        args = list(kids[2].children) if len(kids) > 2 else []
        if name in _MACROS:
            return self._macro(base, name, args, scope)
        t = self.value(base, scope)
        arg_types = [self.value(a, scope) for a in args]
        if name == "size" and not arg_types:
            return _size(t), None
        if name in _STRING_METHODS and len(arg_types) == 1:
            if t not in (STRING, DYN) or arg_types[0] not in (STRING, DYN):
                raise self.fail("criteria_type", f"{name}() works on strings, not {t}")
            return BOOL, None
        raise self.fail("criteria_unknown", f"unknown function {name}() on {t}")

    def _macro(self, base, name, args, scope):
        t = self.value(base, scope)
        want = (2, 3) if name == "map" else (2,)
        if len(args) not in want or not _is_ident(args[0]):
            raise self.fail("criteria_syntax", f"{name}() needs a variable name and an expression")
        var = _ident_name(args[0])
        if var.startswith("_rf_"):
            raise self.fail("criteria_syntax", "names starting with _rf_ are reserved")
        if t == DYN:
            elem: AnyType = DYN
        elif isinstance(t, Record) or t.name == "map":
            elem = STRING if isinstance(t, Record) else t.key
            if isinstance(t, Record):
                self.paths.add(_record_path(t))
                self.flattenable = False
        elif t.name == "list":
            elem = t.elem
        else:
            raise self.fail("criteria_type", f"{name}() needs a list or a map, not {t}")
        inner = {**scope, var: elem}
        parts = [self.value(a, inner) for a in args[1:]]
        if name in ("all", "exists", "exists_one", "filter") or len(parts) == 2:
            if parts[0] not in (BOOL, DYN):
                raise self.fail("criteria_type", f"the predicate of {name}() must be bool")
        if name == "map":
            return list_of(parts[-1]), None
        if name == "filter":
            return list_of(elem), None
        return BOOL, None

    def _primary(self, kids, scope):
        raise self.fail("criteria_unsupported", "unsupported primary expression")

    def _ident(self, kids, scope):
        name = str(kids[0])
        if name in scope:
            return scope[name], None
        if name in self.roots:
            t = self.roots[name]
            return t, (_Ref((name,), -1, -1, False) if isinstance(t, Record) else None)
        if name in ("int", "uint", "double", "string", "bool", "bytes", "list", "map",
                    "null_type", "type"):
            return TYPE, None
        known = ", ".join(sorted(self.roots))
        raise self.fail("criteria_unknown", f"unknown variable {name!r} (known: {known})")

    def _dot_ident(self, kids, scope):
        return self._ident(kids, scope)

    def _dot_ident_arg(self, kids, scope):
        return self._ident_arg(kids, scope)

    def _ident_arg(self, kids, scope):
        name = str(kids[0])
        args = list(kids[1].children) if len(kids) > 1 else []
        if name == "has":
            if len(args) != 1 or not _is_select(args[0]):
                raise self.fail("criteria_syntax",
                                "has() needs one field selection, e.g. has(event.ip)")
            t, ref = self._has_target(args[0], scope)
            self.use(ref, flat=False)
            return BOOL, None
        types = [self.value(a, scope) for a in args]
        if name == "size" and len(types) == 1:
            return _size(types[0]), None
        if name in _CONVERSIONS and len(types) == 1:
            accepted, result = _CONVERSIONS[name]
            if types[0] != DYN and types[0] not in accepted:
                raise self.fail("criteria_type", f"no conversion {name}({types[0]})")
            return result, None
        if name == "dyn" and len(types) == 1:
            return DYN, None
        if name == "type" and len(types) == 1:
            return TYPE, None
        raise self.fail("criteria_unknown",
                        f"unknown function {name}() with {len(types)} arguments")

    def _has_target(self, node, scope):
        """has(a.b): a must type-check; b need not exist on open records or maps."""
        node = _unwrap(node)
        base, name = node.children[0], str(node.children[1])
        t, ref = self.visit(base, scope)
        if isinstance(t, Record):
            if name in t.fields:
                return t.fields[name], _extend(ref, name, node, t.fields[name])
            if t.open:
                return DYN, ref
            raise self.fail("criteria_unknown", _unknown_field(t, name))
        self.use(ref, flat=False)
        if t != DYN and t.name != "map":
            raise self.fail("criteria_type", f"has() needs a field of a map, not of {t}")
        return DYN, None

    def _list_lit(self, kids, scope):
        if not kids:
            return list_of(DYN), None
        types = [self.value(k, scope) for k in kids[0].children]
        return list_of(_common(types)), None

    def _map_lit(self, kids, scope):
        if not kids:
            return map_of(DYN, DYN), None
        items = [self.value(k, scope) for k in kids[0].children]
        keys, values = items[0::2], items[1::2]
        for k in keys:
            if k not in (STRING, INT, UINT, BOOL, DYN):
                raise self.fail("criteria_type",
                                f"a map key must be string, int, uint or bool, not {k}")
        return map_of(_common(keys), _common(values)), None

    def _literal(self, kids, scope):
        token: Token = kids[0]
        return {
            "INT_LIT": INT, "UINT_LIT": UINT, "FLOAT_LIT": DOUBLE, "STRING_LIT": STRING,
            "MLSTRING_LIT": STRING, "BYTES_LIT": BYTES, "BOOL_LIT": BOOL, "NULL_LIT": NULL,
        }[token.type], None


def _string_literals(node: Tree) -> list[str]:
    """The values of a plain string literal or a list of them; [] for anything else."""
    node = _unwrap(node)
    if node.data == "exprlist":  # _unwrap went through a list literal's single child
        items = [_unwrap(c) for c in node.children]
    elif node.data == "list_lit" and node.children:
        items = [_unwrap(c) for c in node.children[0].children]
    else:
        items = [node]
    values = []
    for item in items:
        token = item.children[0] if item.data == "literal" else None
        if not isinstance(token, Token) or token.type != "STRING_LIT":
            continue
        text = str(token)
        if "\\" in text or text[:1] in "rR":
            continue  # escapes and raw strings: not worth decoding here, skip the check
        values.append(text[1:-1])
    return values


def _unwrap(node: Tree) -> Tree:
    while isinstance(node, Tree) and len(node.children) == 1 and isinstance(node.children[0], Tree):
        node = node.children[0]
    return node


def _is_select(node: Tree) -> bool:
    return _unwrap(node).data == "member_dot"


def _is_ident(node: Tree) -> bool:
    n = _unwrap(node)
    return n.data == "ident"


def _ident_name(node: Tree) -> str:
    return str(_unwrap(node).children[0])


def _extend(ref: _Ref | None, name: str, node: Tree, field: AnyType) -> _Ref | None:
    if ref is None:
        return None
    meta = node.meta
    return _Ref(ref.path + (name,), meta.start_pos, meta.end_pos, not isinstance(field, Record))


def _record_path(t: Record) -> Path:
    return tuple(t.name.split("."))


def _unknown_field(t: Record, name: str) -> str:
    hint = t.hints.get(name)
    if hint:
        return f"{t}.{name} is not known here: {hint}"
    known = ", ".join(sorted(t.fields)) or "none"
    return f"{t} has no field {name!r} (known here: {known})"


def _size(t: AnyType) -> CelType:
    if isinstance(t, Record) or t in (STRING, BYTES, DYN) or t.name in ("list", "map"):
        return INT
    raise CheckError("criteria_type", f"size() needs a string, bytes, list or map, not {t}")


def _comparable(a: AnyType, b: AnyType) -> bool:
    if DYN in (a, b) or NULL in (a, b):
        return True
    if isinstance(a, Record) or isinstance(b, Record):
        return False
    if a in NUMERIC and b in NUMERIC:
        return True  # CEL compares numbers across int, uint and double
    if a.name == b.name and a.name in ("list", "map"):
        return _comparable(a.elem or DYN, b.elem or DYN) and _comparable(a.key or DYN, b.key or DYN)
    return a == b


def _ordered(a: AnyType, b: AnyType) -> bool:
    if isinstance(a, Record) or isinstance(b, Record):
        return False
    if DYN in (a, b):
        return (a in NUMERIC | ORDERED | {DYN}) and (b in NUMERIC | ORDERED | {DYN})
    if a in NUMERIC and b in NUMERIC:
        return True
    return a == b and a in ORDERED


def _check_in(a: AnyType, b: AnyType) -> None:
    if b == DYN:
        return
    if isinstance(b, Record):
        if a not in (STRING, DYN):
            raise CheckError("criteria_type", f"{a} in {b}: keys of {b} are strings")
        return
    if b.name == "list":
        if not _comparable(a, b.elem or DYN):
            raise CheckError("criteria_type", f"{a} in {b}: element types differ")
        return
    if b.name == "map":
        if not _comparable(a, b.key or DYN):
            raise CheckError("criteria_type", f"{a} in {b}: key types differ")
        return
    raise CheckError("criteria_type", f"'in' needs a list or a map on the right, not {b}")


def _common(types: list[AnyType]) -> AnyType:
    first = types[0]
    if all(t == first for t in types) and not isinstance(first, Record):
        return first
    return DYN


def _join(a: AnyType, b: AnyType, op: str) -> AnyType:
    if a == b and not isinstance(a, Record):
        return a
    if DYN in (a, b):
        return DYN
    if NULL in (a, b):
        return b if a == NULL else a
    raise CheckError("criteria_type", f"both branches of {op} must have one type, not {a} and {b}")
