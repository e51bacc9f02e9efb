"""The plan DAG: Cursor → Window → Filter → GroupBy → State → Metric, with shared prefixes.

Per stream, a ``Cursor`` walks the reservoir forward up to a time bound and feeds windows:
as a tail it inserts events, as a head it evicts them. Windows whose bounds coincide share
cursors (every ``RANGE`` window shares the tail that takes the current event; ``RANGE 5 MINUTES``
and ``RANGE 5 MINUTES EXCLUDING CURRENT`` share a head). A window holds filters, a filter
holds group-bys, a group-by holds states, a state serves metrics: adding a metric adds only
the nodes that do not exist yet, and fills new ones from the events already in the window
(``backfill``). Cursors advance in an order where each window's tail runs before its head.

The caller (engine.py or offline.py) owns the reservoirs and the state store and must call
``ingest`` with non-decreasing ``ts`` (it clamps; see Engine.ingest).
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Callable, Iterator, Mapping
from graphlib import TopologicalSorter
from typing import Any

from metrics_engine.aggregations import CLASSES, FINALIZERS, STATE_OF, new_state
from metrics_engine.errors import InvariantViolation
from metrics_engine.language import MetricDef, WindowSpec
from metrics_engine.predicates import compile_expr, render
from metrics_engine.reservoir import StreamReservoir
from metrics_engine.state import StateStore

TS_MAX = 1 << 62
CURSORS_PER_STREAM_MAX = 4096
METRICS_MAX = 100_000


def _short_id(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


# -- cursors -------------------------------------------------------------------------------

def cursor_specs(w: WindowSpec) -> tuple[tuple, tuple | None]:
    """(tail spec, head spec) of a window; a spec names a bound a cursor advances to."""
    if w.kind == "unbounded":
        return ("all",), None
    if w.kind == "hop":
        return ("hop", w.every_ms, w.align_ms, 0), ("hop", w.every_ms, w.align_ms, w.size_ms)
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
    """An iterator over one stream's reservoir that feeds the windows subscribed to it."""

    def __init__(self, res: StreamReservoir, spec: tuple, pos: int):
        self.res = res
        self.spec = spec
        self.pos = pos
        self.k, self.idx = res.locate(pos)
        self.events = res.chunk(self.k)
        self.inserts: list[WindowNode] = []  # windows this cursor is the tail of
        self.evicts: list[WindowNode] = []  # windows this cursor is the head of
        self.is_all = spec == ("all",)
        self.stale = False  # moved by the fast path of Plan.ingest: chunk refs need a seek

    def seek(self, pos: int) -> None:
        self.pos = pos
        self.k, self.idx = self.res.locate(pos)
        self.events = self.res.chunk(self.k)
        self.stale = False

    def advance(self, t: int, next_pos: int) -> None:
        lim, end = limits(self.spec, t, next_pos)
        pos = self.pos
        if pos >= end:
            return
        if self.stale:
            self.seek(pos)
        events, idx = self.events, self.idx
        inserts, evicts = self.inserts, self.evicts
        while pos < end:
            if idx >= len(events):
                self.k += 1
                events = self.events = self.res.chunk(self.k)
                idx = 0
                self.res.prefetch(self.k + 1)
            ts, ev = events[idx]
            if ts > lim:
                break
            for w in inserts:
                w.insert(ev, ts, pos)
            for w in evicts:
                w.evict(ev, ts, pos)
            pos += 1
            idx += 1
        self.pos, self.idx = pos, idx


# -- nodes ---------------------------------------------------------------------------------

class StateNode:
    """One state per group key (e.g. the power sums of ``amount``), serving metrics."""

    def __init__(self, kind: str, arg, field: str | None, predicate):
        self.kind, self.arg, self.field = kind, arg, field
        self.predicate = predicate
        pred_text = render(predicate) if predicate is not None else ""
        self.sid = f"{kind}:{arg}:{field}:{pred_text}"
        if predicate is not None:
            fn = compile_expr(predicate)
            self.value: Callable = lambda ev: bool(fn(ev))
        elif field is None:
            self.value = lambda ev: 1
        else:
            self.value = lambda ev, f=field: ev.get(f)
        self.metrics: list[MetricNode] = []

    def make(self):
        return new_state(self.kind, self.arg)

    def maker(self) -> Callable:
        return functools.partial(CLASSES[self.kind], self.arg) if self.arg is not None \
            else CLASSES[self.kind]


class GroupNode:
    def __init__(self, filter_id: str, fields: tuple[str, ...]):
        self.fields = fields
        self.gid = _short_id(f"{filter_id}|{','.join(fields)}")
        if not fields:
            self.key_fn: Callable = lambda ev: ()
        elif len(fields) == 1:
            f0 = fields[0]
            self.key_fn = lambda ev: ev.get(f0)
        else:
            self.key_fn = lambda ev: tuple([ev.get(f) for f in fields])
        self.states: list[StateNode] = []
        self._slots: list[tuple] = []

    def refresh(self) -> None:
        self._slots = [(s.sid, s.maker(), s.field if s.predicate is None else None, s.value)
                       for s in self.states]


class FilterNode:
    def __init__(self, window_id: str, where):
        self.where = where
        self.text = render(where) if where is not None else ""
        self.fid = f"{window_id}|{self.text}"
        self.pred = compile_expr(where) if where is not None else None
        self.groups: list[GroupNode] = []


class WindowNode:
    """A window of one stream: inserts from its tail cursor, evictions from its head."""

    def __init__(self, stream: str, spec: WindowSpec, store: StateStore, start_pos: int,
                 tail: Cursor, head: Cursor | None):
        self.stream, self.spec, self.store = stream, spec, store
        self.wid = f"{stream}|{spec.text()}"
        self.start_pos = start_pos
        self.filters: list[FilterNode] = []
        self.tail = tail
        self.head = head
        self._route: list = []

    def refresh(self) -> None:
        """Precompute the routes of an event: (filter, [(gid, key function, state slots)])."""
        for f in self.filters:
            for g in f.groups:
                g.refresh()
        self._route = [(f.pred, [(g.gid, g.fields[0] if len(g.fields) == 1 else None, g.key_fn,
                                  g._slots) for g in f.groups])
                       for f in self.filters]

    def insert(self, ev, ts, pos) -> None:
        if pos < self.start_pos:
            return
        store = self.store
        cache = store.cache
        for pred, groups in self._route:
            if pred is not None and not pred(ev):
                continue
            for gid, kf, key_fn, slots in groups:
                key = ev.get(kf) if kf is not None else key_fn(ev)
                b = cache.get((gid, key))
                if b is None:
                    b = store.get(gid, key)
                for sid, make, field, value in slots:
                    st = b.get(sid)
                    if st is None:
                        st = b[sid] = make()
                    st.add(ev.get(field) if field is not None else value(ev), ts, pos)

    def insert_only(self, ev, ts, pos, only: StateNode) -> None:
        """Insert into one state node (filling a node added to a running window)."""
        if pos < self.start_pos:
            return
        for flt in self.filters:
            if flt.pred is not None and not flt.pred(ev):
                continue
            for g in flt.groups:
                if only in g.states:
                    b = self.store.get(g.gid, g.key_fn(ev))
                    st = b.get(only.sid)
                    if st is None:
                        st = b[only.sid] = only.make()
                    st.add(only.value(ev), ts, pos)

    def evict(self, ev, ts, pos) -> None:
        if pos < self.start_pos:
            return
        store = self.store
        cache = store.cache
        for pred, groups in self._route:
            if pred is not None and not pred(ev):
                continue
            for gid, kf, key_fn, slots in groups:
                key = ev.get(kf) if kf is not None else key_fn(ev)
                b = cache.get((gid, key))
                if b is None:
                    b = store.get(gid, key)
                empty = True
                for sid, _make, field, value in slots:
                    st = b.get(sid)
                    if st is None:
                        raise InvariantViolation(f"evicting from a missing state {sid}")
                    st.remove(ev.get(field) if field is not None else value(ev), ts, pos)
                    if empty and not st.empty():
                        empty = False
                if empty:
                    store.delete(gid, key)


class MetricNode:
    def __init__(self, d: MetricDef, window: WindowNode, flt: FilterNode, group: GroupNode,
                 state: StateNode):
        self.d, self.window, self.filter, self.group, self.state = d, window, flt, group, state
        self.fin = FINALIZERS[d.func]


class StreamPlan:
    def __init__(self, name: str, res: StreamReservoir):
        self.name, self.res = name, res
        self.cursors: dict[tuple, Cursor] = {}
        self.windows: dict[WindowSpec, WindowNode] = {}
        self.order: list[Cursor] = []
        self.outputs: list[tuple[GroupNode, str | None, list[tuple[str, str, Callable]]]] = []

    def floor(self) -> int:
        """The oldest position any cursor still needs."""
        if not self.cursors:
            return self.res.next_pos
        return min(c.pos for c in self.cursors.values())

    def refresh(self, metrics: dict[str, MetricNode]) -> None:
        for w in self.windows.values():
            w.refresh()
        deps: dict[tuple, set[tuple]] = {c.spec: set() for c in self.cursors.values()}
        for w in self.windows.values():
            if w.head is not None:
                deps[w.head.spec].add(w.tail.spec)  # a window's tail runs before its head
        self.order = [self.cursors[s] for s in TopologicalSorter(deps).static_order()]
        outs: dict[str, tuple[GroupNode, list]] = {}
        for m in metrics.values():
            if m.d.stream == self.name:
                outs.setdefault(m.group.gid, (m.group, []))[1].append(
                    (m.d.name, m.state.sid, m.fin))
        self.outputs = [(g, g.fields[0] if len(g.fields) == 1 else None, mets)
                        for g, mets in outs.values()]


class Plan:
    """All streams' DAGs over one state store. ``make_reservoir(stream)`` creates reservoirs."""

    def __init__(self, store: StateStore, make_reservoir: Callable[[str], StreamReservoir]):
        self.store = store
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
        if s is None:
            s = StateNode(kind, arg, d.field, d.predicate)
            g.states.append(s)
            g.refresh()
            if not new_window and recovery is None:
                self._backfill(sp, w, s)
        m = MetricNode(d, w, flt, g, s)
        s.metrics.append(m)
        self.metrics[d.name] = m
        w.refresh()
        if new_window:
            if recovery is None:
                self._fill_new_window(sp, w)
            else:
                w.tail.inserts.append(w)
                if w.head is not None:
                    w.head.evicts.append(w)
        sp.refresh(self.metrics)

    def _find_state(self, g: GroupNode, kind, arg, d: MetricDef) -> StateNode | None:
        pred_text = render(d.predicate) if d.predicate is not None else ""
        for s in g.states:
            if s.kind != kind or s.field != d.field:
                continue
            if (render(s.predicate) if s.predicate is not None else "") != pred_text:
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
        c = sp.cursors[spec] = Cursor(sp.res, spec, pos)
        return c, True

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
        w = WindowNode(sp.name, spec, self.store, start, tail, head)
        sp.windows[spec] = w
        return w

    def _fill_new_window(self, sp: StreamPlan, w: WindowNode) -> None:
        """Bring a new window up to date with the events already ingested."""
        res = sp.res
        if res.last_ts is None:
            w.tail.inserts.append(w)
            if w.head is not None:
                w.head.evicts.append(w)
            return
        if w.tail.pos < w.start_pos:
            raise InvariantViolation("a window's tail is behind its start")
        if not w.tail.inserts and not w.tail.evicts:  # a new tail: catch it up alone
            w.tail.inserts.append(w)
            w.tail.advance(res.last_ts, res.next_pos)
        else:
            for pos, ts, ev in scan(res, w.start_pos, w.tail.pos):
                w.insert(ev, ts, pos)
            w.tail.inserts.append(w)
        if w.head is not None:
            if not w.head.inserts and not w.head.evicts:
                w.head.evicts.append(w)
                w.head.advance(res.last_ts, res.next_pos)
            else:
                w.head.evicts.append(w)

    def _backfill(self, sp: StreamPlan, w: WindowNode, s: StateNode) -> None:
        """Fill a new state node of an existing window with the window's current events."""
        start = max(w.start_pos, w.head.pos if w.head is not None else w.start_pos)
        for pos, ts, ev in scan(sp.res, start, w.tail.pos):
            w.insert_only(ev, ts, pos, s)

    def remove(self, name: str) -> None:
        m = self.metrics.pop(name)
        sp = self.streams[m.d.stream]
        s, g, flt, w = m.state, m.group, m.filter, m.window
        s.metrics.remove(m)
        if not s.metrics:
            g.states.remove(s)
            g.refresh()
            if g.states:
                self.store.drop_state(g.gid, s.sid)
            else:
                flt.groups.remove(g)
                self.store.drop_group(g.gid)
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
        sp.refresh(self.metrics)
        sp.res.trim(sp.floor())

    # -- running -----------------------------------------------------------------------
    def ingest(self, stream: str, event: Mapping[str, Any], ts: int) -> dict[str, Any]:
        sp = self.streams.get(stream)
        if sp is None:
            return {}
        res = sp.res
        last = res.last_ts
        if last is not None and ts < last:
            ts = last
        closed_before = len(res.chunks)
        pos = res.append(ts, event)
        next_pos = pos + 1
        for c in sp.order:
            if c.is_all and c.pos == pos:
                # Fast path: the shared RANGE tail has only the current event to take.
                for w in c.inserts:
                    w.insert(event, ts, pos)
                c.pos = next_pos
                c.stale = True
            else:
                c.advance(ts, next_pos)
        if len(res.chunks) != closed_before:
            res.trim(sp.floor())
        out: dict[str, Any] = {}
        store = self.store
        cache = store.cache
        for g, kf, mets in sp.outputs:
            key = event.get(kf) if kf is not None else g.key_fn(event)
            b = cache.get((g.gid, key))
            if b is None:
                b = store.peek(g.gid, key)
            if b is None:
                for name, _sid, fin in mets:
                    out[name] = fin(None, ts)
            else:
                for name, sid, fin in mets:
                    out[name] = fin(b.get(sid), ts)
        return out

    def replay(self, stream: str, start: int, end: int) -> None:
        """Recompute state from reservoir events [start, end) (recovery after a crash)."""
        sp = self.streams[stream]
        for pos, ts, _ev in scan(sp.res, start, end):
            for c in sp.order:
                c.advance(ts, pos + 1)

    def query(self, name: str, key: Any, ts: int) -> Any:
        """A metric's value for ``key`` at ``ts`` without an event; changes nothing."""
        m = self.metrics[name]
        sp = self.streams[m.d.stream]
        res = sp.res
        if res.last_ts is not None and ts < res.last_ts:
            ts = res.last_ts
        if len(m.d.group_by) == 1 and isinstance(key, tuple) and len(key) == 1:
            key = key[0]
        elif not m.d.group_by:
            key = ()
        elif isinstance(key, list):
            key = tuple(key)
        b = self.store.peek(m.group.gid, key)
        st = copy.deepcopy(b.get(m.state.sid)) if b is not None else None
        if st is None:
            st = m.state.make()
        w, g, s = m.window, m.group, m.state
        pred = m.filter.pred

        def mine(ev) -> bool:
            return (pred is None or bool(pred(ev))) and g.key_fn(ev) == key

        # The query sees every ingested event: "before-current" becomes "all".
        tail_spec = ("all",) if w.tail.spec[0] == "prev" else w.tail.spec
        lim, end = limits(tail_spec, ts, res.next_pos)
        for pos, t_i, ev in scan(res, w.tail.pos, end):
            if t_i > lim:
                break
            if pos >= w.start_pos and mine(ev):
                st.add(s.value(ev), t_i, pos)
        if w.head is not None:
            lim, end = limits(w.head.spec, ts, res.next_pos)
            for pos, t_i, ev in scan(res, w.head.pos, end):
                if t_i > lim:
                    break
                if pos >= w.start_pos and mine(ev):
                    st.remove(s.value(ev), t_i, pos)
        return m.fin(st, ts)

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
