"""The metric language: parse a definition into ``MetricDef`` values.

    SELECT SUM(amount) AS card_sum_5m, COUNT(*) FROM payments
    WHERE channel = 'cnp' GROUP BY card RANGE 5 MINUTES

Windows: ``RANGE W`` (sliding, current event included), ``RANGE W DELAY D``,
``RANGE W EXCLUDING CURRENT``, ``RANGE UNBOUNDED``, ``TUMBLING W`` and ``HOPPING W EVERY S``
(buckets aligned on the epoch in UTC, weeks on Mondays). No window clause means
``RANGE UNBOUNDED``. The caller gets one ``MetricDef`` per aggregation; a bad text raises
``MetricSyntaxError`` with the position and what was expected.

>>> [m.name for m in parse("SELECT SUM(amount) AS s, COUNT(*) FROM payments "
...                         "GROUP BY card RANGE 5 MINUTES")]
['s', 'count_payments_by_card_range_5m']
>>> parse("SELECT SUM(amount) FROM payments RANGE 5 MINUTE")[0].window.size_ms
300000
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from metrics_engine.errors import MetricSyntaxError
from metrics_engine.predicates import Expr, render

GRAMMAR = r"""
start: "SELECT"i agg ("," agg)* "FROM"i NAME where? group? window?

agg: call ("AS"i NAME)?
call: NAME "(" STAR ")"                 -> call_star
    | NAME "(" DISTINCT NAME ")"        -> call_distinct
    | NAME "(" expr ")"                 -> call_expr
    | NAME "(" ")"                      -> call_empty

where: "WHERE"i expr
group: "GROUP"i "BY"i NAME ("," NAME)*

window: "RANGE"i duration delay? excluding?   -> range_window
      | "RANGE"i UNBOUNDED                   -> unbounded_window
      | "TUMBLING"i duration                 -> tumbling_window
      | "HOPPING"i duration "EVERY"i duration -> hopping_window
delay: "DELAY"i duration
excluding: "EXCLUDING"i "CURRENT"i
duration: INT UNIT

?expr: or_expr
?or_expr: and_expr | or_expr "OR"i and_expr        -> or_
?and_expr: not_expr | and_expr "AND"i not_expr     -> and_
?not_expr: cmp | "NOT"i not_expr                   -> not_
?cmp: sum
    | sum COMP_OP sum                              -> compare
    | sum "IN"i "(" literal ("," literal)* ")"     -> in_
    | sum "NOT"i "IN"i "(" literal ("," literal)* ")" -> not_in
    | sum "IS"i "NULL"i                            -> is_null
    | sum "IS"i "NOT"i "NULL"i                     -> is_not_null
?sum: product | sum ADD_OP product                 -> arith
?product: atom | product MUL_OP atom               -> arith
?atom: literal | NAME -> field | "(" expr ")" | "-" atom -> neg
literal: NUMBER -> number | STRING -> string | "TRUE"i -> true | "FALSE"i -> false | "NULL"i -> null

STAR: "*"
DISTINCT.2: /DISTINCT\b/i
UNBOUNDED.2: /UNBOUNDED\b/i
UNIT.2: /(MILLISECONDS?|MS|SECONDS?|MINUTES?|HOURS?|DAYS?|WEEKS?)\b/i
COMP_OP: "==" | "=" | "!=" | "<>" | "<=" | ">=" | "<" | ">"
ADD_OP: "+" | "-"
MUL_OP: "*" | "/"
NAME: /[A-Za-z_][A-Za-z0-9_]*/
NUMBER: /\d+(\.\d+)?([eE][+-]?\d+)?/
INT: /\d+/
STRING: /'([^'\\]|\\.)*'/

%import common.WS
%ignore WS
"""

_PARSER = Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)

UNIT_MS = {"ms": 1, "millisecond": 1, "second": 1_000, "minute": 60_000, "hour": 3_600_000,
           "day": 86_400_000, "week": 604_800_000}
WEEK_MS = UNIT_MS["week"]
# The epoch was a Thursday; weekly buckets start on Mondays (1970-01-05).
WEEK_ALIGN_OFFSET_MS = 4 * UNIT_MS["day"]
WINDOW_MS_MAX = 10 * 366 * UNIT_MS["day"]  # ten years: a bound on what the reservoir retains
NAME_CHARS_MAX = 200

# Aggregation name in the language -> (canonical function, argument kind).
# Argument kinds: "star" COUNT(*), "field" a field name, "distinct" COUNT(DISTINCT f),
# "predicate" RATIO(expr), "none" TIME_SINCE_LAST().
FUNCTIONS: dict[str, tuple[str, str]] = {
    "count": ("count", "field"),
    "sum": ("sum", "field"),
    "avg": ("avg", "field"),
    "mean": ("avg", "field"),
    "min": ("min", "field"),
    "max": ("max", "field"),
    "stddev": ("stddev_samp", "field"),
    "stddev_samp": ("stddev_samp", "field"),
    "stddev_pop": ("stddev_pop", "field"),
    "variance": ("var_samp", "field"),
    "var_samp": ("var_samp", "field"),
    "var_pop": ("var_pop", "field"),
    "skewness": ("skewness", "field"),
    "count_distinct": ("count_distinct", "field"),
    "oldest": ("oldest", "field"),
    "recent": ("recent", "field"),
    "most_recent": ("recent", "field"),
    "last": ("recent", "field"),
    "ratio": ("ratio", "predicate"),
    "time_since_last": ("time_since_last", "none"),
}


@dataclass(frozen=True)
class WindowSpec:
    """A window. ``kind`` is "range", "hop" or "unbounded"; all times in milliseconds.

    range: ``t - delay - size < t_i <= t - delay`` (minus the current event if ``exclude_current``).
    hop: ``b - size <= t_i < b`` with ``b`` the last bucket boundary ``<= t`` (``every`` apart,
    ``align`` offset from the epoch).
    """

    kind: str
    size_ms: int = 0
    delay_ms: int = 0
    exclude_current: bool = False
    every_ms: int = 0
    align_ms: int = 0

    def text(self) -> str:
        if self.kind == "unbounded":
            return "RANGE UNBOUNDED"
        if self.kind == "hop":
            if self.every_ms == self.size_ms:
                return f"TUMBLING {_dur_text(self.size_ms)}"
            return f"HOPPING {_dur_text(self.size_ms)} EVERY {_dur_text(self.every_ms)}"
        out = f"RANGE {_dur_text(self.size_ms)}"
        if self.delay_ms:
            out += f" DELAY {_dur_text(self.delay_ms)}"
        if self.exclude_current:
            out += " EXCLUDING CURRENT"
        return out

    def slug(self) -> str:
        if self.kind == "unbounded":
            return "all"
        if self.kind == "hop":
            return f"hop_{_dur_slug(self.size_ms)}_every_{_dur_slug(self.every_ms)}"
        out = f"range_{_dur_slug(self.size_ms)}"
        if self.delay_ms:
            out += f"_delay_{_dur_slug(self.delay_ms)}"
        if self.exclude_current:
            out += "_excl"
        return out


@dataclass(frozen=True)
class MetricDef:
    """One metric: an aggregation over a window of a stream, per group key."""

    name: str
    func: str  # canonical function, a key of aggregations.FINALIZERS
    field: str | None  # the aggregated field (None for COUNT(*), RATIO, TIME_SINCE_LAST)
    predicate: Expr | None  # RATIO's subset predicate
    stream: str
    where: Expr | None
    group_by: tuple[str, ...]
    window: WindowSpec

    @property
    def text(self) -> str:
        """A canonical definition of this metric alone; ``parse(text)`` gives it back."""
        if self.func == "ratio":
            arg = render(self.predicate)
        elif self.func == "time_since_last":
            arg = ""
        elif self.func == "count" and self.field is None:
            arg = "*"
        else:
            arg = self.field or ""
        fn = self.func.upper()
        out = f"SELECT {fn}({arg}) AS {self.name} FROM {self.stream}"
        if self.where is not None:
            out += f" WHERE {render(self.where)}"
        if self.group_by:
            out += f" GROUP BY {', '.join(self.group_by)}"
        return out + f" {self.window.text()}"


def _dur_text(ms: int) -> str:
    for unit, size in (("WEEKS", WEEK_MS), ("DAYS", 86_400_000), ("HOURS", 3_600_000),
                       ("MINUTES", 60_000), ("SECONDS", 1_000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} MILLISECONDS"


def _dur_slug(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _error_at(meta_or_token, message: str) -> MetricSyntaxError:
    line = getattr(meta_or_token, "line", 1) or 1
    column = getattr(meta_or_token, "column", 1) or 1
    return MetricSyntaxError(message, line=line, column=column)


@v_args(meta=True)
class _ToDefs(Transformer):
    """Lark tree -> plain values; expressions become predicate tuples (see predicates.py)."""

    # -- expressions
    def number(self, meta, c):
        text = str(c[0])
        return ("lit", float(text) if any(ch in text for ch in ".eE") else int(text))

    def string(self, meta, c):
        raw = str(c[0])[1:-1]
        return ("lit", re.sub(r"\\(.)", r"\1", raw))

    def true(self, meta, c):
        return ("lit", True)

    def false(self, meta, c):
        return ("lit", False)

    def null(self, meta, c):
        return ("lit", None)

    def field(self, meta, c):
        return ("field", str(c[0]))

    def neg(self, meta, c):
        return ("neg", c[0])

    def arith(self, meta, c):
        return ("arith", str(c[1]), c[0], c[2])

    def compare(self, meta, c):
        op = {"==": "=", "<>": "!="}.get(str(c[1]), str(c[1]))
        return ("cmp", op, c[0], c[2])

    def in_(self, meta, c):
        return ("in", c[0], tuple(v[1] for v in c[1:]))

    def not_in(self, meta, c):
        return ("not", ("in", c[0], tuple(v[1] for v in c[1:])))

    def is_null(self, meta, c):
        return ("isnull", c[0])

    def is_not_null(self, meta, c):
        return ("not", ("isnull", c[0]))

    def and_(self, meta, c):
        return ("and", c[0], c[1])

    def or_(self, meta, c):
        return ("or", c[0], c[1])

    def not_(self, meta, c):
        return ("not", c[0])

    # -- statement
    def call_star(self, meta, c):
        return (c[0], "star", None)

    def call_distinct(self, meta, c):
        return (c[0], "distinct", str(c[2]))

    def call_expr(self, meta, c):
        return (c[0], "expr", c[1])

    def call_empty(self, meta, c):
        return (c[0], "none", None)

    def agg(self, meta, c):
        return (c[0], str(c[1]) if len(c) > 1 else None)

    def where(self, meta, c):
        return ("where", c[0])

    def group(self, meta, c):
        return ("group", tuple(str(t) for t in c))

    def duration(self, meta, c):
        unit = str(c[1]).lower().rstrip("s") or "ms"
        unit = "ms" if unit == "m" and str(c[1]).lower() == "ms" else unit
        ms = int(c[0]) * UNIT_MS[unit]
        if not 0 < ms <= WINDOW_MS_MAX:
            raise _error_at(meta, f"a duration is > 0 and <= {WINDOW_MS_MAX} ms, got {ms} ms")
        return ms

    def delay(self, meta, c):
        return ("delay", c[0])

    def excluding(self, meta, c):
        return ("excluding", True)

    def range_window(self, meta, c):
        opts = dict(x for x in c[1:])
        return ("window", WindowSpec("range", c[0], opts.get("delay", 0),
                                     opts.get("excluding", False)))

    def unbounded_window(self, meta, c):
        return ("window", WindowSpec("unbounded"))

    def tumbling_window(self, meta, c):
        return ("window", _hop(c[0], c[0]))

    def hopping_window(self, meta, c):
        if c[0] % c[1] != 0:
            raise _error_at(meta, "HOPPING W EVERY S needs W to be a multiple of S")
        return ("window", _hop(c[0], c[1]))

    def start(self, meta, c):
        aggs = [x for x in c if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)]
        stream = next(str(x) for x in c if isinstance(x, Token) and x.type == "NAME")
        clauses = {x[0]: x[1] for x in c if isinstance(x, tuple) and len(x) == 2
                   and isinstance(x[0], str)}
        return aggs, stream, clauses


def _hop(size_ms: int, every_ms: int) -> WindowSpec:
    align = WEEK_ALIGN_OFFSET_MS if every_ms % WEEK_MS == 0 else 0
    return WindowSpec("hop", size_ms, 0, False, every_ms, align)


def _resolve(call, alias, stream, where, group_by, window) -> MetricDef:
    name_tok, arg_kind, arg = call
    fname = str(name_tok).lower()
    if fname not in FUNCTIONS:
        raise _error_at(name_tok, f"unknown aggregation {str(name_tok)!r}; known: "
                        + ", ".join(sorted(FUNCTIONS)))
    func, wanted = FUNCTIONS[fname]
    field: str | None = None
    predicate = None
    if arg_kind == "distinct":
        if func != "count":
            raise _error_at(name_tok, "DISTINCT is only allowed in COUNT(DISTINCT field)")
        func, field = "count_distinct", arg
    elif arg_kind == "star":
        if func != "count":
            raise _error_at(name_tok, f"{fname.upper()}(*) is not allowed; only COUNT(*)")
    elif wanted == "none":
        if arg_kind != "none":
            raise _error_at(name_tok, f"{fname.upper()}() takes no argument")
    elif wanted == "predicate":
        if arg_kind != "expr":
            raise _error_at(name_tok,
                            f"{fname.upper()} needs a predicate, e.g. RATIO(is_fraud = 1)")
        predicate = arg
    else:
        if arg_kind != "expr" or arg[0] != "field":
            raise _error_at(name_tok, f"{fname.upper()} takes one field name")
        field = arg[1]
    name = str(alias) if alias is not None else _generated_name(func, field, stream, group_by,
                                                                window, predicate)
    if len(name) > NAME_CHARS_MAX:
        raise _error_at(name_tok, f"a metric name has at most {NAME_CHARS_MAX} characters")
    return MetricDef(name, func, field, predicate, stream, where, group_by, window)


def _generated_name(func, field, stream, group_by, window, predicate) -> str:
    parts = [func]
    if field:
        parts.append(field)
    if predicate is not None:
        parts.append(re.sub(r"[^a-z0-9]+", "_", render(predicate).lower()).strip("_"))
    parts.append(stream)
    if group_by:
        parts.append("by_" + "_".join(group_by))
    parts.append(window.slug())
    return "_".join(parts)[:NAME_CHARS_MAX]


def _readable_expected(names) -> list[str]:
    out = set()
    for name in names:
        try:
            term = _PARSER.get_terminal(name)
            pattern = term.pattern
            out.add(pattern.value.upper() if pattern.type == "str" else name)
        except KeyError:
            out.add(name)
    return sorted(out)


def parse(text: str) -> list[MetricDef]:
    """Parse one definition; returns one ``MetricDef`` per aggregation, in order."""
    try:
        tree = _PARSER.parse(text)
    except UnexpectedToken as e:
        if e.token.type == "$END":  # point just past the last character
            lines = text.split("\n")
            line, column, got = len(lines), len(lines[-1]) + 1, "end of input"
        else:
            line, column, got = e.line, e.column, repr(str(e.token))
        raise MetricSyntaxError(f"unexpected {got}", line=line, column=column,
                                expected=_readable_expected(e.expected)) from None
    except UnexpectedCharacters as e:
        raise MetricSyntaxError(f"unexpected character {text[e.pos_in_stream or 0]!r}",
                                line=e.line,
                                column=e.column, expected=_readable_expected(e.allowed)) from None
    except UnexpectedEOF as e:
        lines = text.splitlines() or [""]
        raise MetricSyntaxError("unexpected end of input", line=len(lines),
                                column=len(lines[-1]) + 1,
                                expected=_readable_expected(e.expected)) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark errors
        raise MetricSyntaxError(str(e), line=getattr(e, "line", 1),
                                column=getattr(e, "column", 1)) from None
    try:
        aggs, stream, clauses = _ToDefs().transform(tree)
    except Exception as e:  # lark wraps errors raised inside callbacks
        inner = getattr(e, "orig_exc", e)
        if isinstance(inner, MetricSyntaxError):
            raise inner from None
        raise
    window = clauses.get("window", WindowSpec("unbounded"))
    defs = [_resolve(call, alias, stream, clauses.get("where"), clauses.get("group", ()), window)
            for call, alias in aggs]
    names = [d.name for d in defs]
    if len(set(names)) != len(names):
        raise MetricSyntaxError("two aggregations have the same name; use AS", line=1, column=1)
    return defs
