"""The plan DAG: Cursor → Window → Filter → GroupBy → State → Metric, with shared prefixes.

Per stream, a ``Cursor`` walks the reservoir forward up to a time bound and feeds windows:
as a tail it inserts events, as a head it evicts them. Windows whose bounds coincide share
cursors (every ``RANGE`` window shares the tail that takes the current event; ``RANGE 5 MINUTES``
and ``RANGE 5 MINUTES EXCLUDING CURRENT`` share a head). A window holds filters, a filter
holds group-bys, a group-by holds states, a state serves metrics: adding a metric adds only
the nodes that do not exist yet, and fills new ones from the events already in the window
(``backfill``). Cursors advance in an order where each window's tail runs before its head.
Calendar windows (``TUMBLING``/``HOPPING``) share that current-event tail too: the native core
puts each event into its key's open bucket and rolls closed buckets into and out of the window
lazily, per key, when the key is touched or read (keyed.rs); their head evicts nothing and
only holds the reservoir back to the window's start, for backfills. Many ``RANGE`` windows over
one group-by (W1's 120 misaligned ones) evict lazily too: a key with few recent events keeps
them in a short log its windows fold when read, so their heads pass its events without
touching it, and a busier key's states are evicted by the heads as before (native lazy.rs).

The caller (engine.py or offline.py) owns the reservoirs and the state store and must call
``ingest`` with non-decreasing ``ts`` (it clamps; see Engine.ingest).
"""

from __future__ import annotations

import gc
import hashlib
import weakref
from collections.abc import Callable, Iterator, Mapping
from graphlib import TopologicalSorter
from typing import Any

from railflow_metrics_native import StreamCore

from metrics_engine.errors import InvariantViolation, MetricInputError, MetricOutputError
from metrics_engine.language import MetricDef, WindowSpec
from metrics_engine.predicates import compile_expr, render
from metrics_engine.reservoir import StreamReservoir

TS_MAX = 1 << 62

# Which state a function needs: (state kind, argument: moments order, +1 min / -1 max).
STATE_OF = {
    "count": ("count", None), "time_since_last": ("count", None),
    "sum": ("moments", 1), "avg": ("moments", 1),
    "var_samp": ("moments", 2), "var_pop": ("moments", 2),
    "stddev_samp": ("moments", 2), "stddev_pop": ("moments", 2),
    "skewness": ("moments", 3),
    "min": ("extreme", 1), "max": ("extreme", -1),
    "count_distinct": ("distinct", None), "oldest": ("fifo", None),
    "recent": ("recent", None), "ratio": ("ratio", None),
}
CURSORS_PER_STREAM_MAX = 4096
METRICS_MAX = 100_000
# Lazy eviction (native lazy.rs): the `RANGE` tables a group-by needs before its keys' events
# are evicted when the key is touched rather than by every window's head. None: the core's
# default (``railflow_metrics_native.LAZY_MIN_TABLES``, and ``LAZY_MIN_ALLOCATING`` for a
# group-by whose states allocate per new key: sets, queues, power sums); a number set here is
# both, so a large one keeps every table eager.
LAZY_MIN_TABLES: int | None = None


def _short_id(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


# -- cursors -------------------------------------------------------------------------------

def cursor_specs(w: WindowSpec) -> tuple[tuple, tuple | None]:
    """(tail spec, head spec) of a window; a spec names a bound a cursor advances to."""
    if w.kind == "unbounded":
        return ("all",), None
    if w.kind == "hop":
        # Calendar windows take the current event into its (still open) bucket natively; the
        # head only holds the reservoir back to the window's start, for backfills.
        return ("all",), ("hop", w.every_ms, w.align_ms, w.size_ms)
    tail: tuple
    if w.exclude_current and w.delay_ms == 0:
        tail = ("prev",)
    elif w.delay_ms == 0:
        tail = ("all",)
    else:
        tail = ("le", w.delay_ms)
    return tail, ("le", w.delay_ms + w.size_ms)


def spec_text(spec: tuple) -> str:
    if spec[0] == "all":
        return "current"
    if spec[0] == "prev":
        return "before-current"
    if spec[0] == "le":
        return f"ts <= t - {spec[1]}ms"
    return f"ts < bucket(t, {spec[1]}ms, +{spec[2]}ms) - {spec[3]}ms"


def limits(spec: tuple, t: int, next_pos: int) -> tuple[int, int]:
    """(largest ts, end position) a cursor of ``spec`` may pass at time ``t``."""
    kind = spec[0]
    if kind == "all":
        return TS_MAX, next_pos
    if kind == "prev":
        return TS_MAX, next_pos - 1
    if kind == "le":
        return t - spec[1], next_pos
    every, align, lag = spec[1], spec[2], spec[3]
    return (t - align) // every * every + align - lag - 1, next_pos


# -- the values of a batch as columns ------------------------------------------------------
#
# ``ingest_many(..., arrow=True)`` returns every metric as a pyarrow array whose type follows
# from the metric and the type of its field in the batch, never from the values:
# COUNT, COUNT DISTINCT and TIME_SINCE_LAST are int64; AVG, the variances and deviations,
# SKEWNESS and RATIO are float64; SUM is int64 over an integer or boolean field, else float64;
# MIN, MAX, OLDEST and RECENT take the field's type (int64, float64, bool or string). A field
# given as a Python list takes the type pyarrow would give it (ints with floats: float64); one
# the batch lacks, or gives as all-null, the type it had in the stream's last batch (else
# float64). A value its column cannot hold exactly raises ``MetricOutputError`` (outcols.rs).

INT_FUNCS = frozenset({"count", "count_distinct", "time_since_last"})
FLOAT_FUNCS = frozenset({"avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop", "skewness",
                         "ratio"})
_ARROW_TYPE = {"i": "int64", "f": "float64", "b": "bool_", "s": "string", "n": "null"}


def value_kind(func: str, field_kind: str | None) -> str:
    """The column type of a metric's values (``"i"`` int64, ``"f"`` float64, ``"b"`` bool,
    ``"s"`` string, ``"n"`` null) from its function and its field's (None: not known)."""
    if func in INT_FUNCS:
        return "i"
    if func in FLOAT_FUNCS:
        return "f"
    if func == "sum":
        return "i" if field_kind in ("i", "b") else "f"
    return field_kind if field_kind in ("i", "f", "b", "s") else "f"


def _list_kind(values: list) -> str | None:
    """The kind pyarrow would type a list of Python values as (None: all null, or a mix)."""
    types = {type(v) for v in values if v is not None}
    if not types:
        return None
    if types <= {int}:
        return "i"
    if types <= {int, float}:
        return "f"
    if types == {bool}:
        return "b"
    if types == {str}:
        return "s"
    return None


def field_kind(col: tuple) -> str | None:
    """The kind of a ``typed_column`` (None: all null or untyped)."""
    if col[0] == "o":
        return _list_kind(col[2])
    return None if col[0] == "n" else col[0]


# Struct types of exported batches by the export's `schema_key` (a hash of the column names
# and formats): (key, the batch's struct type, its column names). Imported once per process,
# not once per engine: 405 fields cost ~0.5 ms of Python to import (W2's quick run makes an
# engine per 1,000 events). A few plans per process; bounded all the same.
_STRUCT_TYPES: dict[int, tuple] = {}
_STRUCT_TYPES_MAX = 64


def _struct_type(key: int, schema_address: int) -> tuple:
    """(key, struct type, names) of an export's schema (``Exported.addresses()[1]``), which
    is imported (and so released) only if no export of the same key was."""
    import pyarrow as pa

    known = _STRUCT_TYPES.get(key)
    if known is None:
        t = pa.DataType._import_from_c(schema_address)
        known = (key, t, t.names)
        if len(_STRUCT_TYPES) >= _STRUCT_TYPES_MAX:
            _STRUCT_TYPES.clear()
        _STRUCT_TYPES[key] = known
    return known


def _arrow_column(v: tuple, rows: int) -> Any:
    """A column of ``rows`` values the core handed back as buffers (``OutCol::into_py`` in
    outcols.rs): ``("f8" | "i8", values, validity, nulls)``, ``("b", value bits, validity,
    nulls)``, ``("s", int32 offsets, data, validity, nulls)`` or ``("n", rows)``; values
    little-endian, one validity bit per row (LSB first)."""
    import pyarrow as pa

    if v[0] == "n":
        return pa.nulls(rows)
    *data, valid, nulls = v[1:]
    t = {"f8": pa.float64(), "i8": pa.int64(), "b": pa.bool_(), "s": pa.string()}[v[0]]
    bufs = [pa.py_buffer(valid) if nulls else None, *(pa.py_buffer(d) for d in data)]
    return pa.Array.from_buffers(t, rows, bufs, null_count=nulls)


def column_of(values: list, kind: str) -> Any:
    """A list of a metric's values (as ``ingest`` gives them) as the pyarrow array of ``kind``
    (``value_kind``), or None when a value does not fit it exactly (the rules of outcols.rs:
    an int goes into a float64 column only if the float equals it, a float into an int64
    column only if integral, a bool into either as 0/1)."""
    import pyarrow as pa

    conv: list = values
    if kind == "i":
        conv = []
        for v in values:
            if isinstance(v, float):
                if not v.is_integer():
                    return None
                v = int(v)
            elif v is not None and not isinstance(v, int):
                return None
            if v is not None and not -(1 << 63) <= v < (1 << 63):
                return None
            conv.append(None if v is None else int(v))
    elif kind == "f":
        conv = []
        for v in values:
            if isinstance(v, int):  # and bool
                try:
                    x = float(v)
                except OverflowError:
                    return None
                if x != v:
                    return None
                v = x
            elif v is not None and not isinstance(v, float):
                return None
            conv.append(v)
    elif kind == "b":
        if any(v is not None and not isinstance(v, bool) for v in values):
            return None
    elif kind == "s":
        if any(v is not None and not isinstance(v, str) for v in values):
            return None
    elif any(v is not None for v in values):
        return None
    return pa.array(conv, getattr(pa, _ARROW_TYPE[kind])())


def _kind_of(c: Any, values: list) -> str | None:
    """``field_kind`` of a column the Python path turned into ``values`` (the same kinds
    ``typed_column`` gives it)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(c, pa.Array | pa.ChunkedArray):
        t = c.type
        if pa.types.is_integer(t):
            return "i"
        if pa.types.is_floating(t):
            return "f"
        if pa.types.is_boolean(t):
            return "b"
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "s"
        if pa.types.is_null(t):
            return None
    elif isinstance(c, np.ndarray) and c.ndim == 1 and c.dtype.kind in "biuf":
        return {"b": "b", "i": "i", "u": "i", "f": "f"}[c.dtype.kind]
    return _list_kind(values)


def _misfit(values: dict, misfits: list[tuple[str, int]], kinds: dict[str, str]) -> Exception:
    """The ``MetricOutputError`` of a batch whose values did not all fit their columns."""
    name, row = misfits[0]
    more = f" (and {len(misfits) - 1} more metrics)" if len(misfits) > 1 else ""
    return MetricOutputError(
        f"metric {name!r}, row {row}: {values[name][row]!r} does not fit its "
        f"{_ARROW_TYPE[kinds[name]].rstrip('_')} column exactly{more}; the batch was ingested, "
        f"the error's values hold every value as a list", name, row, values)


def arrow_values(c: Any) -> list:
    """An Arrow array's values as ``to_pylist`` gives them, through numpy where that gives the
    same Python objects about ten times faster: numbers and booleans without nulls, strings."""
    import pyarrow as pa

    t = c.type
    plain = (pa.types.is_integer(t) or pa.types.is_boolean(t)
             or pa.types.is_float32(t) or pa.types.is_float64(t))
    if (plain and c.null_count == 0) or pa.types.is_string(t) or pa.types.is_large_string(t):
        return c.to_numpy(zero_copy_only=False).tolist()
    return c.to_pylist()


I64_MAX = (1 << 63) - 1


def typed_column(c: Any) -> tuple:
    """A column for ``StreamCore.ingest_arrays``: ``(kind, valid, buffers...)`` with the values
    as little-endian bytes where the type allows (64-bit integers, floats, booleans, strings as
    offsets + UTF-8 data, all-null), else ``("o", None, list)`` of the Python values that
    ``arrow_values`` / ``tolist`` give (the native core lowers those one by one)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(c, pa.ChunkedArray):
        c = c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()
    if isinstance(c, pa.Array):
        t = c.type
        valid = (None if c.null_count == 0
                 else c.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
        if pa.types.is_null(t):
            return ("n", None)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            _, offs_buf, data_buf = c.buffers()
            offs = np.frombuffer(offs_buf, dtype=np.int64 if pa.types.is_large_string(t)
                                 else np.int32)[c.offset:c.offset + len(c) + 1].astype(np.int64)
            lo, hi = (int(offs[0]), int(offs[-1])) if len(offs) else (0, 0)
            data = data_buf.slice(lo, hi - lo).to_pybytes() if data_buf is not None else b""
            return ("s", valid, (offs - lo).tobytes(), data)
        # A column with no nulls is taken as it is: `fill_null` would copy it whole, and
        # `astype` again when its type is already the one sent (about 0.05 us per event
        # of W1's 17 columns).
        full = c.null_count == 0
        if pa.types.is_boolean(t):
            return ("b", valid, (c if full else c.fill_null(False))
                    .to_numpy(zero_copy_only=False).astype(np.uint8).tobytes())
        if pa.types.is_integer(t) and not (pa.types.is_uint64(t) and c.null_count < len(c)
                                           and pc.max(c).as_py() > I64_MAX):
            return ("i", valid, (c if full else c.fill_null(0)).to_numpy()
                    .astype(np.int64, copy=False).tobytes())
        if pa.types.is_float32(t) or pa.types.is_float64(t):
            return ("f", valid, (c if full else c.fill_null(0)).to_numpy()
                    .astype(np.float64, copy=False).tobytes())
        return ("o", None, arrow_values(c))
    if isinstance(c, np.ndarray) and c.ndim == 1:
        if c.dtype.kind == "b":
            return ("b", None, c.astype(np.uint8).tobytes())
        if c.dtype.kind == "i" or (c.dtype.kind == "u" and (len(c) == 0 or c.max() <= I64_MAX)):
            return ("i", None, c.astype(np.int64).tobytes())
        if c.dtype.kind == "f":
            return ("f", None, c.astype(np.float64).tobytes())
        return ("o", None, c.tolist())
    return ("o", None, list(c))


def scan(res: StreamReservoir, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """(pos, ts, event) for positions in [start, end) of a reservoir."""
    if start >= end:
        return
    k, idx = res.locate(start)
    events = res.chunk(k)
    pos = start
    while pos < end:
        if idx >= len(events):
            k += 1
            events = res.chunk(k)
            idx = 0
        ts, ev = events[idx]
        yield pos, ts, ev
        pos += 1
        idx += 1


class Cursor:
    """An iterator over one stream's reservoir feeding windows; it runs natively.

    Python keeps its spec and subscribers (for sharing and ``explain``); the position lives in
    the stream's native core."""

    def __init__(self, sp: StreamPlan, cid: int, spec: tuple, pos: int):
        self.sp = sp
        self.cid = cid
        self.spec = spec
        self.start = pos  # the position a new cursor starts at (before the core knows it)
        self.inserts: list[WindowNode] = []  # windows this cursor is the tail of
        self.evicts: list[WindowNode] = []  # windows this cursor is the head of

    @property
    def pos(self) -> int:
        return self.sp.core.cursor_pos(self.cid) if self.sp.synced(self) else self.start

    def seek(self, pos: int) -> None:
        self.sp.core.seek(self.cid, pos)


# -- nodes ---------------------------------------------------------------------------------

class StateNode:
    """One state per group key (e.g. the power sums of ``amount``), serving metrics."""

    def __init__(self, kind: str, arg, field: str | None, predicate):
        self.kind, self.arg, self.field = kind, arg, field
        self.predicate = predicate
        self.pred_text = render(predicate) if predicate is not None else ""
        self.sid = f"{kind}:{arg}:{field}:{self.pred_text}"
        self.metrics: list[MetricNode] = []


class GroupNode:
    def __init__(self, filter_id: str, fields: tuple[str, ...]):
        self.fields = fields
        self.gid = _short_id(f"{filter_id}|{','.join(fields)}")
        self.states: list[StateNode] = []


class FilterNode:
    def __init__(self, window_id: str, where):
        self.where = where
        self.text = render(where) if where is not None else ""
        self.fid = f"{window_id}|{self.text}"
        self.groups: list[GroupNode] = []


class WindowNode:
    """A window of one stream: inserts from its tail cursor, evictions from its head."""

    def __init__(self, stream: str, spec: WindowSpec, start_pos: int, tail: Cursor,
                 head: Cursor | None):
        self.stream, self.spec = stream, spec
        self.wid = f"{stream}|{spec.text()}"
        self.start_pos = start_pos
        self.filters: list[FilterNode] = []
        self.tail = tail
        self.head = head


class MetricNode:
    def __init__(self, d: MetricDef, window: WindowNode, flt: FilterNode, group: GroupNode,
                 state: StateNode):
        self.d, self.window, self.filter, self.group, self.state = d, window, flt, group, state


def _spec_args(spec: tuple) -> tuple[str, int, int, int]:
    args = list(spec[1:]) + [0, 0, 0]
    return spec[0], args[0], args[1], args[2]


class StreamPlan:
    """One stream's nodes, and the native core that runs them (``sync`` lowers the plan)."""

    def __init__(self, name: str, res: StreamReservoir):
        self.name, self.res = name, res
        self.core = StreamCore(res, MetricInputError, InvariantViolation)
        if LAZY_MIN_TABLES is not None:
            self.core.lazy_min_tables = LAZY_MIN_TABLES
            self.core.lazy_min_allocating = LAZY_MIN_TABLES
        # The reservoir reaches the core through a weak reference: the core holds the
        # reservoir natively, where the collector cannot see it, so a bound method here made a
        # cycle it could never free (every dropped plan kept its whole state: a features task
        # per partition, a parity engine per key range).
        plan = weakref.ref(self)

        def hand_off() -> None:
            sp = plan()
            if sp is not None:
                sp.core.hand_off()

        res.hand_off = hand_off
        self.cursors: dict[tuple, Cursor] = {}
        self.windows: dict[WindowSpec, WindowNode] = {}
        self.order: list[Cursor] = []
        self.window_index: dict[WindowSpec, int] = {}
        self._known: set[int] = set()  # cursor ids the core has
        self.native_batch = True  # ingest_many runs natively (no predicate needs Python)
        self.value_funcs: list[tuple[str, str, str | None]] = []  # (metric, function, field)
        self.field_kinds: dict[str, str] = {}  # each field's kind in the last batch typing it
        self._kinds_memo: tuple = (None, None, {})  # value_kinds' last (funcs, fields, answer)
        # The last batch's Arrow type: (export's schema_key, its struct type, names).
        self.arrow_schema: tuple | None = None
        self._next_cid = 0

    def synced(self, c: Cursor) -> bool:
        return c.cid in self._known

    def value_kinds(self, declared: dict[str, str | None]) -> dict[str, str]:
        """Each metric's column type (``value_kind``) for a batch whose fields have the kinds
        ``declared`` (a field the batch lacks or does not type keeps its last kind)."""
        for f, k in declared.items():
            if k is not None:
                self.field_kinds[f] = k
        # The same plan and field kinds as the batch before: the same answer (W1's 240
        # metrics made it anew per batch, ~0.5 µs an event at 500 rows a batch). Shared
        # between batches: not to be changed.
        funcs, fields, kinds = self._kinds_memo
        now = tuple(self.field_kinds.items())
        if funcs is self.value_funcs and fields == now:
            return kinds
        kinds = {name: value_kind(func, self.field_kinds.get(field) if field else None)
                 for name, func, field in self.value_funcs}
        self._kinds_memo = (self.value_funcs, now, kinds)
        return kinds

    def new_cursor(self, spec: tuple, pos: int) -> Cursor:
        self._next_cid += 1
        c = self.cursors[spec] = Cursor(self, self._next_cid, spec, pos)
        return c

    def floor(self) -> int:
        """The oldest position any cursor still needs."""
        if not self.cursors:
            return self.res.next_pos
        return min(c.pos for c in self.cursors.values())

    def sync(self, metrics: dict[str, MetricNode]) -> None:
        """Lower the plan (fields, predicates, cursors, windows, outputs) into the core."""
        deps: dict[tuple, set[tuple]] = {c.spec: set() for c in self.cursors.values()}
        for w in self.windows.values():
            if w.head is not None:
                deps[w.head.spec].add(w.tail.spec)  # a window's tail runs before its head
        self.order = [self.cursors[s] for s in TopologicalSorter(deps).static_order()]
        fields: dict[str, int] = {}
        preds: dict[str, tuple[int, Callable]] = {}
        exprs: list = []

        def field(name: str) -> int:
            return fields.setdefault(name, len(fields))

        def pred(expr) -> int:
            text = render(expr)
            if text not in preds:
                preds[text] = (len(preds), compile_expr(expr))
                exprs.append(expr)
            return preds[text][0]

        windows, self.window_index = [], {}
        where: dict[str, int | None] = {}
        for w in self.windows.values():
            self.window_index[w.spec] = len(windows)
            routes = []
            for f in w.filters:
                groups = []
                for g in f.groups:
                    slots = []
                    for s in g.states:
                        if s.predicate is not None:
                            inp = ("pred", pred(s.predicate))
                        elif s.field is None:
                            inp = ("one", 0)
                        else:
                            inp = ("field", field(s.field))
                        slots.append((s.sid, s.kind, s.arg or 0, *inp))
                    groups.append((g.gid, [field(x) for x in g.fields], slots))
                    where[g.gid] = pred(f.where) if f.where is not None else None
                routes.append((pred(f.where) if f.where is not None else None, groups))
            hop = ((w.spec.every_ms, w.spec.align_ms, w.spec.size_ms // w.spec.every_ms)
                   if w.spec.kind == "hop" else None)
            windows.append((w.start_pos, w.tail.cid, w.head.cid if w.head else None, routes, hop))
        outs: dict[str, tuple] = {}
        for m in metrics.values():
            if m.d.stream == self.name:
                g = m.group
                o = outs.setdefault(g.gid, (g.gid, [field(x) for x in g.fields],
                                            self.window_index[m.window.spec], where[g.gid], []))
                o[4].append((m.d.name, g.states.index(m.state), m.d.func))
        cursors = [(c.cid, *_spec_args(c.spec), c.start) for c in self.cursors.values()]
        self.core.set_plan(list(fields), [f for _, f in preds.values()], cursors,
                           [c.cid for c in self.order], windows, list(outs.values()))
        # The batched path runs natively when every predicate lowers (predicate.rs).
        self.native_batch = self.core.lower_preds(exprs)
        self.value_funcs = [(m.d.name, m.d.func, m.d.field) for m in metrics.values()
                            if m.d.stream == self.name]
        self._known = {c.cid for c in self.cursors.values()}


class Plan:
    """All streams' DAGs. ``make_reservoir(stream)`` creates reservoirs."""

    def __init__(self, make_reservoir: Callable[[str], StreamReservoir]):
        self.make_reservoir = make_reservoir
        self.streams: dict[str, StreamPlan] = {}
        self.metrics: dict[str, MetricNode] = {}

    # -- changing the plan -------------------------------------------------------------
    def add(self, d: MetricDef, *, recovery: tuple[int, int] | None = None) -> None:
        """Add a metric and the nodes it lacks, filling new nodes from the reservoir.

        A new window starts at the oldest position any cursor of its stream still needs (or
        at its head's position when it shares one). ``recovery`` = (window start, cursor
        position) rebuilds the plan before a replay: nothing is filled."""
        if len(self.metrics) >= METRICS_MAX:
            raise ValueError(f"at most {METRICS_MAX} metrics")
        sp = self.streams.get(d.stream)
        if sp is None:
            sp = self.streams[d.stream] = StreamPlan(d.stream, self.make_reservoir(d.stream))
        found = sp.windows.get(d.window)
        new_window = found is None
        w = self._new_window(sp, d.window, recovery) if found is None else found
        flt = next((f for f in w.filters if f.text == (render(d.where) if d.where else "")), None)
        if flt is None:
            flt = FilterNode(w.wid, d.where)
            w.filters.append(flt)
        g = next((g for g in flt.groups if g.fields == d.group_by), None)
        if g is None:
            g = GroupNode(flt.fid, d.group_by)
            flt.groups.append(g)
        kind, arg = STATE_OF[d.func]
        s = self._find_state(g, kind, arg, d)
        new_state = s is None
        if s is None:
            s = StateNode(kind, arg, d.field, d.predicate)
            g.states.append(s)
        m = MetricNode(d, w, flt, g, s)
        s.metrics.append(m)
        self.metrics[d.name] = m
        if new_window:
            self._fill_new_window(sp, w, fill=recovery is None)
        else:
            sp.sync(self.metrics)
            if new_state and recovery is None:
                self._backfill(sp, w, g, s)

    def _find_state(self, g: GroupNode, kind, arg, d: MetricDef) -> StateNode | None:
        pred_text = render(d.predicate) if d.predicate is not None else ""
        for s in g.states:
            if s.kind != kind or s.field != d.field or s.pred_text != pred_text:
                continue
            if kind == "moments" and s.arg < arg:
                continue
            if kind != "moments" and s.arg != arg:
                continue
            return s
        return None

    def _cursor(self, sp: StreamPlan, spec: tuple, pos: int) -> tuple[Cursor, bool]:
        c = sp.cursors.get(spec)
        if c is not None:
            return c, False
        if len(sp.cursors) >= CURSORS_PER_STREAM_MAX:
            raise ValueError(f"at most {CURSORS_PER_STREAM_MAX} cursors per stream")
        return sp.new_cursor(spec, pos), True

    def _new_window(self, sp: StreamPlan, spec: WindowSpec,
                    recovery: tuple[int, int] | None) -> WindowNode:
        tail_spec, head_spec = cursor_specs(spec)
        if recovery is not None:
            start, cursor_pos = recovery
        else:
            start = cursor_pos = sp.floor()
        head = None
        if head_spec is not None:
            head, created = self._cursor(sp, head_spec, cursor_pos)
            if not created and recovery is None:
                start = cursor_pos = head.pos
        tail, _ = self._cursor(sp, tail_spec, cursor_pos)
        w = WindowNode(sp.name, spec, start, tail, head)
        sp.windows[spec] = w
        return w

    def _fill_new_window(self, sp: StreamPlan, w: WindowNode, *, fill: bool) -> None:
        """Subscribe a new window to its cursors and bring it up to date with the events
        already ingested (unless ``fill`` is false: recovery replays instead)."""
        res = sp.res
        tail_new = not w.tail.inserts and not w.tail.evicts
        head_new = w.head is not None and not w.head.inserts and not w.head.evicts
        w.tail.inserts.append(w)
        if w.head is not None:
            w.head.evicts.append(w)
        sp.sync(self.metrics)
        if not fill or res.last_ts is None:
            return
        if w.tail.pos < w.start_pos:
            raise InvariantViolation("a window's tail is behind its start")
        if tail_new:  # a new tail: catch it up alone
            sp.core.advance(w.tail.cid, res.last_ts, res.next_pos)
        else:
            sp.core.fill(sp.window_index[w.spec], w.start_pos, w.tail.pos)
        if w.head is not None and head_new:
            sp.core.advance(w.head.cid, res.last_ts, res.next_pos)

    def _backfill(self, sp: StreamPlan, w: WindowNode, g: GroupNode, s: StateNode) -> None:
        """Fill a new state node of an existing window with the window's current events."""
        start = max(w.start_pos, w.head.pos if w.head is not None else w.start_pos)
        sp.core.fill(sp.window_index[w.spec], start, w.tail.pos, (g.gid, s.sid))

    def remove(self, name: str) -> None:
        m = self.metrics.pop(name)
        sp = self.streams[m.d.stream]
        s, g, flt, w = m.state, m.group, m.filter, m.window
        s.metrics.remove(m)
        if not s.metrics:
            g.states.remove(s)
            if not g.states:
                flt.groups.remove(g)
        if not flt.groups:
            w.filters.remove(flt)
        if not w.filters:
            del sp.windows[w.spec]
            w.tail.inserts.remove(w)
            if w.head is not None:
                w.head.evicts.remove(w)
            for c in [w.tail, w.head]:
                if c is not None and not c.inserts and not c.evicts:
                    sp.cursors.pop(c.spec, None)
        sp.sync(self.metrics)
        sp.res.trim(sp.floor())

    # -- running -----------------------------------------------------------------------
    def ingest(self, stream: str, event: Mapping[str, Any], ts: int) -> dict[str, Any]:
        """One event's values; the core clamps ``ts`` to the stream's last time."""
        sp = self.streams.get(stream)
        if sp is None:
            return {}
        return sp.core.ingest(event, ts)

    def ingest_many(self, stream: str, ts: Any, columns: Any,
                    arrow: bool = False) -> dict[str, Any]:
        """See ``Engine.ingest_many``: Arrow/numpy columns in, one list per metric out, or with
        ``arrow`` one pyarrow array per metric, of the type its function and field give
        (``value_kind``; made from the core's buffers where the batch runs natively, with no
        Python object per value). A value its column cannot hold exactly raises
        ``MetricOutputError`` after the batch went in."""
        import numpy as np
        import pyarrow as pa

        if isinstance(columns, pa.RecordBatch | pa.Table):
            columns = {name: columns.column(name) for name in columns.schema.names}
        sp = self.streams.get(stream)
        if sp is not None and sp.native_batch:
            # No predicate needs the events as Python objects: typed columns go in whole.
            if isinstance(ts, pa.ChunkedArray | pa.Array):
                ts = ts.to_numpy(zero_copy_only=False)
            ts_bytes = np.asarray(ts, dtype=np.int64).tobytes()
            cols = [typed_column(c) for c in columns.values()]
            if not arrow:
                return sp.core.ingest_arrays(list(columns), cols, ts_bytes)
            kinds = sp.value_kinds({n: field_kind(c) for n, c in zip(columns, cols, strict=True)})
            out, misfits = sp.core.ingest_arrays(list(columns), cols, ts_bytes, kinds)
            rows = len(ts_bytes) // 8
            if not isinstance(out, dict):
                # All the columns as one record batch (the native core's buffers, no copy),
                # imported as one struct array whose children are the columns and split by
                # `flatten` (a record batch's `columns` wraps a schema field per column
                # besides the array). Its struct type is imported once per process per names
                # and formats (`_struct_type`), then only the arrays.
                key, arrays = out.schema_key(), out.addresses()[0]
                known = sp.arrow_schema
                if known is None or known[0] != key:
                    known = sp.arrow_schema = _struct_type(key, out.addresses()[1])
                flat = pa.Array._import_from_c(arrays, known[1]).flatten()
                return dict(zip(known[2], flat, strict=True))
            if misfits:
                values = {n: v if isinstance(v, list) else _arrow_column(v, rows).to_pylist()
                          for n, v in out.items()}
                raise _misfit(values, misfits, kinds)
            return {n: _arrow_column(v, rows) for n, v in out.items()}
        names, cols = list(columns), []
        for c in columns.values():  # one Python list per column: far cheaper than per row
            if isinstance(c, pa.ChunkedArray | pa.Array):
                cols.append(arrow_values(c))
            elif isinstance(c, np.ndarray):
                cols.append(c.tolist())
            else:
                cols.append(list(c))
        if isinstance(ts, pa.ChunkedArray | pa.Array):
            ts = ts.to_numpy(zero_copy_only=False)
        ts_list = np.asarray(ts, dtype=np.int64).tolist()
        if any(len(c) != len(ts_list) for c in cols):
            raise ValueError(f"columns of other lengths than the {len(ts_list)} timestamps")
        if sp is None:
            return {}
        # The batch makes an event dict per row, none of them cyclic: the cyclic collector
        # would only walk them again and again (about a tenth of the batch's CPU).
        collecting = gc.isenabled()
        gc.disable()
        try:
            out = sp.core.ingest_columns(names, cols, ts_list)
        finally:
            if collecting:
                gc.enable()
        if not arrow:
            return out
        kinds = sp.value_kinds({n: _kind_of(c, v)
                                for (n, c), v in zip(columns.items(), cols, strict=True)})
        arrays = {n: column_of(v, kinds[n]) for n, v in out.items()}
        misfits = [(n, next(i for i, x in enumerate(out[n]) if column_of([x], kinds[n]) is None))
                   for n, a in arrays.items() if a is None]
        if misfits:
            raise _misfit(out, misfits, kinds)
        return arrays

    def replay(self, stream: str, start: int, end: int) -> None:
        """Recompute state from reservoir events [start, end) (recovery after a crash)."""
        sp = self.streams[stream]
        advance = sp.core.advance_all
        for pos, ts, _ev in scan(sp.res, start, end):
            advance(ts, pos + 1)

    def query(self, name: str, key: Any, ts: int) -> Any:
        """A metric's value for ``key`` at ``ts`` without an event; changes nothing."""
        m = self.metrics[name]
        sp = self.streams[m.d.stream]
        res = sp.res
        if res.last_ts is not None and ts < res.last_ts:
            ts = res.last_ts
        fields = m.d.group_by
        if not fields:
            keys: list = []
        elif len(fields) == 1:
            keys = [key[0] if isinstance(key, tuple | list) and len(key) == 1 else key]
        else:
            keys = list(key)
        return sp.core.query(name, keys, ts)

    def explain(self) -> str:
        lines = []
        for sp in self.streams.values():
            res = sp.res
            lines.append(f"stream {sp.name}: positions [{res.first_pos()}, {res.next_pos}), "
                         f"{len(res.chunks)} closed chunks retained, durable up to "
                         f"{res.durable_pos}")
            for c in sp.order:
                lines.append(f"  cursor {spec_text(c.spec)} at {c.pos}: tail of "
                             f"{len(c.inserts)}, head of {len(c.evicts)} window(s)")
            for w in sp.windows.values():
                head = spec_text(w.head.spec) if w.head is not None else "none"
                lines.append(f"  window {w.spec.text()} (tail: {spec_text(w.tail.spec)}; "
                             f"head: {head}; from position {w.start_pos})")
                for f in w.filters:
                    lines.append(f"    filter {f.text or 'TRUE'}")
                    for g in f.groups:
                        lines.append(f"      group by {', '.join(g.fields) or '()'} [{g.gid}]")
                        for s in g.states:
                            lines.append(f"        state {s.kind}({s.field or ''}"
                                         f"{render(s.predicate) if s.predicate else ''})"
                                         + (f" order {s.arg}" if s.kind == "moments" else ""))
                            for m in s.metrics:
                                lines.append(f"          metric {m.d.name} = {m.d.func.upper()}")
        return "\n".join(lines)
