"""The walk of :func:`workflows.advance` over many events at once, on columns.

:func:`advance_batch` walks every row of a :class:`BatchColumns` (Arrow columns of event fields,
scores, metrics and app outputs; a null is an absent value) from the root, visiting nodes in
topological order: at each node the rows standing there try the node's ordered edges together,
each criterion evaluated over numpy arrays, and move on. It takes exactly the edges ``advance``
takes for each row's context (``tests/workflows/test_batch.py`` holds it to ``advance`` on
generated workflows and events), because it only evaluates what it evaluates exactly:

- criteria built from field reads, literals, ``&&``, ``||``, ``!``, comparisons, ``in`` a list
  of literals, ``double()`` and ``+ - *`` (``/`` on doubles) are evaluated on columns;
- a row whose value there could differ from CEL's (a missing field, which CEL turns into an
  error, a NaN, an int beyond 2^53 compared with a double, an int result near overflow, a zero
  divisor) takes that node's step through :func:`workflows.step`, one row at a time;
- a node with any other criterion (``has()``, ``size()``, ``?:``, a whole record, ...) takes
  every row's step through :func:`workflows.step`; :attr:`BatchWalk.uncompiled` names them
  (node and criterion) and :attr:`BatchWalk.uncompiled_rows` says which rows stepped there.

Outside work follows ``advance``: a webhook is never waited for (its node reads
``status_code`` 0), an output that says ``timed_out`` takes the default edge, other work
without output stops the row, unless ``answer`` supplies outputs for the rows waiting there
(the backtest answers built-in scorers that way, as apply does).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lark import Token, Tree

from workflows.cel_check import parse
from workflows.compiled import CompiledNode, CompiledWorkflow
from workflows.errors import InvariantViolation
from workflows.outside import OutsideWork
from workflows.step import WEBHOOK_SENT, step

exact_int_max = 2 ** 53  # ints beyond it compared with a double: CEL's rounding, not numpy's
int_result_max = 2 ** 62  # int arithmetic near int64 overflow (a CEL error) goes per row
RECORDS = ("event", "scores", "metrics")

# answer(work, rows' contexts) -> one output dict per row, or None to leave them waiting
Answer = Callable[[OutsideWork, list[dict[str, Any]]], Sequence[Mapping[str, Any]] | None]


@dataclass(frozen=True)
class BatchColumns:
    """One row per event; a column is an Arrow array of ``rows`` values, null when absent."""

    rows: int
    event: Mapping[str, pa.Array] = field(default_factory=dict)
    scores: Mapping[str, pa.Array] = field(default_factory=dict)
    metrics: Mapping[str, pa.Array] = field(default_factory=dict)
    apps: Mapping[str, Mapping[str, pa.Array]] = field(default_factory=dict)  # node -> output


@dataclass(frozen=True)
class BatchWalk:
    """Where each row stopped and how it got there (indices into ``node_ids`` / ``paths``)."""

    node_ids: tuple[str, ...]
    stop: np.ndarray  # int: node index where the row stopped
    decided: np.ndarray  # bool: stopped at a decision (else waiting for outside work)
    path: np.ndarray  # int: index into paths
    paths: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (node ids, edge ids)
    steps_per_row: int  # steps taken through workflows.step one row at a time
    uncompiled: tuple[tuple[str, str], ...]  # (node id, criterion) never evaluated on columns
    # node id -> rows stepped one at a time there because of its uncompiled criterion
    uncompiled_rows: Mapping[str, np.ndarray] = field(default_factory=dict)


# -- columns -----------------------------------------------------------------------------------

@dataclass
class _Col:
    kind: str  # int | double | bool | string | other
    values: np.ndarray | None
    valid: np.ndarray
    words: list | None = None  # string: the dictionary the values index
    items: list | None = None  # other: the Python values, read row by row

    def py(self, i: int) -> Any:
        if self.kind == "int":
            return int(self.values[i])
        if self.kind == "double":
            return float(self.values[i])
        if self.kind == "bool":
            return bool(self.values[i])
        if self.kind == "string":
            return self.words[self.values[i]]
        return self.items[i]


def _col(array: pa.Array, as_double: bool) -> _Col:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    valid = np.asarray(array.is_valid()) if array.null_count else np.ones(len(array), bool)
    if pa.types.is_signed_integer(t):
        values = np.asarray(array.cast(pa.int64()).fill_null(0))
        if as_double:  # activation reads integer scores and metrics as doubles
            return _Col("double", values.astype(np.float64), valid)
        return _Col("int", values, valid)
    if pa.types.is_floating(t):
        return _Col("double", np.asarray(array.cast(pa.float64()).fill_null(0.0)), valid)
    if pa.types.is_boolean(t):
        return _Col("bool", np.asarray(array.fill_null(False)), valid)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        enc = pc.dictionary_encode(array)
        return _Col("string", np.asarray(enc.indices.fill_null(0)), valid,
                    enc.dictionary.to_pylist())
    return _Col("other", None, valid, items=array.to_pylist())


def _col_of(items: list, as_double: bool) -> _Col:
    """A column of Python values (None: absent), typed when they all share one CEL type."""
    types = {type(v) for v in items if v is not None}
    if len(types) == 1 and types <= {int, float, bool, str}:
        return _col(pa.array(items), as_double)
    return _Col("other", None, np.array([v is not None for v in items], bool), items=items)


class _Store:
    """Every column by path: ("event", f), ("scores", f), ("metrics", f), ("apps", node, f)."""

    def __init__(self, cols: BatchColumns):
        self.rows = cols.rows
        self.cols: dict[tuple[str, ...], _Col] = {}
        for name in RECORDS:
            for f, arr in getattr(cols, name).items():
                self._put((name, f), _col(arr, name != "event"))
        self.app_fields: dict[str, list[str]] = {}
        for node, outputs in cols.apps.items():
            for f, arr in outputs.items():
                self._put(("apps", node, f), _col(arr, False))
                self.app_fields.setdefault(node, []).append(f)

    def _put(self, path: tuple[str, ...], col: _Col) -> None:
        if len(col.valid) != self.rows:
            raise InvariantViolation(f"column {'.'.join(path)} has {len(col.valid)} values "
                                     f"for {self.rows} rows")
        self.cols[path] = col

    def app_present(self, node: str) -> np.ndarray:
        out = np.zeros(self.rows, bool)
        for f in self.app_fields.get(node, ()):
            out |= self.cols[("apps", node, f)].valid
        return out

    def set_app(self, node: str, rows: np.ndarray, outputs: list[Mapping[str, Any]],
                scores: bool) -> None:
        """Write outputs for ``rows`` (absent before): into apps.<node> and, for a score
        node, into scores too."""
        names = sorted({k for o in outputs for k in o})
        for name in names:
            targets = [("apps", node, name)] + ([("scores", name)] if scores else [])
            for path in targets:
                values = [o.get(name) for o in outputs]
                if path[0] == "scores":
                    values = [float(v) if type(v) is int else v for v in values]
                self._write(path, rows, values)
            if name not in self.app_fields.setdefault(node, []):
                self.app_fields[node].append(name)

    def _write(self, path: tuple[str, ...], rows: np.ndarray, values: list) -> None:
        col = self.cols.get(path)
        merged: list = [None] * self.rows if col is None else [
            col.py(i) if col.valid[i] else None for i in range(self.rows)]
        for i, v in zip(rows.tolist(), values, strict=True):
            merged[i] = v
        self.cols[path] = _col_of(merged, False)

    def context(self, i: int) -> dict[str, Any]:
        """Row ``i`` as the dict context ``advance`` reads (absent values left out)."""
        ctx: dict[str, Any] = {name: {} for name in (*RECORDS, "apps")}
        for path, col in self.cols.items():
            if not col.valid[i]:
                continue
            if path[0] == "apps":
                ctx["apps"].setdefault(path[1], {})[path[2]] = col.py(i)
            else:
                ctx[path[0]][path[1]] = col.py(i)
        return ctx


# -- criteria on columns ----------------------------------------------------------------------

class _Unsupported(Exception):
    """A construct this module does not evaluate on columns: the node goes row by row."""


@dataclass
class _V:
    kind: str  # int | double | bool | string | list
    values: Any  # ndarray over the rows, or a Python scalar for a literal
    fb: np.ndarray | bool  # rows whose value must come from CEL itself
    words: list | None = None  # string column: its dictionary

    @property
    def literal(self) -> bool:
        return not isinstance(self.values, np.ndarray)


_PASS = {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
         "unary", "member", "primary", "paren_expr"}
_INT = re.compile(r"-?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"-?([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|-?[0-9]+[eE][+-]?[0-9]+$")
_STRING = re.compile(r"""^("[^"\\\n]*"|'[^'\\\n]*')$""")


class _Eval:
    def __init__(self, store: _Store, rows: np.ndarray):
        self.store, self.rows = store, rows
        self._cache: dict[tuple[str, ...], _V] = {}

    def criterion(self, tree: Tree) -> tuple[np.ndarray, np.ndarray]:
        v = self.visit(tree)
        if v.kind != "bool":
            raise _Unsupported("not bool")
        values = np.broadcast_to(np.asarray(v.values, bool), self.rows.shape)
        fb = np.broadcast_to(np.asarray(v.fb, bool), self.rows.shape)
        return values, fb

    def visit(self, node: Tree | Token) -> _V:
        if isinstance(node, Token):
            raise _Unsupported(f"token {node.type}")
        kids = node.children
        if node.data in _PASS and len(kids) == 1:
            return self.visit(kids[0])
        method = getattr(self, "_" + node.data, None)
        if method is None:
            raise _Unsupported(node.data)
        return method(node)

    def _conditionalor(self, node: Tree) -> _V:
        a, b = (self._bool(k) for k in node.children)
        return _V("bool", np.logical_or(a.values, b.values), a.fb | b.fb)

    def _conditionaland(self, node: Tree) -> _V:
        a, b = (self._bool(k) for k in node.children)
        return _V("bool", np.logical_and(a.values, b.values), a.fb | b.fb)

    def _bool(self, node: Tree) -> _V:
        v = self.visit(node)
        if v.kind != "bool":
            raise _Unsupported("logic on a non-bool")
        return v

    def _unary(self, node: Tree) -> _V:
        op, operand = node.children
        if op.data != "unary_not":
            raise _Unsupported(op.data)
        v = self._bool(operand)
        return _V("bool", np.logical_not(v.values), v.fb)

    def _relation(self, node: Tree) -> _V:
        op_tree, rhs = node.children
        a, b = self.visit(op_tree.children[0]), self.visit(rhs)
        op = op_tree.data
        if op == "relation_in":
            return self._in(a, b)
        if a.literal and b.literal:
            raise _Unsupported("constant relation")
        fb = a.fb | b.fb
        if a.kind == "string" or b.kind == "string":
            if a.kind != b.kind or op not in ("relation_eq", "relation_ne"):
                raise _Unsupported("string relation")
            if not a.literal and not b.literal:
                raise _Unsupported("string columns compared")
            col, lit = (a, b) if b.literal else (b, a)
            index = {w: i for i, w in enumerate(col.words)}.get(lit.values, -1)
            eq = col.values == index
            return _V("bool", eq if op == "relation_eq" else ~eq, fb)
        if a.kind == "bool" or b.kind == "bool":
            if a.kind != b.kind or op not in ("relation_eq", "relation_ne"):
                raise _Unsupported("bool relation")
            eq = np.equal(a.values, b.values)
            return _V("bool", eq if op == "relation_eq" else ~eq, fb)
        if a.kind not in ("int", "double") or b.kind not in ("int", "double"):
            raise _Unsupported("relation types")
        x, y = a.values, b.values
        if a.kind != b.kind:  # CEL compares int and double as doubles: exact up to 2^53
            x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
            for v in (a, b):
                if v.kind == "int":
                    fb = fb | (np.abs(v.values) > exact_int_max)
        for v in (a, b):
            if v.kind == "double":
                fb = fb | np.isnan(v.values)
        fn = {"relation_lt": np.less, "relation_le": np.less_equal,
              "relation_gt": np.greater, "relation_ge": np.greater_equal,
              "relation_eq": np.equal, "relation_ne": np.not_equal}[op]
        return _V("bool", fn(x, y), fb)

    def _in(self, a: _V, b: _V) -> _V:
        if b.kind != "list" or a.literal:
            raise _Unsupported("in")
        items = b.values
        if any(v.kind != a.kind for v in items) or a.kind not in ("string", "int", "bool"):
            raise _Unsupported("in a list of other kinds")
        if a.kind == "string":
            index = {w: i for i, w in enumerate(a.words)}
            wanted = [index[v.values] for v in items if v.values in index]
        else:
            wanted = [v.values for v in items]
        return _V("bool", np.isin(a.values, wanted), a.fb)

    def _addition(self, node: Tree) -> _V:
        return self._arith(node)

    def _multiplication(self, node: Tree) -> _V:
        return self._arith(node)

    def _arith(self, node: Tree) -> _V:
        op_tree, rhs = node.children
        a, b = self.visit(op_tree.children[0]), self.visit(rhs)
        op = op_tree.data
        if a.kind != b.kind or a.kind not in ("int", "double") or (a.literal and b.literal):
            raise _Unsupported("arithmetic types")
        fb = a.fb | b.fb
        if a.kind == "int":
            if op not in ("addition_add", "addition_sub", "multiplication_mul"):
                raise _Unsupported(op)
            fa, fbv = np.asarray(a.values, np.float64), np.asarray(b.values, np.float64)
            approx = {"addition_add": fa + fbv, "addition_sub": fa - fbv,
                      "multiplication_mul": fa * fbv}[op]
            fb = fb | (np.abs(approx) > int_result_max)
            safe = ~np.broadcast_to(fb, approx.shape)
            x = np.where(safe, a.values, 0)
            y = np.where(safe, b.values, 0)
            fn = {"addition_add": np.add, "addition_sub": np.subtract,
                  "multiplication_mul": np.multiply}[op]
            return _V("int", fn(x, y), fb)
        with np.errstate(all="ignore"):
            if op == "multiplication_div":
                fb = fb | (np.asarray(b.values) == 0)
                return _V("double", np.true_divide(a.values, b.values), fb)
            fn = {"addition_add": np.add, "addition_sub": np.subtract,
                  "multiplication_mul": np.multiply}.get(op)
            if fn is None:
                raise _Unsupported(op)
            return _V("double", fn(a.values, b.values), fb)

    def _ident_arg(self, node: Tree) -> _V:
        name = str(node.children[0])
        args = list(node.children[1].children) if len(node.children) > 1 else []
        if name != "double" or len(args) != 1:
            raise _Unsupported(f"function {name}")
        v = self.visit(args[0])
        if v.kind == "double":
            return v
        if v.kind != "int":
            raise _Unsupported("double() of a non-number")
        if v.literal:
            return _V("double", float(v.values), v.fb)
        return _V("double", v.values.astype(np.float64), v.fb)

    def _list_lit(self, node: Tree) -> _V:
        items = [self.visit(k) for k in node.children[0].children] if node.children else []
        if not all(v.literal for v in items):
            raise _Unsupported("list of non-literals")
        return _V("list", items, False)

    def _literal(self, node: Tree) -> _V:
        text = str(node.children[0])
        if text in ("true", "false"):
            return _V("bool", text == "true", False)
        if _INT.match(text):
            value = int(text)
            if abs(value) >= 2 ** 63:
                raise _Unsupported("int literal range")
            return _V("int", value, False)
        if _FLOAT.match(text):
            value = float(text)
            if not math.isfinite(value):
                raise _Unsupported("float literal")
            return _V("double", value, False)
        if _STRING.match(text):
            return _V("string", text[1:-1], False)
        raise _Unsupported(f"literal {text}")

    def _member_dot(self, node: Tree) -> _V:
        path = _path(node)
        if path is None:
            raise _Unsupported("not a field path")
        hit = self._cache.get(path)
        if hit is not None:
            return hit
        col = self.store.cols.get(path)
        if col is None:  # absent for every row: CEL errors, so the rows go row by row
            out = _V("bool", np.zeros(len(self.rows), bool), np.ones(len(self.rows), bool))
        elif col.kind == "other":
            raise _Unsupported(f"{'.'.join(path)} of a type read row by row")
        else:
            out = _V(col.kind, col.values[self.rows], ~col.valid[self.rows], col.words)
        self._cache[path] = out
        return out


def _path(node: Tree) -> tuple[str, ...] | None:
    """``event.x`` / ``scores.x`` / ``metrics.x`` / ``apps.n.x`` as a tuple, else None."""
    parts: list[str] = []
    while isinstance(node, Tree):
        if node.data == "member_dot":
            parts.append(str(node.children[1]))
            node = node.children[0]
        elif node.data in ("member", "primary") and len(node.children) == 1:
            node = node.children[0]
        elif node.data == "ident":
            parts.append(str(node.children[0]))
            break
        else:
            return None
    path = tuple(reversed(parts))
    if len(path) == 2 and path[0] in RECORDS:
        return path
    if len(path) == 3 and path[0] == "apps":
        return path
    return None


# -- the walk ----------------------------------------------------------------------------------

def _topological(version: CompiledWorkflow) -> list[str]:
    preds = {nid: 0 for nid in version.nodes}
    for n in version.nodes.values():
        for to in _targets(n):
            preds[to] += 1
    ready = [version.root]
    order: list[str] = []
    while ready:
        nid = ready.pop()
        order.append(nid)
        for to in _targets(version.nodes[nid]):
            preds[to] -= 1
            if preds[to] == 0:
                ready.append(to)
    return order


def _targets(n: CompiledNode) -> list[str]:
    return [e.to for e in n.edges] + ([n.default.to] if n.default is not None else [])


class _Paths:
    def __init__(self, root: str):
        self.paths: list[tuple[tuple[str, ...], tuple[str, ...]]] = [((root,), ())]
        self._next: dict[tuple[int, str], int] = {}

    def extend(self, pids: np.ndarray, edge_id: str, to: str) -> np.ndarray:
        uniq, inverse = np.unique(pids, return_inverse=True)
        mapped = np.empty(len(uniq), np.int64)
        for j, pid in enumerate(uniq.tolist()):
            key = (pid, edge_id)
            nxt = self._next.get(key)
            if nxt is None:
                nodes, edges = self.paths[pid]
                nxt = self._next[key] = len(self.paths)
                self.paths.append(((*nodes, to), (*edges, edge_id)))
            mapped[j] = nxt
        return mapped[inverse]



@functools.lru_cache(maxsize=1024)
def _tree(source: str) -> Tree:
    return parse(source)


def advance_batch(version: CompiledWorkflow, columns: BatchColumns,
                  answer: Answer | None = None) -> BatchWalk:
    """Walk every row from the root as :func:`workflows.advance` would walk its context."""
    store = _Store(columns)
    n = columns.rows
    order = _topological(version)
    index = {nid: i for i, nid in enumerate(order)}
    at = np.zeros(n, np.int64)  # node index (into order) where each row stands
    pid = np.zeros(n, np.int64)
    paths = _Paths(version.root)
    stopped = np.zeros(n, bool)
    decided = np.zeros(n, bool)
    uncompiled: list[tuple[str, str]] = []
    uncompiled_rows: dict[str, np.ndarray] = {}
    per_row = 0
    for k, nid in enumerate(order):
        rows = np.flatnonzero((at == k) & ~stopped)
        if not len(rows):
            continue
        node = version.nodes[nid]
        if node.decision is not None:
            stopped[rows] = decided[rows] = True
            continue
        rows, by_default = _outside(version, node, store, rows, stopped, answer)
        moves: list[tuple[np.ndarray, str, str]] = []
        if len(by_default):
            moves.append((by_default, node.default.id, node.default.to))
        if len(rows):
            taken, slow, bad = _edges(node, store, rows)
            moves += taken
            if bad is not None:
                uncompiled.append((nid, bad))
                uncompiled_rows[nid] = slow
            for i in slow.tolist():
                result = step(version, nid, store.context(i))
                moves.append((np.array([i]), result.edge_id, result.next_node_id))
            per_row += len(slow)
        for moved, edge_id, to in moves:
            if index[to] <= k:
                raise InvariantViolation(f"edge {edge_id} goes back to {to}: not a DAG")
            at[moved] = index[to]
            pid[moved] = paths.extend(pid[moved], edge_id, to)
    if not stopped.all():
        raise InvariantViolation("rows left standing after the last node")
    return BatchWalk(tuple(order), at, decided, pid, tuple(paths.paths), per_row,
                     tuple(uncompiled), uncompiled_rows)


def _outside(version: CompiledWorkflow, node: CompiledNode, store: _Store, rows: np.ndarray,
             stopped: np.ndarray, answer: Answer | None) -> tuple[np.ndarray, np.ndarray]:
    """Outside work at ``node`` as ``advance`` handles it: (rows that try the edges, rows
    that take the default edge); rows that must wait are marked stopped."""
    out = node.outside
    if out is None:
        return rows, rows[:0]
    present = store.app_present(node.id)[rows]
    if out.kind == "webhook":
        sent = rows[~present]
        if len(sent):
            store.set_app(node.id, sent, [dict(WEBHOOK_SENT)] * len(sent), False)
        present = np.ones(len(rows), bool)
    timed = store.cols.get(("apps", node.id, "timed_out"))
    if timed is not None:
        is_timed = np.array([timed.valid[i] and timed.py(i) is True for i in rows.tolist()],
                            bool) if len(rows) else np.zeros(0, bool)
    else:
        is_timed = np.zeros(len(rows), bool)
    done = present.copy()
    if out.kind == "score":
        all_scores = np.ones(len(rows), bool)
        for s in out.scores:
            col = store.cols.get(("scores", s))
            all_scores &= col.valid[rows] if col is not None else False
        done |= all_scores
    waiting = rows[~done & ~is_timed]
    if len(waiting) and answer is not None:
        outputs = answer(out, [store.context(i) for i in waiting.tolist()])
        if outputs is not None:
            if len(outputs) != len(waiting):
                raise InvariantViolation(f"answer gave {len(outputs)} outputs for "
                                         f"{len(waiting)} rows at {node.id}")
            store.set_app(node.id, waiting, list(outputs), out.kind == "score")
            done[~done & ~is_timed] = True
            waiting = waiting[:0]
    stopped[waiting] = True
    return rows[done & ~is_timed], rows[is_timed]


def _edges(node: CompiledNode, store: _Store, rows: np.ndarray
           ) -> tuple[list[tuple[np.ndarray, str, str]], np.ndarray, str | None]:
    """Rows through the node's ordered edges on columns: (moves, rows to step one by one,
    the criterion that could not be evaluated on columns, whence every row steps)."""
    moves: list[tuple[np.ndarray, str, str]] = []
    ev = _Eval(store, rows)
    left = np.ones(len(rows), bool)
    slow = np.zeros(len(rows), bool)
    for edge in node.edges:
        c = edge.criteria
        try:
            if c.constant is not None:
                value, fb = np.full(len(rows), c.constant), np.zeros(len(rows), bool)
            elif not c.flat:
                raise _Unsupported("reads whole records")
            else:
                value, fb = ev.criterion(_tree(c.source))
        except _Unsupported:
            return [], rows, c.source
        slow |= left & fb
        hit = left & ~fb & value
        if hit.any():
            moves.append((rows[hit], edge.id, edge.to))
        left &= ~hit & ~fb
    if left.any():
        moves.append((rows[left], node.default.id, node.default.to))
    return moves, rows[slow], None
