//! One stream's lowered plan and its hot path: cursors -> windows -> filters -> group-bys ->
//! state slots -> metrics. Python builds the plan (language, sharing, explain) and sends it
//! lowered with `set_plan`; state of unchanged group nodes survives a new plan.
//!
//! `ingest` validates and lowers the event first (a non-scalar group key or value raises
//! `MetricInputError` before anything changes), appends it to the reservoir, moves every
//! cursor (the shared current-event tail takes the already lowered event; heads read older
//! events from the reservoir's chunks), then finalizes every metric of the stream.
//!
//! Group keys are interned once per group-by field list (`KeySpace`, keyed.rs), and a lowered
//! row keeps the ids it got (`Row::kids`, with their generation): the windows inserting it
//! after the first and the heads evicting it later index their tables by id, without hashing
//! the key again. An id whose key was freed since (its generation moved on) is looked up anew.
//! A batch looks up the keys of a row a few rows before its turn (`Core::find_ahead`) and asks
//! the CPU for their states meanwhile, level by level: W2's keys come back a day later, cold.
//!
//! Outputs are finalized from each output's window states, resolved once per output. An
//! output over the same table and metrics as the one before it, whose key's states are the
//! very same (W2's 7, 28, 182 and 392-day views while they cover the same days), takes that
//! output's values instead of finalizing them again (`Output::same_as_prev`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::aggregations::{lower as finalize, lower_scalar, lower_typed, Func, Kind, State, Typed};
use crate::keyed::{GroupTable, Hop, Input, KeySpace, View};
use crate::lazy::{Fold, LazySpace, LazyTable, Probe, LAZY_MIN_ALLOCATING, LAZY_MIN_TABLES, LOG_MAX};
use crate::value::{lower, In, Interner, LowerError, Out, Val};
use crate::columns::{Column, Refused};
use crate::counters::Counters;
use crate::outdict::Slots;
use crate::outcols::{Cell, OutCol, CELL_NATIVE, CELL_OBJ, CELL_VAL};
use crate::predicate::{truthy, Node, PVal};
use crate::window::{Chunks, Cursor, Spec};

/// Lowered chunks kept for cursors (a bound on memory, independent of window length).
const LOWERED_CHUNKS_MAX: usize = 256;
/// Events a cursor feeding no window passes per call (more than the one event a call adds,
/// so it catches up).
pub const IDLE_STEP_MAX: u32 = 64;
/// Rows a head's next evictions are asked of the CPU ahead of (`prefetch_evictions`).
const EVICT_AHEAD: usize = 2;
/// Retired lowered chunks whose buffers are kept for the next chunks (`Lowered::reuse`).
const SPARE_LOWERED_MAX: usize = 4;

/// A chunk's events as lowered rows (row-major, `fields` values, `preds` flags and one key
/// id per key space each).
#[derive(Default)]
struct Lowered {
    ts: Vec<i64>,
    vals: Vec<Val>,
    preds: Vec<bool>,
    kids: Vec<KeyRef>,
    /// The rows (of the first `hot_len`) a lazy head may have to evict (`Core::row_hot`), as
    /// of `Core::eager_epoch` = `hot_epoch`: a lazy head passes the rows between two of them
    /// by their times alone (`StreamCore::advance_lazy`).
    hot: Vec<u32>,
    hot_len: usize,
    hot_epoch: u64,
}

impl Lowered {
    /// Keep a retired chunk's buffers, emptied, in `spare` (up to `SPARE_LOWERED_MAX`): a new
    /// chunk takes them instead of growing fresh vectors row by row (W1 lowers a chunk every
    /// ~220 events, and its vectors' growth was ~5 % of `take`'s instructions).
    fn reuse(mut self, spare: &mut Vec<Lowered>) {
        if spare.len() < SPARE_LOWERED_MAX {
            self.ts.clear();
            self.vals.clear();
            self.preds.clear();
            self.kids.clear();
            self.hot.clear();
            (self.hot_len, self.hot_epoch) = (0, 0);
            spare.push(self);
        }
    }
}

/// A row's key id in one key space and the id's generation then (`NO_KEY`: not interned yet).
#[derive(Clone, Copy, PartialEq)]
struct KeyRef {
    id: u32,
    gen: u32,
}

const NO_KEY: KeyRef = KeyRef { id: u32::MAX, gen: 0 };

struct GroupRoute {
    table: usize,
}

struct Route {
    pred: Option<usize>,
    groups: Vec<GroupRoute>,
}

struct Window {
    start_pos: u64,
    tail: usize,
    head: Option<usize>,
    routes: Vec<Route>,
}

struct Output {
    /// The group (`Core::groups`): a table, and the view of it for a calendar window.
    table: usize,
    key_fields: Vec<usize>,
    window: usize,
    pred: Option<usize>,
    metrics: Vec<(Py<PyString>, usize, Func)>,
    /// The previous output reads the same table with the same (slot, function) list: when,
    /// for an event, its key's window states are the very ones the previous output read
    /// (W2's calendar views over the same days share them), its values are the previous
    /// output's, taken again instead of lowered anew.
    same_as_prev: bool,
    /// Its table folds alike with the previous output's (lazy.rs, same slots and functions):
    /// for a raw key, its values are the previous output's whenever its window leaves out the
    /// same logged events (`Core::reads_as_before`), which it tells without a read.
    alike: bool,
    /// Its lazy table's probe (lazy.rs `Probe`) when `alike`: `reads_as_before` reads it here.
    probe: Option<Probe>,
}

/// Which states an output read for an event (`states_id`): equal for two outputs of one
/// table and event only when they read the same states.
type StatesId = (usize, usize, i64);

fn states_id(states: Option<&[Option<State>]>, tag: i64) -> StatesId {
    match states {
        None => (0, 0, tag),
        Some(s) => (s.as_ptr() as usize, s.len(), tag),
    }
}

/// Ask the CPU for the head positions the outputs' `reads_as_before` reads (W1's 120 heads
/// are a line each, out of the cache after the event's other work): their misses overlap
/// here instead of coming one per output.
fn prefetch_probes(outputs: &[Output], heads: &[Cursor]) {
    #[cfg(target_arch = "x86_64")]
    for p in outputs.iter().filter_map(|o| o.probe.as_ref()) {
        if let Some(c) = heads.get(p.head) {
            // SAFETY: a prefetch is a hint: it reads nothing and faults on no address.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    std::ptr::addr_of!(c.pos).cast::<i8>());
            }
        }
    }
}

/// Slot `slot`'s state among an output's window states.
fn slot_state(states: Option<&[Option<State>]>, slot: usize) -> Option<&State> {
    states.and_then(|s| s.get(slot)).and_then(|s| s.as_ref())
}

/// A value of a batch's Arrow column that is neither null nor held as it is (a `Cell` of
/// `CELL_VAL` or `CELL_OBJ` points here): a scalar for `push_val` (a value converted or not
/// fitting), an object only `finalize` makes (a sum in arbitrary precision).
enum Low {
    V(Val),
    O(PyObject),
}

/// Rows whose Arrow values `ingest_typed` keeps (as `Cell`s, 9 bytes a value) before
/// writing them column by column: with W1's 240 columns, a value written per column per row
/// touched lines of each column (its values, validity, length) at every row, more lines than
/// the L1 cache holds; in blocks a column's lines are touched once a block, and the block's
/// values are written with no branch on the column's type per value. The block is column
/// by column (a column's rows side by side), so a column's cells are read in a few lines,
/// not one line per row (W2's 405 columns: 32 rows were 117 KiB, beyond the L1 cache).
const OUT_BLOCK: usize = 32;

/// Write the block's first `rows` rows (`tags` and `bits`, column by column, `stride` rows a
/// column: see `Cell`; the values only `push_val`/`push_obj` take are in `slow`) into the
/// Arrow columns, in row order per column, and empty `slow`.
fn flush_cells(py: Python<'_>, out_cols: &mut [OutCol], tags: &[u8], bits: &[u64],
               stride: usize, rows: usize, slow: &mut Vec<Low>, strings: &Interner) {
    for (c, col) in out_cols.iter_mut().enumerate() {
        let OutCol::Arrow(col) = col else { continue };
        let (t, b) = (&tags[c * stride..c * stride + rows], &bits[c * stride..c * stride + rows]);
        if t.iter().all(|&x| x <= CELL_NATIVE) {
            col.push_cells(t, b);
            continue;
        }
        for (&tag, &bits) in t.iter().zip(b) {
            match tag {
                CELL_VAL | CELL_OBJ => match &slow[bits as usize] {
                    Low::V(v) => col.push_val(py, *v, strings),
                    Low::O(v) => col.push_obj(v.clone_ref(py), py),
                },
                tag => col.push_cell(Cell { tag, bits }),
            }
        }
    }
    slow.clear();
}

#[derive(Default, Clone)]
struct Row {
    vals: Vec<Val>,
    preds: Vec<bool>,
    kids: Vec<KeyRef>,
    /// Its keys were looked up a few rows ahead (`Core::find_ahead`): a key it has no id
    /// for was new then, and most likely is still, so `insert` does not look it up again
    /// only to ask the CPU for its states; and `fps` holds each key's fingerprint then
    /// (keyed.rs `KeySpace::fingerprint`), so the key is not hashed twice.
    looked: bool,
    fps: Vec<u64>,
}

/// The tables, windows and scratch buffers the insert/evict paths touch.
struct Core {
    windows: Vec<Window>,
    tables: Vec<GroupTable>,
    /// Per group node (gid, in `StreamCore::gids` order): its table and its view there.
    /// Calendar windows of one group-by, filter and bucket width are views of one table,
    /// which holds their buckets once (keyed.rs `View`).
    groups: Vec<(usize, usize)>,
    /// Key spaces (one per group-by field list) and the fields of each.
    spaces: Vec<KeySpace>,
    space_fields: Vec<Vec<usize>>,
    space_names: Vec<Vec<String>>,
    key: Vec<Val>,
    /// Per table: how it is evicted lazily (lazy.rs); None: by its head, eagerly.
    lazy: Vec<Option<LazyTable>>,
    /// Per key space: the logs of its lazy tables' raw keys (None: it has no lazy table).
    logs: Vec<Option<LazySpace>>,
    /// Per window: the key space of its tables when all are lazy and of one space (its
    /// insert is skipped for a raw key: the key's log took the event).
    lazy_window: Vec<Option<usize>>,
    /// Per family of lazy tables, the fold of a raw key's log a read made (lazy.rs).
    folds: Vec<Fold>,
    /// The family whose fold the last `read` made (`window` reads it), if any.
    folded: Option<usize>,
    /// What the last `read` found of a raw key: (key space, id, first logged event in its
    /// window); None when it read no raw key (`reads_as_before`).
    raw_read: Option<(usize, u32, usize)>,
    /// Moves on whenever a key of a lazy space may have turned eager (a mark set, the lazy
    /// plan made anew): the rows found not hot before (`Lowered::hot`) are looked at again.
    eager_epoch: u64,
    /// Lazy tables take every key's events as states (a backfill: `fill`, `advance`).
    force_eager: bool,
    /// Per key space, whether the event being inserted is of an eager key there.
    eager_now: Vec<bool>,
    /// Per key space, the ids its log sweep picked at the event before (`after_step`),
    /// whose logs were asked of the CPU then.
    sweep_ids: Vec<Vec<u32>>,
    steps: u64,
}

impl Core {
    fn key_of(key: &mut Vec<Val>, row: &Row, fields: &[usize]) {
        key.clear();
        key.extend(fields.iter().map(|&f| row.vals[f]));
    }

    /// The row's key id in space `s`: the one it carries if still valid, else looked up
    /// (`intern`: made if new; the caller then makes a table entry for it) and kept in the row.
    fn kid(&mut self, row: &mut Row, s: usize, intern: bool) -> Option<u32> {
        let r = row.kids[s];
        let space = &mut self.spaces[s];
        if r.id != u32::MAX && space.valid(r.id, r.gen) {
            return Some(r.id);
        }
        Core::key_of(&mut self.key, row, &self.space_fields[s]);
        let id = match (intern, row.looked) {
            (true, true) => space.intern_at(row.fps[s], &self.key),
            (true, false) => space.intern(&self.key),
            (false, true) => space.find_at(row.fps[s], &self.key)?,
            (false, false) => space.find(&self.key)?,
        };
        row.kids[s] = KeyRef { id, gen: space.gen(id) };
        Some(id)
    }

    fn input(inp: Input, row: &Row) -> Val {
        match inp {
            Input::One => Val::Int(1),
            Input::Field(f) => row.vals[f],
            Input::Pred(p) => Val::Bool(row.preds[p]),
        }
    }

    /// Insert into window `w` (or only into slot `only` = (table, slot)).
    fn insert(&mut self, w: usize, row: &mut Row, ts: i64, pos: u64, only: Option<(usize, usize)>) {
        if pos < self.windows[w].start_pos {
            return;
        }
        // First ask for every table's place of a key the row has already: the tables are
        // cold, and their misses then overlap instead of coming one table after the other.
        // (Only known keys: looking up changes nothing, so the inserts below are as before.)
        for ri in 0..self.windows[w].routes.len() {
            let route = &self.windows[w].routes[ri];
            if route.pred.is_some_and(|p| !row.preds[p]) {
                continue;
            }
            for gi in 0..route.groups.len() {
                let table = self.windows[w].routes[ri].groups[gi].table;
                if self.lazy[table].is_some() {
                    continue; // an eager key of a lazy table is a hot key, most often cached
                }
                let s = self.tables[table].space;
                let r = row.kids[s];
                let id = if row.looked {
                    (r.id != u32::MAX && self.spaces[s].valid(r.id, r.gen)).then_some(r.id)
                } else {
                    self.kid(row, s, false)
                };
                if let Some(id) = id {
                    self.tables[table].prefetch(&self.spaces[s], id);
                }
            }
        }
        for ri in 0..self.windows[w].routes.len() {
            let route = &self.windows[w].routes[ri];
            if route.pred.is_some_and(|p| !row.preds[p]) {
                continue;
            }
            for gi in 0..route.groups.len() {
                let table = self.windows[w].routes[ri].groups[gi].table;
                if only.is_some_and(|(t, _)| t != table) {
                    continue;
                }
                let s = self.tables[table].space;
                let id = self.kid(row, s, true).expect("interned");
                if self.lazy[table].is_some() {
                    // A raw key's event is in its log (`log_event`); an eager key's goes in.
                    let gen = self.spaces[s].gen(id);
                    let ls = self.logs[s].as_mut().expect("a lazy table's space");
                    if self.force_eager {
                        ls.set_eager(id, gen);
                        self.eager_epoch += 1;
                    } else if !ls.is_eager(id, gen) {
                        continue;
                    }
                }
                let t = &mut self.tables[table];
                t.insert_at(&mut self.spaces[s], id);
                if let Some(hop) = t.hop {
                    // A calendar window: the event joins its bucket; the window takes the
                    // bucket in when it closes (see keyed.rs).
                    t.insert_bucket(id, ts, pos, only.map(|(_, s)| s), |inp| Core::input(inp, row));
                    if only.is_none() {
                        t.sweep_one(hop.bucket(ts), &mut self.spaces[s]);
                    }
                    continue;
                }
                let (kinds, inputs, states) = t.slots_mut(&mut self.spaces[s], id);
                for (i, st) in states.iter_mut().enumerate() {
                    if only.is_some_and(|(_, s)| s != i) {
                        continue;
                    }
                    let v = Core::input(inputs[i], row);
                    st.get_or_insert_with(|| State::new(kinds[i])).add(&v, ts, pos);
                }
            }
        }
    }

    /// Look up the key ids of a row still to come (`vals`: its lowered values) into `out`,
    /// and ask the CPU for every table's place of each key found: keys last touched long ago
    /// (W2's calendar keys, a day earlier) are then on their way while the rows before are
    /// ingested, instead of missing one after another when the row's turn comes. Changes
    /// nothing; an id found is checked again (its generation) when the row uses it.
    /// `fps`: each key's fingerprint, for the row's `Row::fps`.
    fn find_ahead(&mut self, vals: &[Val], out: &mut [KeyRef], fps: &mut [u64]) {
        for (s, (o, fp)) in out.iter_mut().zip(fps.iter_mut()).enumerate().take(self.spaces.len()) {
            self.key.clear();
            self.key.extend(self.space_fields[s].iter().map(|&f| vals[f]));
            let space = &self.spaces[s];
            *fp = space.fingerprint(&self.key);
            *o = match space.find_at(*fp, &self.key) {
                Some(id) => {
                    // Not a lazy table's record: a raw key has none (lazy.rs).
                    for (ti, t) in self.tables.iter().enumerate() {
                        if t.space == s && self.lazy.get(ti).is_none_or(|l| l.is_none()) {
                            t.prefetch(space, id);
                        }
                    }
                    KeyRef { id, gen: space.gen(id) }
                }
                None => {
                    // Most likely new: ask for the key slot its id will take (W2's quick run
                    // brings a new key in nearly every event and grouping, and the store
                    // filling a new id's key was most of `intern_at`'s samples). The rows
                    // before it bring about one new key each (`AHEAD`).
                    space.prefetch_new(AHEAD);
                    NO_KEY
                }
            };
        }
    }

    /// `GroupTable::prefetch_deep` at level `deep` in every calendar table, for the key ids
    /// a row still to come was found to have (`find_ahead`).
    fn prefetch_ahead(&self, kids: &[KeyRef], deep: u8) {
        for t in self.tables.iter().filter(|t| t.hop.is_some()) {
            let r = kids[t.space];
            if r.id != u32::MAX && self.spaces[t.space].valid(r.id, r.gen) {
                t.prefetch_deep(r.id, deep);
            }
        }
    }

    /// Group `g`'s window states of key id `id`, every slot (index by the table's slot),
    /// and what tells them apart (see `GroupTable::window_states`). None: no entry.
    fn states(&self, entry: Option<(usize, u32)>) -> (Option<&[Option<State>]>, i64) {
        let Some((g, id)) = entry else { return (None, i64::MIN) };
        if let Some(f) = self.folded {
            // A raw key of a lazy table: the fold its `read` made (lazy.rs).
            let fold = &self.folds[f];
            return (Some(fold.states.as_slice()), fold.made as i64);
        }
        let (t, v) = self.groups[g];
        let tb = &self.tables[t];
        tb.window_states(&self.spaces[tb.space], id, v)
    }

    /// The entry of the row's key in group `g`'s table as of time `t` (a calendar table rolls
    /// it first; a raw key of a lazy table is folded from its log over the logged events its
    /// window's head, in `heads`, has not passed). Returns (group, key id), for `Core::window`.
    fn read(&mut self, g: usize, row: &mut Row, t: i64, heads: &[Cursor]) -> Option<(usize, u32)> {
        self.folded = None;
        self.raw_read = None;
        let (table, view) = self.groups[g];
        let s = self.tables[table].space;
        let id = self.kid(row, s, false)?;
        if let (Some(lt), Some(ls)) = (&self.lazy[table], &self.logs[s]) {
            if !ls.is_eager(id, self.spaces[s].gen(id)) {
                let times = ls.times(id);
                let first = lt.first_in(times, heads[lt.head].pos, t);
                self.raw_read = Some((s, id, first));
                if first == times.len() {
                    return None; // nothing of it in the window
                }
                self.folds[lt.fam].fold(ls, lt, id, first);
                self.folded = Some(lt.fam);
                return Some((g, id));
            }
        }
        let tb = &mut self.tables[table];
        if !tb.has(id) {
            return None;
        }
        if let Some(hop) = tb.hop {
            if !tb.roll(id, hop.bucket(t), Some(&mut self.spaces[s])) {
                return None;
            }
            tb.readable(id, view);
        }
        Some((g, id))
    }

    /// Whether the lazy table of `probe` (an output's, `Output::alike`), which folds alike
    /// with the table the last `read` read a raw key of, would read that very fold (or, like
    /// it, nothing) at time
    /// `t`: its window leaves out the same logged events of the key. W1's 120 windows of a
    /// key that logged a few events fall into a few such runs; within a run an output costs
    /// one look at the key's log instead of a read (key id, eagerness, fold, states).
    #[inline]
    fn reads_as_before(&self, probe: Option<&Probe>, t: i64, heads: &[Cursor]) -> bool {
        let Some((s, id, first)) = self.raw_read else { return false };
        let Some(p) = probe.filter(|p| p.space == s) else { return false };
        let Some(ls) = self.logs[s].as_ref() else { return false };
        p.first_in(ls.times(id), heads[p.head].pos, t) == first
    }

    fn evict(&mut self, w: usize, row: &mut Row, ts: i64, pos: u64) -> Result<(), String> {
        if pos < self.windows[w].start_pos {
            return Ok(());
        }
        for ri in 0..self.windows[w].routes.len() {
            let route = &self.windows[w].routes[ri];
            if route.pred.is_some_and(|p| !row.preds[p]) {
                continue;
            }
            for gi in 0..route.groups.len() {
                let table = self.windows[w].routes[ri].groups[gi].table;
                let s = self.tables[table].space;
                if self.lazy[table].is_some() {
                    // Only an eager key's events leave states here; a raw key's are in its
                    // log. A row whose id went stale is of a key freed since: it was raw
                    // (its log kept the id while the event was in a window), or it was eager
                    // and the event left every state (else the key would hold its id).
                    let r = row.kids[s];
                    if r.id != u32::MAX && !self.spaces[s].valid(r.id, r.gen) {
                        continue;
                    }
                    let Some(id) = self.kid(row, s, false) else { continue };
                    let gen = self.spaces[s].gen(id);
                    if !self.logs[s].as_ref().is_some_and(|ls| ls.is_eager(id, gen)) {
                        continue;
                    }
                }
                let id = self.kid(row, s, false);
                let t = &mut self.tables[table];
                let Some(id) = id.filter(|&id| t.has(id)) else {
                    // A key is freed once all its states are empty, which leaves in its window
                    // only events every slot skipped (nulls; non-numbers for SUM or MIN, ...):
                    // their evictions change nothing.
                    if t.kinds.iter().zip(&t.inputs).all(|(k, i)| k.skips(&Core::input(*i, row))) {
                        continue;
                    }
                    return Err(format!("evicting position {pos} of a key with no state"));
                };
                let mut empty = true;
                let (_, inputs, states) = t.slots_mut(&mut self.spaces[s], id);
                for (i, st) in states.iter_mut().enumerate() {
                    let Some(st) = st else {
                        return Err(format!("evicting position {pos} from a missing state"));
                    };
                    st.remove(&Core::input(inputs[i], row), ts, pos);
                    if empty && !st.empty() {
                        empty = false;
                    }
                }
                if empty {
                    t.remove(id, Some(&mut self.spaces[s]));
                }
            }
        }
        Ok(())
    }

    // -- lazy eviction (lazy.rs) ---------------------------------------------------------

    /// The `all` tail's inserts of one event into windows `ws`: the event joins its key's log
    /// once per key space with lazy tables (unless the key is eager there, or turns eager:
    /// `log_event`), then each window takes it, but a window all of whose tables are lazy
    /// skips a raw key. `heads`: the cursors (a key turning eager reads its windows' heads).
    fn insert_all(&mut self, ws: &[usize], row: &mut Row, ts: i64, pos: u64, heads: &[Cursor]) {
        if !self.force_eager {
            for s in 0..self.logs.len() {
                if self.logs[s].is_some() {
                    self.eager_now[s] = self.log_event(s, row, ts, pos, heads);
                }
            }
        }
        for &w in ws {
            if let Some(s) = self.lazy_window[w] {
                if !self.eager_now[s] && !self.force_eager {
                    continue;
                }
            }
            self.insert(w, row, ts, pos, None);
        }
    }

    /// The event (`row`, at `ts`, `pos`) of a key of lazy space `s`: a raw key logs it (its
    /// events every head passed leave first); a full log turns the key eager. Returns whether
    /// the key is eager (its lazy tables then take the event as states). An event no lazy
    /// table takes (before every window's start, or left out by every filter) is not logged.
    fn log_event(&mut self, s: usize, row: &mut Row, ts: i64, pos: u64, heads: &[Cursor]) -> bool {
        let ls = self.logs[s].as_ref().expect("a lazy space");
        let takes = ls.tables.iter().any(|&t| {
            let lt = self.lazy[t].as_ref().expect("a lazy table");
            pos >= lt.start_pos && lt.pred.is_none_or(|p| row.preds[p])
        });
        if !takes {
            return false;
        }
        let id = self.kid(row, s, true).expect("interned");
        let gen = self.spaces[s].gen(id);
        let ls = self.logs[s].as_mut().expect("a lazy space");
        if ls.is_eager(id, gen) {
            return true;
        }
        let had = ls.len(id) > 0;
        ls.drop_passed(id); // emptied: the log keeps its hold on the id for this event
        if ls.len(id) < LOG_MAX {
            ls.push(id, ts, pos, |inp| Core::input(inp, row));
            if !had {
                self.spaces[s].acquire(id);
            }
            return false;
        }
        ls.turned += 1;
        self.make_eager(s, id, heads);
        // The id is freed if no table took a logged event: the event takes it anew.
        let id = self.kid(row, s, true).expect("interned");
        let gen = self.spaces[s].gen(id);
        self.logs[s].as_mut().expect("a lazy space").set_eager(id, gen);
        self.eager_epoch += 1;
        true
    }

    /// Key `id` of lazy space `s` turns eager: each lazy table takes the logged events its
    /// window holds (not passed by its head, from its start, kept by its filter) as states,
    /// in order, as its inserts would have; then the log goes, and its hold on the id (a key
    /// no table took is freed). Its heads evict those events from then on.
    fn make_eager(&mut self, s: usize, id: u32, heads: &[Cursor]) {
        let mut ls = self.logs[s].take().expect("a lazy space");
        let n = ls.len(id);
        for &t in &ls.tables {
            let lt = self.lazy[t].as_ref().expect("a lazy table");
            let lo = lt.lo(heads[lt.head].pos);
            let mut held = false;
            for (j, &(ts, pos)) in ls.times(id).iter().enumerate() {
                if pos < lo {
                    continue;
                }
                if let Some(c) = lt.pcol {
                    if !matches!(ls.val(id, j, c), Val::Bool(true)) {
                        continue;
                    }
                }
                let tb = &mut self.tables[t];
                if !held {
                    tb.insert_at(&mut self.spaces[s], id);
                    held = true;
                }
                let (kinds, _, states) = tb.slots_mut(&mut self.spaces[s], id);
                for (i, st) in states.iter_mut().enumerate() {
                    st.get_or_insert_with(|| State::new(kinds[i])).add(&ls.val(id, j, lt.cols[i]), ts, pos);
                }
            }
        }
        // Marked before the log lets go of the id: a freed id's generation moves on, and
        // the mark is void.
        ls.set_eager(id, self.spaces[s].gen(id));
        self.eager_epoch += 1;
        if n > 0 {
            ls.clear(id);
            self.spaces[s].release(id);
        }
        self.logs[s] = Some(ls);
    }

    /// Every raw key turns eager (before a snapshot, a digest, a plan change, a backfill, a
    /// seek: they see states, not logs).
    fn settle(&mut self, heads: &[Cursor]) {
        for s in 0..self.logs.len() {
            let ids = match &self.logs[s] {
                Some(ls) => ls.logged(),
                None => continue,
            };
            for id in ids {
                self.make_eager(s, id, heads);
            }
        }
    }

    /// After an event: each lazy space's floor from its heads (a logged event below it is in
    /// no window), and a few of its ids swept (their passed events leave; a log left empty
    /// gives its id back).
    fn after_step(&mut self, heads: &[Cursor]) {
        // A floor a few events old is only lower (heads move forward): safe, and 120 heads
        // are not read at every event.
        self.steps += 1;
        if self.steps % 8 == 0 {
            self.set_floors(heads);
        }
        // The sweep reaches ids nobody touched lately, a cache miss each when read at once
        // (W2: two per key space and event, most of `drop_passed`'s samples on one load).
        // So it picks the ids at one event, asks the CPU for their logs, and drops their
        // passed events at the next: dropping is right for whatever the id holds by then.
        if self.sweep_ids.len() != self.logs.len() {
            self.sweep_ids = vec![vec![]; self.logs.len()];
        }
        for s in 0..self.logs.len() {
            let Some(ls) = self.logs[s].as_mut() else { continue };
            let ids = &mut self.sweep_ids[s];
            for &id in ids.iter() {
                if ls.drop_passed(id) {
                    self.spaces[s].release(id);
                }
            }
            ls.sweep_next(ids);
            for &id in ids.iter() {
                ls.prefetch_log(id);
            }
        }
    }

    fn set_floors(&mut self, heads: &[Cursor]) {
        for ls in self.logs.iter_mut().flatten() {
            ls.floor = ls.tables.iter()
                .map(|&t| {
                    let lt = self.lazy[t].as_ref().expect("a lazy table");
                    lt.lo(heads[lt.head].pos)
                })
                .min()
                .unwrap_or(0);
        }
    }

    /// Whether a head of windows `ws`, all of whose tables are lazy, evicts the row whose key
    /// ids are `kids`: if its key is eager in a window's space, or not known (a row lowered
    /// again from the reservoir: `evict` looks the key up).
    #[inline]
    fn evicts_row(&self, ws: &[usize], kids: &[KeyRef]) -> bool {
        for &w in ws {
            let Some(s) = self.lazy_window[w] else { return true };
            if self.key_may_evict(s, kids[s]) {
                return true;
            }
        }
        false
    }

    /// Whether a lazy head of key space `s` may have to evict a row whose key id there is
    /// `r`: the id is not known (a row lowered again from the reservoir: `evict` looks the
    /// key up), or its key is eager in the space (and the id still the key's).
    #[inline]
    fn key_may_evict(&self, s: usize, r: KeyRef) -> bool {
        r.id == u32::MAX
            || (self.logs[s].as_ref().is_some_and(|ls| ls.maybe_eager(r.id) && ls.is_eager(r.id, r.gen))
                && self.spaces[s].valid(r.id, r.gen))
    }

    /// Whether some lazy head may evict the row whose key ids are `kids` (`evicts_row` is true
    /// for it for some windows): a key id not known, or of a key eager in a lazy space. Until
    /// `eager_epoch` moves, a row found not hot stays so: a key turns eager only with a mark
    /// (which moves it), and an id's eagerness is otherwise only lost (its generation moves
    /// on when it is freed).
    fn row_hot(&self, kids: &[KeyRef]) -> bool {
        kids.iter().enumerate().any(|(s, &r)| self.key_may_evict(s, r))
    }

    /// Whether the row's key is eager in a lazy space (its lazy tables' states are read for
    /// it: the heads must have evicted what left them).
    fn row_eager(&mut self, row: &mut Row) -> bool {
        for s in 0..self.logs.len() {
            if self.logs[s].is_none() {
                continue;
            }
            let Some(id) = self.kid(row, s, false) else { continue };
            let gen = self.spaces[s].gen(id);
            if self.logs[s].as_ref().is_some_and(|ls| ls.is_eager(id, gen)) {
                return true;
            }
        }
        false
    }

    /// Choose the lazy tables of a new plan (lazy.rs): the plain tables of windows that take
    /// the current event (the `all` tail) and have a head of a time bound, in the key spaces
    /// holding at least `min` of them. Every key a lazy table holds states for is eager.
    fn plan_lazy(&mut self, cursors: &[Cursor], min: usize, min_allocating: usize) {
        self.eager_epoch += 1;
        self.lazy = vec![None; self.tables.len()];
        let mut cand: Vec<Vec<(usize, usize, i64, u64, Option<usize>)>> = vec![vec![]; self.spaces.len()];
        for win in &self.windows {
            let Some(h) = win.head else { continue };
            let Spec::Le(reach) = cursors[h].spec else { continue };
            if cursors[win.tail].spec != Spec::All {
                continue;
            }
            for route in &win.routes {
                for g in &route.groups {
                    let t = &self.tables[g.table];
                    if t.hop.is_none() {
                        cand[t.space].push((g.table, h, reach, win.start_pos, route.pred));
                    }
                }
            }
        }
        fn col(inputs: &mut Vec<Input>, i: Input) -> usize {
            match inputs.iter().position(|x| *x == i) {
                Some(c) => c,
                None => {
                    inputs.push(i);
                    inputs.len() - 1
                }
            }
        }
        self.logs = (0..self.spaces.len()).map(|_| None).collect();
        self.sweep_ids.clear();
        let mut fams: Vec<(Option<usize>, Vec<Kind>, Vec<Input>)> = vec![];
        for (s, c) in cand.into_iter().enumerate() {
            let allocates = c.iter().any(|&(t, ..)| self.tables[t].kinds.iter().any(Kind::allocates));
            if c.len() < if allocates { min_allocating } else { min }.max(1) {
                continue;
            }
            let mut inputs: Vec<Input> = vec![];
            let mut tables = vec![];
            for (t, head, reach, start_pos, pred) in c {
                let tb = &self.tables[t];
                let cols: Vec<usize> = tb.inputs.iter().map(|&i| col(&mut inputs, i)).collect();
                let pcol = pred.map(|p| col(&mut inputs, Input::Pred(p)));
                let sig = (pred, tb.kinds.clone(), tb.inputs.clone());
                let fam = match fams.iter().position(|f| *f == sig) {
                    Some(f) => f,
                    None => {
                        fams.push(sig);
                        fams.len() - 1
                    }
                };
                self.lazy[t] = Some(LazyTable { space: s, head, reach, start_pos, pred, pcol,
                                                kinds: tb.kinds.clone(), cols, fam });
                tables.push(t);
            }
            self.logs[s] = Some(LazySpace::new(tables, inputs));
            self.spaces[s].sparse_slab();
        }
        self.folds = (0..fams.len()).map(|_| Fold::default()).collect();
        self.folded = None;
        self.eager_now = vec![false; self.spaces.len()];
        self.lazy_window = self.windows.iter().map(|win| {
            let mut space = None;
            for r in &win.routes {
                for g in &r.groups {
                    match &self.lazy[g.table] {
                        Some(lt) if space.is_none_or(|s| s == lt.space) => space = Some(lt.space),
                        _ => return None,
                    }
                }
            }
            space
        }).collect();
        self.mark_held_eager();
    }

    /// Every key a lazy table holds states for is eager (after a plan change or a load: its
    /// heads evict its events).
    fn mark_held_eager(&mut self) {
        for t in 0..self.tables.len() {
            let Some(lt) = &self.lazy[t] else { continue };
            let s = lt.space;
            let Some(ls) = self.logs[s].as_mut() else { continue };
            for id in 0..self.spaces[s].made() as u32 {
                if self.tables[t].has(id) {
                    ls.set_eager(id, self.spaces[s].gen(id));
                    self.eager_epoch += 1;
                }
            }
        }
    }
}

#[pyclass(module = "railflow_metrics_native")]
pub struct StreamCore {
    res: PyObject,
    /// The reservoir's counters (`res.counters`), moved here at every event.
    counters: Py<Counters>,
    chunks: Py<PyList>,
    input_error: PyObject,
    invariant: PyObject,
    fields: Vec<Py<PyString>>,
    preds: Vec<PyObject>,
    cursors: Vec<Cursor>,
    order: Vec<usize>,
    outputs: Vec<Output>,
    core: Core,
    gids: Vec<String>, // gid of each group node, aligned with core.groups
    strings: Interner,
    cur: Row,
    tmp: Row,
    blob: Vec<u8>,
    chunk_bytes_target: i64,
    lowered: FxHashMap<i64, Lowered>,
    /// Emptied lowered chunks whose buffers the next chunks take (`Lowered::reuse`).
    spare_lowered: Vec<Lowered>,
    /// Where the chunks this core closed are, so cursors walk them without the reservoir.
    chunk_map: Chunks,
    /// The open chunk's bookkeeping while `ingest_arrays` runs (see `Batch`).
    batch: Option<Batch>,
    /// `ingest_arrays`' buffers: lowered values, JSON, its row ends, clamped times.
    scratch: (Vec<Val>, Vec<u8>, Vec<usize>, Vec<i64>),
    /// The plan's predicates lowered natively (and the fields they read), when all could be.
    npreds: Option<(Vec<Node>, Vec<String>)>,
    /// A chunk closed at the last event; the reservoir is trimmed at the next one.
    trim_due: bool,
    /// `[` and the JSON of the open chunk's rows this core appended, comma-joined, not yet
    /// handed to the reservoir: a closing chunk's payload, moved to the writer whole.
    ojson: Vec<u8>,
    template: Option<(Py<PyDict>, bool)>,
    /// `template` with the names in sorted order (`ingest`'s `by_name`), and each metric's
    /// entry there, in output order.
    template_by_name: Option<(Py<PyDict>, Vec<u32>)>,
    /// Whether `ingest` writes a metric's value into its entry of the template's copy by
    /// index (outdict.rs) rather than by key; settable for the benchmarks' A/B in one run and
    /// tests. Only where the interpreter's dict layout is known (`dict_known`).
    #[pyo3(get, set)]
    fill_by_index: bool,
    dict_known: bool,
    /// `ingest`'s last dict and whether by name: filled again if the caller let go of it
    /// (outdict.rs).
    last_out: Option<(Py<PyDict>, bool)>,
    /// Dicts `ingest` filled again (a debug counter for tests).
    recycled: u64,
    /// The JSON of the events' top-level keys, by key object (json.rs).
    json_keys: crate::json::KeyCache,
    /// Whether `ingest` asks the CPU for an event's values before it reads them
    /// (`json::prefetch_values`); settable for the benchmarks' A/B in one run.
    #[pyo3(get, set)]
    prefetch_events: bool,
    /// Outputs whose values were the previous output's (`Output::same_as_prev`; a debug
    /// counter for tests).
    reused: u64,
    /// Values `ingest` set by key (`fill_by_index` off, or a dict it could not fill by index;
    /// a debug counter for tests).
    by_key: u64,
    /// Whether `ingest_arrays` looks up the keys of the row `AHEAD` rows on (`find_ahead`);
    /// settable for the benchmarks' A/B in one run.
    #[pyo3(get, set)]
    look_ahead: bool,
    /// Rows of Arrow values a batch keeps before writing them column by column
    /// (`flush_cells`; 0: `OUT_BLOCK`); settable for the benchmarks' A/B in one run.
    #[pyo3(get, set)]
    out_block: usize,
    /// Lazy tables a key space needs for lazy eviction (lazy.rs); read at each `set_plan`
    /// (plan.py sets it; tests set it high to run the eager path alone).
    #[pyo3(get, set)]
    lazy_min_tables: usize,
    /// `lazy_min_tables` for a key space one of whose lazy tables keeps states that allocate
    /// for a new key (`LAZY_MIN_ALLOCATING`; plan.py sets both when it sets one).
    #[pyo3(get, set)]
    lazy_min_allocating: usize,
    /// Events the heads all of whose windows are lazy (`Cursor::lazy`) may fall behind by:
    /// they move every that many events, or at once when the event's key is eager in a lazy
    /// space (its states are read) or a call other than an ingest comes (`catch_up`). A raw
    /// key's read tells the events its window let go of from their times (`LazyTable::
    /// first_in`), so such a head walks its rows in runs, not one row per event. 0 or 1:
    /// every event (settable for the benchmarks' A/B in one run and tests).
    #[pyo3(get, set)]
    lazy_head_lag: u32,
    /// `order` without its lazy heads (cursor indices: the cursors `take` moves at an event
    /// while the lazy heads lag), and whether it left any out; None: made at the next event
    /// (a plan sets it so). W1's 120 lazy heads are then not looked at at every event.
    busy: Option<(Vec<usize>, bool)>,
    /// Events the lazy heads are behind, and the time and next position they move to.
    behind: u32,
    behind_to: (i64, u64),
    /// The JSON length of the batch row being appended, as the batch's plan counted it
    /// (`plan_frames`); the row has no JSON when `blob` is empty (its chunk's columnar
    /// frame holds it).
    row_len: Option<usize>,
    /// Whether a batch of typed columns writes its whole chunks as columnar frames
    /// (frame.rs) rather than JSON; settable for the benchmarks' A/B in one run and tests.
    #[pyo3(get, set)]
    columnar: bool,
    /// The bits of a key's fingerprint a new key space keeps (keyed.rs `KeySpace::index`):
    /// 64; tests take a few, so that keys share fingerprints all the time.
    #[pyo3(get, set)]
    key_fingerprint_bits: u32,
    /// Section times of the slowest `ingest` calls (trace.rs; `trace_slow_ns`, `slow_calls`).
    trace: crate::trace::Trace,
    /// The reservoir's (memory-only, native writer), looked up at the first chunk's close.
    res_io: Option<(bool, Option<Py<crate::writer::NativeWriter>>)>,
}

/// Rows on that `ingest_arrays` looks up keys for (`Core::find_ahead`).
const AHEAD: usize = 3;

/// `StreamCore::lazy_head_lag`'s default: W1's 120 lazy heads then walk runs of up to 64 rows
/// (a row ~1/64 of a head's per-move cost); their logs' floor lags as much (a few more keys
/// fill their log and turn eager).
const LAZY_HEAD_LAG: u32 = 64;

/// The reservoir's open chunk while a batch goes in: kept here, written back to the Python
/// reservoir (`write_back`) when the chunk closes and when the batch ends. A row's event is
/// None in `open_events` until a reader asks for the chunk (reservoir.py decodes it then), and
/// its JSON joins one piece of `open_blobs` per write-back: no Python object per row.
struct Batch {
    next_pos: u64,
    first: u64,
    open_bytes: i64,
    last_ts: Option<i64>,
    lazy: bool, // rows appended as None since the last write-back
    events: Py<PyList>,
    /// The columnar frames of the chunks the batch fills whole (frame.rs), by the position
    /// after their last row, in order; a chunk's frame is its payload at its close.
    frames: VecDeque<(u64, Vec<u8>)>,
    /// Rows of the open chunk appended with no JSON (their chunk's frame holds them).
    col_rows: usize,
    /// A reader needed the open chunk's rows as JSON: its rows so far were written as JSON
    /// (`sync_batch`), and its remaining rows are too.
    forced_json: bool,
}

impl StreamCore {
    fn invariant(&self, py: Python<'_>, msg: String) -> PyErr {
        match self.invariant.bind(py).call1((msg,)) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        }
    }

    /// Every metric name of the plan mapped to None, in output order, and whether the names
    /// are distinct: `ingest` copies it (a copy clones the key table whole, hashes and all)
    /// and sets the values that are not None, instead of building a 405-item dict key by key
    /// per event.
    fn template<'py>(&mut self, py: Python<'py>) -> PyResult<(Bound<'py, PyDict>, bool)> {
        if let Some((t, distinct)) = &self.template {
            return Ok((t.bind(py).clone(), *distinct));
        }
        let n: usize = self.outputs.iter().map(|o| o.metrics.len()).sum();
        let t = template_dict(py, self.outputs.iter().flat_map(|o| o.metrics.iter().map(|m| &m.0)))?;
        let distinct = t.len() == n;
        self.template = Some((t.clone().unbind(), distinct));
        Ok((t, distinct))
    }

    /// `template` with its names in sorted order (code points, as Python's `sorted`): a copy
    /// of it keeps that order whatever order the values are set in.
    fn template_by_name<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.template_by_name.is_none() {
            let mut names: Vec<(String, usize, Py<PyString>)> = vec![];
            for o in &self.outputs {
                for (name, _, _) in &o.metrics {
                    names.push((name.bind(py).to_str()?.to_owned(), names.len(), name.clone_ref(py)));
                }
            }
            // UTF-8 byte order is code point order; stable: the first of equal names first.
            names.sort_by(|a, b| a.0.cmp(&b.0));
            let t = template_dict(py, names.iter().map(|x| &x.2))?;
            let mut at = vec![0u32; names.len()];
            for (i, x) in names.iter().enumerate() {
                at[x.1] = i as u32;
            }
            self.template_by_name = Some((t.unbind(), at));
        }
        let (t, _) = self.template_by_name.as_ref().expect("made above");
        Ok(t.bind(py).clone())
    }

    /// Lower one value of field `f` (a non-scalar raises `MetricInputError` naming `f`).
    fn lower_value(&mut self, py: Python<'_>, v: &Bound<'_, PyAny>, f: &Bound<'_, PyString>)
                   -> PyResult<Val> {
        match lower(v, &mut self.strings) {
            Ok(x) => Ok(x),
            Err(e) => {
                let why = match e {
                    LowerError::NotScalar(t) => format!("holds a {t}, not a scalar"),
                    LowerError::OutOfRange => "holds an integer outside 64 bits".to_string(),
                };
                let msg = format!("field {:?} {why} (group keys and aggregated values \
                                   are strings, numbers, booleans or null)", f.to_str()?);
                let err = self.input_error.bind(py).call1((msg, f))?;
                Err(PyErr::from_value(err))
            }
        }
    }

    /// Lower `ev` into the current row (`current`) or the scratch row.
    fn lower_into(&mut self, py: Python<'_>, ev: &Bound<'_, PyAny>, current: bool) -> PyResult<()> {
        let dict = ev.downcast::<PyDict>().ok();
        for i in 0..self.fields.len() {
            let f = self.fields[i].clone_ref(py).into_bound(py);
            let v = match dict {
                Some(d) => d.get_item(&f)?,
                None => Some(ev.call_method1("get", (&f,))?),
            };
            let x = match v {
                None => Val::Null,
                Some(v) => self.lower_value(py, &v, &f)?,
            };
            if current { self.cur.vals[i] = x } else { self.tmp.vals[i] = x }
        }
        if current { self.cur.kids.fill(NO_KEY) } else { self.tmp.kids.fill(NO_KEY) }
        if current { self.cur.looked = false } else { self.tmp.looked = false }
        self.preds_into(py, ev, current)
    }

    fn preds_into(&mut self, py: Python<'_>, ev: &Bound<'_, PyAny>, current: bool) -> PyResult<()> {
        for i in 0..self.preds.len() {
            let b = self.preds[i].bind(py).call1((ev,))?.is_truthy()?;
            if current { self.cur.preds[i] = b } else { self.tmp.preds[i] = b }
        }
        Ok(())
    }

    /// The event whose JSON is in `self.blob`, as the reservoir will give it back.
    fn read_back<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let loads = py.import(pyo3::intern!(py, "orjson"))?.getattr(pyo3::intern!(py, "loads"))?;
        loads.call1((PyBytes::new(py, &self.blob),))?.get_item(1)
    }

    fn input_error(&self, py: Python<'_>, field: &str, why: &str) -> PyErr {
        let msg = format!("field {field:?} {why}");
        match self.input_error.bind(py).call1((msg, field)) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        }
    }

    /// The reservoir's `append`, natively: the event joins the open chunk (its JSON is
    /// already in `self.blob`); the chunk closes when it reaches its target size. The lowered
    /// row (`self.cur`) joins the lowered cache, so heads passing it later do not lower the
    /// event again. Returns its position and its place in the lowered cache (chunk, index).
    fn append(&mut self, py: Python<'_>, res: &Bound<'_, PyAny>, ts: i64)
              -> PyResult<(u64, i64, usize)> {
        use pyo3::intern;
        if self.batch.is_some() {
            return self.append_batched(py, res, ts);
        }
        let (pos, first, base) = {
            let c = self.counters.borrow(py);
            (c.next_pos, c.open_first_pos, c.chunk_base)
        };
        let k = base + self.chunks.bind(py).len() as i64;
        let idx = (pos - first) as usize;
        // The row stays None until a reader asks for the chunk (reservoir.py decodes it then
        // from the JSON, as for a batch's rows): no Python object per event is kept, and the
        // chunks leaving memory free no tuples (~220 a chunk, each holding a cold event, all
        // freed within one event, several chunks at once when the writer reports a group).
        res.getattr(intern!(py, "open_events"))?.downcast_into::<PyList>()?.append(py.None())?;
        self.push_json();
        let open_bytes = {
            let mut c = self.counters.borrow_mut(py);
            c.open_bytes += self.blob.len() as i64 + 1;
            c.next_pos = pos + 1;
            c.last_ts = Some(ts);
            c.lazy = true;
            c.json_held = true;
            c.open_bytes
        };
        self.keep_lowered(k, idx, ts);
        self.chunk_map.open = Some((k, first));
        self.chunk_map.next_pos = pos + 1;
        if open_bytes >= self.chunk_bytes_target {
            self.close_chunk(py, res, None)?;
            self.chunk_map.closed(k, first, idx + 1);
            self.chunk_map.open = Some((k + 1, pos + 1));
        }
        Ok((pos, k, idx))
    }

    /// `append` while a batch runs: the row's JSON (`self.blob`) joins the batch's piece and
    /// the open chunk gets a None for its event; the Python reservoir hears of it at the
    /// chunk's close or the batch's end.
    fn append_batched(&mut self, py: Python<'_>, res: &Bound<'_, PyAny>, ts: i64)
                      -> PyResult<(u64, i64, usize)> {
        let mut b = self.batch.take().expect("a batch runs");
        let (k, first) = self.chunk_map.open.expect("set when the batch began");
        let pos = b.next_pos;
        let idx = (pos - first) as usize;
        b.events.bind(py).append(py.None())?;
        b.lazy = true;
        // Its size as JSON, counted by the batch's plan when it made one (`plan_frames`): the
        // chunks then close where the plan said.
        let len = self.row_len.take().unwrap_or(self.blob.len());
        if self.blob.is_empty() {
            b.col_rows += 1; // no JSON: its chunk's frame holds it
        } else {
            debug_assert_eq!(len, self.blob.len(), "a row's JSON length as planned");
            self.push_json();
        }
        b.open_bytes += len as i64 + 1;
        b.next_pos = pos + 1;
        b.last_ts = Some(ts);
        self.keep_lowered(k, idx, ts);
        self.chunk_map.next_pos = pos + 1;
        let close = b.open_bytes >= self.chunk_bytes_target;
        let r = if close { Self::write_back(py, res, &mut b) } else { Ok(()) };
        if close && r.is_ok() {
            // The chunk's frame, if the batch made one (unused if a reader made its rows JSON).
            let frame = match b.frames.front() {
                Some(&(end, _)) if end == pos + 1 => b.frames.pop_front().map(|f| f.1),
                _ => None,
            };
            let whole = b.col_rows as u64 == pos + 1 - first;
            let frame = match (b.col_rows, frame) {
                (0, _) => None,
                (_, Some(f)) if whole => Some(f),
                _ => {
                    self.batch = Some(b);
                    return Err(self.invariant(py, format!(
                        "chunk {k} closed at position {pos} with rows of no columnar frame")));
                }
            };
            b.col_rows = 0;
            b.forced_json = false;
            self.close_chunk(py, res, frame)?;
            self.chunk_map.closed(k, first, idx + 1);
            self.chunk_map.open = Some((k + 1, pos + 1));
            b.first = pos + 1;
            b.open_bytes = 0;
            b.events = res.getattr(pyo3::intern!(py, "open_events"))?.downcast_into::<PyList>()?.unbind();
        }
        self.batch = Some(b);
        r.map(|_| (pos, k, idx))
    }

    /// The row's JSON (`self.blob`) joins the open chunk's JSON held here (`ojson`).
    fn push_json(&mut self) {
        if self.ojson.len() > 1 {
            self.ojson.push(b',');
        }
        self.ojson.extend_from_slice(&self.blob);
    }

    /// Give the reservoir the open chunk's JSON held here, as one more piece of its
    /// `open_blobs` (for a reader of the open chunk's JSON; see `hand_off`).
    fn give_json(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.ojson.len() > 1 {
            self.res.bind(py).getattr(pyo3::intern!(py, "open_blobs"))?.downcast_into::<PyList>()?
                .append(PyBytes::new(py, &self.ojson[1..]))?;
            self.ojson.truncate(1);
        }
        self.counters.borrow_mut(py).json_held = false;
        Ok(())
    }

    /// Close the open chunk. Its JSON array goes to the writer as this core built it (moved,
    /// not copied), unless the reservoir holds pieces of it (events appended in Python at a
    /// reopen, or handed to a reader): then the reservoir joins them as before. `frame`: the
    /// chunk's rows are a batch's, with no JSON; the frame holding them is the payload.
    fn close_chunk(&mut self, py: Python<'_>, res: &Bound<'_, PyAny>, frame: Option<Vec<u8>>)
                   -> PyResult<()> {
        use pyo3::intern;
        let pieces = res.getattr(intern!(py, "open_blobs"))?.downcast_into::<PyList>()?.len();
        if pieces > 0 {
            if frame.is_some() {
                return Err(self.invariant(py, "a columnar chunk has JSON pieces".into()));
            }
            self.give_json(py)?;
            return res.call_method0(intern!(py, "close_open")).map(|_| ());
        }
        let (payload, magic) = match frame {
            Some(f) => (f, crate::frame::MAGIC_COLUMNS),
            None => {
                let mut payload = std::mem::replace(&mut self.ojson, vec![b'[']);
                payload.push(b']');
                self.ojson.reserve(payload.len());
                (payload, crate::frame::MAGIC_JSON)
            }
        };
        self.counters.borrow_mut(py).json_held = false; // the JSON goes with the chunk
        // Rows left None are decoded from the chunk's JSON when read: a reservoir on disk reads
        // a closed chunk's back from its segment (reservoir.py `_pending_events`), so only a
        // memory-only one keeps a copy (a 64 KiB copy at every chunk's close was most of it).
        let lazy = self.counters.borrow(py).lazy; // the reservoir's `lazy_open`
        if self.res_io.is_none() {
            // The reservoir's directory and writer never change: looked up at the first close.
            let memory_only = res.getattr(intern!(py, "directory"))?.is_none();
            let writer = res.getattr(intern!(py, "writer"))?;
            let writer = if writer.is_none() {
                None
            } else {
                Some(writer.getattr(intern!(py, "native"))?
                    .downcast_into::<crate::writer::NativeWriter>()?.unbind())
            };
            self.res_io = Some((memory_only, writer));
        }
        let memory_only = self.res_io.as_ref().is_some_and(|io| io.0);
        let keep = lazy && memory_only;
        let json = if keep { PyBytes::new(py, &payload).into_any() } else { py.None().into_bound(py) };
        // The reservoir's bookkeeping; it returns the writer's stream id and the chunk's place
        // when the chunk goes to disk.
        let to_write = res.call_method1(intern!(py, "close_open"), (json, true))?;
        if !to_write.is_none() {
            let (sid, k, first, count): (usize, i64, u64, u32) = to_write.extract()?;
            let Some(writer) = self.res_io.as_ref().and_then(|io| io.1.as_ref()) else {
                return Err(self.invariant(py, "a chunk to write with no writer".into()));
            };
            writer.borrow(py).submit(py, sid, k, first, count, payload, magic)?;
        }
        Ok(())
    }

    /// Give the Python reservoir the batch's rows so far (their counters; the rows are None
    /// in its open chunk until a reader decodes them from the JSON, `lazy_open`).
    fn write_back(py: Python<'_>, res: &Bound<'_, PyAny>, b: &mut Batch) -> PyResult<()> {
        use pyo3::intern;
        if b.lazy {
            res.setattr(intern!(py, "lazy_open"), true)?;
            b.lazy = false;
        }
        res.setattr(intern!(py, "open_bytes"), b.open_bytes)?;
        res.setattr(intern!(py, "next_pos"), b.next_pos)?;
        res.setattr(intern!(py, "last_ts"), b.last_ts)?;
        Ok(())
    }

    fn begin_batch(&mut self, py: Python<'_>) -> PyResult<()> {
        use pyo3::intern;
        let res = self.res.bind(py);
        let next_pos: u64 = res.getattr(intern!(py, "next_pos"))?.extract()?;
        let first: u64 = res.getattr(intern!(py, "open_first_pos"))?.extract()?;
        let base: i64 = res.getattr(intern!(py, "chunk_base"))?.extract()?;
        let k = base + self.chunks.bind(py).len() as i64;
        self.chunk_map.open = Some((k, first));
        self.chunk_map.next_pos = next_pos;
        self.batch = Some(Batch {
            next_pos, first,
            open_bytes: res.getattr(intern!(py, "open_bytes"))?.extract()?,
            last_ts: res.getattr(intern!(py, "last_ts"))?.extract()?,
            lazy: false,
            events: res.getattr(intern!(py, "open_events"))?.downcast_into::<PyList>()?.unbind(),
            frames: VecDeque::new(), col_rows: 0, forced_json: false,
        });
        Ok(())
    }

    /// `ingest_arrays`' work; `npreds`: the lowered predicates (taken out of `self`).
    fn ingest_typed<'py>(&mut self, py: Python<'py>, names: Vec<Py<PyString>>,
                         cols: Vec<Bound<'py, PyTuple>>, ts: &[u8],
                         npreds: Option<&(Vec<Node>, Vec<String>)>,
                         kinds: Option<&Bound<'py, PyDict>>)
                         -> PyResult<Bound<'py, PyAny>> {
        if ts.len() % 8 != 0 || names.len() != cols.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("columns differ in length"));
        }
        let n = ts.len() / 8;
        let cols = cols.iter().map(|c| Column::from_py(c, n)).collect::<PyResult<Vec<_>>>()?;
        let width = self.fields.len();
        let src: Vec<Option<usize>> = self.fields.iter().map(|f| {
            let f = f.bind(py).to_str().unwrap_or_default();
            names.iter().position(|x| x.bind(py).to_str().ok() == Some(f))
        }).collect();
        let pwidth = self.preds.len();
        let (nodes, pfields): (&[Node], &[String]) = match npreds {
            Some((n, f)) => (n, f),
            None => (&[], &[]),
        };
        let psrc: Vec<Option<usize>> = pfields.iter()
            .map(|f| names.iter().position(|x| x.bind(py).to_str().ok() == Some(f.as_str())))
            .collect();
        let mut pvals: Vec<PVal> = vec![PVal::Val(Val::Null); pfields.len()];
        let mut flags: Vec<bool> = Vec::with_capacity(n * pwidth);
        // `"name":` of every column, once.
        let mut keys: Vec<Vec<u8>> = vec![];
        for nm in &names {
            let mut k = vec![];
            crate::json::string(&mut k, nm.bind(py).to_str()?);
            k.push(b':');
            keys.push(k);
        }
        // Buffers kept from batch to batch: fresh ones of this size would be new pages of
        // memory, a page fault every 4 KiB.
        let (mut vals, mut blobs, mut ends, mut clamped) = std::mem::take(&mut self.scratch);
        (vals.clear(), blobs.clear(), ends.clear(), clamped.clear());
        let mut last: Option<i64> = self.res.bind(py).getattr("last_ts")?.extract()?;
        let mut blob = std::mem::take(&mut self.blob);
        // Typed columns only: the chunks the batch fills whole are written as columnar frames
        // (frame.rs), and only the other rows as JSON (when they are appended).
        let framed = self.columnar && cols.iter().all(|c| c.framable());
        let bad: Vec<Option<usize>> = if framed {
            cols.iter().map(|c| c.first_bad_string()).collect()
        } else {
            vec![]
        };
        let first_bad = bad.iter().flatten().copied().min().unwrap_or(usize::MAX);
        // Every row is checked (and lowered) before any goes in.
        let checked = (|| -> Result<(), (usize, String, Refused)> {
            for i in 0..n {
                let t = i64::from_le_bytes(ts[8 * i..8 * i + 8].try_into().unwrap());
                let t = match last { Some(l) if t < l => l, _ => t };
                last = Some(t);
                clamped.push(t);
                for j in 0..width {
                    vals.push(match src[j] {
                        None => Val::Null,
                        Some(c) => cols[c].lower(py, i, &mut self.strings)
                            .map_err(|e| (i, self.fields[j].bind(py).to_string(), e))?,
                    });
                }
                for (p, src) in psrc.iter().enumerate() {
                    pvals[p] = match src {
                        None => PVal::Val(Val::Null),
                        Some(c) => cols[*c].pred_value(py, i, &mut self.strings),
                    };
                }
                for node in nodes {
                    flags.push(truthy(py, &node.eval(py, &pvals, &self.strings), &self.strings));
                }
                if framed {
                    // The only refusal a typed column's JSON has (checked per column above).
                    if i == first_bad {
                        let c = bad.iter().position(|&b| b == Some(i)).expect("a bad column");
                        let why = Refused::Json("holds a string that is not UTF-8".into());
                        return Err((i, names[c].bind(py).to_string(), why));
                    }
                } else {
                    row_json(&mut blob, t, &cols, &keys, i)
                        .map_err(|(c, e)| (i, names[c].bind(py).to_string(), e))?;
                    blobs.extend_from_slice(&blob);
                    ends.push(blobs.len());
                }
            }
            Ok(())
        })();
        self.blob = blob;
        if let Err((i, field, why)) = checked {
            self.scratch = (vals, blobs, ends, clamped);
            let why = match why {
                Refused::Lower(LowerError::NotScalar(t)) => format!(
                    "holds a {t}, not a scalar (group keys and aggregated values are strings, \
                     numbers, booleans or null)"),
                Refused::Lower(LowerError::OutOfRange) => "holds an integer outside 64 bits".into(),
                Refused::Json(m) => m,
            };
            let e = self.input_error(py, &field, &why);
            let _ = e.value(py).setattr("index", i);
            return Err(e);
        }
        let onames: Vec<Py<PyString>> = self.outputs.iter()
            .flat_map(|o| o.metrics.iter().map(|m| m.0.clone_ref(py))).collect();
        // `kinds`: every metric comes back as a column (outcols.rs), of the type plan.py
        // chose for SUM/MIN/MAX/OLDEST/RECENT by name.
        let mut out_cols: Vec<OutCol> = vec![];
        for o in &self.outputs {
            for (name, _, func) in &o.metrics {
                let kind: Option<String> = match kinds {
                    Some(k) => k.get_item(name.bind(py))?.map(|x| x.extract()).transpose()?,
                    None => None,
                };
                out_cols.push(OutCol::new(kinds.is_some(), lower_typed(*func, None, 0),
                                          kind.as_deref().unwrap_or("f"), n));
            }
        }
        self.begin_batch(py)?;
        // Rows c0..c1 fill chunks whole: they get no JSON, their chunks' frames hold them.
        let (lens, c0, c1) = if framed {
            self.plan_frames(py, &names, &cols, &keys, &clamped)?
        } else {
            (vec![], 0, 0)
        };
        let mut start = 0;
        let mut run = || -> PyResult<()> {
            // The block's Arrow values, row by row (`Cell`s, `flush_cells`); `slow`: the values
            // a cell points to.
            let w = out_cols.len();
            let rows = if self.out_block > 0 { self.out_block } else { OUT_BLOCK };
            // Lists (no `kinds`) keep no block: their values go into their lists at once.
            let arrow = kinds.is_some();
            let cells = if arrow { rows * w } else { 0 };
            let (mut tags, mut bits) = (vec![0u8; cells], vec![0u64; cells]);
            let mut slow: Vec<Low> = vec![];
            let mut r = 0; // the row's place in the block
            // Key ids found ahead (`find_ahead`): row i's in slot i % (AHEAD + 1).
            let kw = self.core.spaces.len();
            let mut ahead: Vec<KeyRef> = vec![NO_KEY; (AHEAD + 1) * kw];
            let mut ahead_fps: Vec<u64> = vec![0; (AHEAD + 1) * kw];
            for i in 0..n {
                let t = clamped[i];
                let mine = (i % (AHEAD + 1)) * kw;
                self.cur.vals.copy_from_slice(&vals[i * width..(i + 1) * width]);
                self.cur.preds.copy_from_slice(&flags[i * pwidth..(i + 1) * pwidth]);
                self.cur.kids.copy_from_slice(&ahead[mine..mine + kw]);
                self.cur.fps.copy_from_slice(&ahead_fps[mine..mine + kw]);
                self.cur.looked = self.look_ahead && i >= AHEAD;
                ahead[mine..mine + kw].fill(NO_KEY);
                if self.look_ahead {
                    if i + AHEAD < n {
                        // Row i + AHEAD's slot: the one row i - 1 used.
                        let next = ((i + AHEAD) % (AHEAD + 1)) * kw;
                        self.core.find_ahead(&vals[(i + AHEAD) * width..(i + AHEAD + 1) * width],
                                             &mut ahead[next..next + kw],
                                             &mut ahead_fps[next..next + kw]);
                    }
                    // The rows in between go one level deeper into their calendar entries
                    // (whose lines the levels before brought in).
                    for (d, deep) in [(2, 1), (1, 2)] {
                        if i + d < n {
                            let at = ((i + d) % (AHEAD + 1)) * kw;
                            self.core.prefetch_ahead(&ahead[at..at + kw], deep);
                        }
                    }
                }
                if !framed {
                    self.row_len = None;
                    self.blob.clear();
                    self.blob.extend_from_slice(&blobs[start..ends[i]]);
                    start = ends[i];
                } else if i >= c0 && i < c1 && !self.batch.as_ref().is_some_and(|b| b.forced_json) {
                    self.blob.clear();
                    self.row_len = Some(lens[i]);
                } else {
                    self.row_len = Some(lens[i]);
                    if row_json(&mut self.blob, t, &cols, &keys, i).is_err() {
                        return Err(self.invariant(py, format!("checked row {i} has no JSON")));
                    }
                }
                self.take(py, t)?;
                prefetch_probes(&self.outputs, &self.cursors);
                let mut c = 0;
                let mut last: StatesId = (0, 0, 0);
                for o in &self.outputs {
                    let m = o.metrics.len();
                    // As in `ingest`: the previous output's states, without a read.
                    let again = o.alike && self.core.reads_as_before(o.probe.as_ref(), t, &self.cursors);
                    let (states, again) = if again {
                        (None, true)
                    } else {
                        let entry = self.core.read(o.table, &mut self.cur, t, &self.cursors);
                        let (states, tag) = self.core.states(entry);
                        let here = states_id(states, tag);
                        let again = o.same_as_prev && here == last;
                        last = here;
                        (states, again)
                    };
                    if again {
                        self.reused += 1;
                        // The previous output's values, pushed again (its columns are m back).
                        // Arrow columns are all `Arrow`: their cells are copied below, and
                        // the columns themselves not touched (at 240 columns, reading each
                        // one's tag every row was a cache miss per column).
                        for j in (0..m).filter(|_| !arrow) {
                            if let OutCol::Obj(p) = &out_cols[c + j - m] {
                                let v = p.last().expect("the previous output's value").clone_ref(py);
                                if let OutCol::Obj(col) = &mut out_cols[c + j] {
                                    col.push(v);
                                }
                            }
                        }
                        for j in (c..c + m).filter(|_| arrow) {
                            tags[j * rows + r] = tags[(j - m) * rows + r];
                            bits[j * rows + r] = bits[(j - m) * rows + r];
                        }
                        c += m;
                        continue;
                    }
                    for (_, slot, func) in &o.metrics {
                        let st = slot_state(states, *slot);
                        match &mut out_cols[c] {
                            OutCol::Obj(v) => v.push(finalize(py, *func, st, t, &self.strings)),
                            OutCol::Arrow(col) => {
                                let cell = match lower_typed(*func, st, t) {
                                    Some(x) => Cell::typed(x),
                                    None => match lower_scalar(*func, st) {
                                        Some(v) => col.val_cell(&v).unwrap_or_else(|| {
                                            slow.push(Low::V(v));
                                            Cell { tag: CELL_VAL, bits: slow.len() as u64 - 1 }
                                        }),
                                        None => {
                                            slow.push(Low::O(finalize(py, *func, st, t, &self.strings)));
                                            Cell { tag: CELL_OBJ, bits: slow.len() as u64 - 1 }
                                        }
                                    },
                                };
                                tags[c * rows + r] = cell.tag;
                                bits[c * rows + r] = cell.bits;
                            }
                        }
                        c += 1;
                    }
                }
                r += 1;
                if r == rows {
                    if arrow {
                        flush_cells(py, &mut out_cols, &tags, &bits, rows, r, &mut slow, &self.strings);
                    }
                    r = 0;
                }
            }
            if arrow {
                flush_cells(py, &mut out_cols, &tags, &bits, rows, r, &mut slow, &self.strings);
            }
            Ok(())
        };
        let r = run();
        let w = self.end_batch(py);
        self.scratch = (vals, blobs, ends, clamped);
        r?;
        w?;
        // A value that no column of its type holds exactly: every field-typed column comes
        // back as its list, and plan.py raises (the batch has gone in).
        let misfits: Vec<(Py<PyString>, usize)> = onames.iter().zip(&out_cols)
            .filter_map(|(nm, c)| c.misfit().map(|r| (nm.clone_ref(py), r))).collect();
        if kinds.is_some() && misfits.is_empty() && n > 0 {
            // Every column as one record batch through the C data interface (arrow_ffi.rs),
            // when the names can be its fields' (distinct).
            let texts: Vec<String> = onames.iter().map(|nm| nm.bind(py).to_string()).collect();
            let mut sorted: Vec<&String> = texts.iter().collect();
            sorted.sort();
            if sorted.windows(2).all(|w| w[0] != w[1]) {
                let columns = texts.into_iter().zip(out_cols)
                    .map(|(nm, c)| (nm, c.into_ffi().expect("an Arrow column")))
                    .collect();
                let batch = crate::arrow_ffi::Exported::new(columns, n);
                return Ok((batch, misfits).into_pyobject(py)?.into_any());
            }
        }
        let out = PyDict::new(py);
        for (nm, col) in onames.iter().zip(out_cols) {
            out.set_item(nm.bind(py), col.into_py(py, &self.strings, !misfits.is_empty())?)?;
        }
        if kinds.is_none() {
            return Ok(out.into_any());
        }
        Ok((out, misfits).into_pyobject(py)?.into_any())
    }

    /// A batch's chunk plan (after `begin_batch`): each row's JSON length (what it adds to
    /// the open chunk's size, with or without its JSON), and the rows `c0..c1` of the chunks
    /// that begin and close within the batch, whose columnar frames (frame.rs) join the
    /// batch's `frames`. The rows before `c0` end the chunk open before the batch, the rows
    /// from `c1` stay in the chunk open after it: those are written as JSON.
    fn plan_frames(&mut self, py: Python<'_>, names: &[Py<PyString>], cols: &[Column<'_>],
                   keys: &[Vec<u8>], ts: &[i64]) -> PyResult<(Vec<usize>, usize, usize)> {
        // `[`, `,{`, `}]`, the keys and the commas between values.
        let fixed = 5 + keys.iter().map(|k| k.len()).sum::<usize>() + keys.len().saturating_sub(1);
        let mut lens: Vec<usize> = ts.iter().map(|&t| fixed + crate::json::int_len(t)).collect();
        for c in cols {
            c.add_json_lens(&mut lens);
        }
        let target = self.chunk_bytes_target;
        let b = self.batch.as_mut().expect("a batch runs");
        let (mut size, mut from, mut whole) = (b.open_bytes, 0, b.next_pos == b.first);
        let mut spans = vec![];
        for (i, len) in lens.iter().enumerate() {
            size += *len as i64 + 1;
            if size >= target {
                if whole {
                    spans.push((from, i + 1));
                }
                (size, from, whole) = (0, i + 1, true);
            }
        }
        let texts: Vec<String> = names.iter().map(|n| n.bind(py).to_string()).collect();
        for &(a, e) in &spans {
            let mut f = Vec::with_capacity(16 + (e - a) * (8 + 10 * cols.len()));
            crate::frame::begin(&mut f, &ts[a..e], cols.len());
            for (c, col) in cols.iter().enumerate() {
                crate::frame::name(&mut f, &texts[c]);
                col.frame(a, e, &mut f);
            }
            b.frames.push_back((b.next_pos + e as u64, f));
        }
        let (c0, c1) = match (spans.first(), spans.last()) {
            (Some(f), Some(l)) => (f.0, l.1),
            _ => (0, 0),
        };
        Ok((lens, c0, c1))
    }

    /// Before a reader asks the reservoir for events mid-batch: it must hold every row so far
    /// (a chunk decodes its None rows from the JSON it holds).
    /// `reads`: the chunk the reader reads, if known; the open chunk's rows a batch appended
    /// with no JSON are written as JSON first when it may be that chunk.
    fn sync_batch(&mut self, py: Python<'_>, reads: Option<i64>) -> PyResult<()> {
        let open = self.chunk_map.open.map(|o| o.0);
        if let Some(b) = self.batch.as_mut() {
            if b.col_rows > 0 && reads.is_none_or(|k| Some(k) >= open) {
                Self::frame_rows_json(b, &mut self.ojson)
                    .map_err(pyo3::exceptions::PyValueError::new_err)?;
                b.forced_json = true;
            }
            Self::write_back(py, self.res.bind(py), b)?;
        }
        self.give_json(py)
    }

    /// The open chunk's rows appended with no JSON, as JSON (from their chunk's frame) into
    /// `ojson`, which holds none of the chunk's rows yet.
    fn frame_rows_json(b: &mut Batch, ojson: &mut Vec<u8>) -> Result<(), String> {
        let frame = &b.frames.front().ok_or("rows of no columnar frame")?.1;
        crate::frame::rows_json(frame, b.col_rows, ojson)?;
        b.col_rows = 0;
        Ok(())
    }

    /// After a batch, the rows it left as None have their JSON in the reservoir (a reader
    /// outside this core decodes them from there).
    fn end_batch(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.batch.take() {
            Some(mut b) => {
                if b.col_rows > 0 {
                    // The batch stopped inside a columnar chunk (an error): its rows so far
                    // stay in the open chunk, as JSON.
                    Self::frame_rows_json(&mut b, &mut self.ojson)
                        .map_err(pyo3::exceptions::PyValueError::new_err)?;
                }
                let lazy = b.lazy;
                Self::write_back(py, self.res.bind(py), &mut b)?;
                if lazy || self.res.bind(py).getattr(pyo3::intern!(py, "lazy_open"))?.is_truthy()? {
                    self.give_json(py)?;
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The current row (`self.cur`, at `ts`) joins the lowered cache as row `idx` of chunk
    /// `k` (unless the cache holds that row already), so heads passing it later do not lower
    /// the event again.
    fn keep_lowered(&mut self, k: i64, idx: usize, ts: i64) {
        let spare = &mut self.spare_lowered;
        let lw = self.lowered.entry(k).or_insert_with(|| spare.pop().unwrap_or_default());
        if lw.ts.len() == idx {
            lw.ts.push(ts);
            lw.vals.extend_from_slice(&self.cur.vals);
            lw.preds.extend_from_slice(&self.cur.preds);
            lw.kids.extend_from_slice(&self.cur.kids);
        }
        self.bound_lowered(k);
    }

    /// Keep the key ids `row` got in the lowered cache's row (chunk `k`, index `idx`).
    fn keep_kids(&mut self, k: i64, idx: usize, current: bool) {
        let row = if current { &self.cur } else { &self.tmp };
        let n = row.kids.len();
        if let Some(lw) = self.lowered.get_mut(&k) {
            if lw.kids.len() >= (idx + 1) * n {
                lw.kids[idx * n..(idx + 1) * n].copy_from_slice(&row.kids);
                if idx < lw.hot_len {
                    // Its ids changed: it is looked at again (`refresh_hot`).
                    lw.hot.truncate(lw.hot.partition_point(|&h| (h as usize) < idx));
                    lw.hot_len = idx;
                }
            }
        }
    }

    /// Keep at most `LOWERED_CHUNKS_MAX` lowered chunks, dropping the oldest but `keep` (the
    /// chunk a cursor is reading now: a cursor far behind the others reads the oldest one).
    fn bound_lowered(&mut self, keep: i64) {
        if self.lowered.len() > LOWERED_CHUNKS_MAX {
            if let Some(&oldest) = self.lowered.keys().filter(|&&k| k != keep).min() {
                if let Some(lw) = self.lowered.remove(&oldest) {
                    lw.reuse(&mut self.spare_lowered);
                }
            }
        }
    }

    /// Everything of `ingest` but the outputs: refuse or lower, append, move the cursors.
    fn step(&mut self, py: Python<'_>, event: &Bound<'_, PyAny>, ts: i64) -> PyResult<()> {
        if self.prefetch_events {
            crate::json::prefetch_values(event);
        }
        // A bad event is refused before anything changes.
        self.lower_into(py, event, true)?;
        let json = crate::json::event(&mut self.blob, ts, event, &mut self.json_keys);
        self.trace.mark(0);
        match json {
            Err((field, why)) => Err(self.input_error(py, &field, &why.0)),
            Ok(false) => self.take(py, ts),
            Ok(true) => {
                // It held NaN or an infinity, which the reservoir keeps as null: windows take
                // the event as it will be read back (fields lower those floats to null
                // already; predicates see null too), so an event evicted after a restart
                // leaves as it came in.
                let ev = self.read_back(py)?;
                self.preds_into(py, &ev, true)?;
                self.take(py, ts)
            }
        }
    }

    /// Append the lowered, checked event (`self.cur`, its JSON in `self.blob`) and move the
    /// cursors.
    fn take(&mut self, py: Python<'_>, ts: i64) -> PyResult<()> {
        let res = self.res.bind(py).clone();
        if self.trim_due {
            // The chunk closed at the last event: trimming now spreads a chunk's bookkeeping
            // over two events (each under the per-event latency bound).
            self.trim_due = false;
            let floor = self.floor_pos(py)?;
            res.call_method1(pyo3::intern!(py, "trim"), (floor,))?;
            let base: i64 = res.getattr(pyo3::intern!(py, "chunk_base"))?.extract()?;
            let spare = &mut self.spare_lowered;
            self.lowered.retain(|k, lw| *k >= base || {
                std::mem::take(lw).reuse(spare);
                false
            });
            self.chunk_map.trim(base);
        }
        self.trace.mark(1);
        let chunks = self.chunks.bind(py).len();
        if self.busy.is_none() {
            let lazy_head = |ci: &usize| self.cursors[*ci].lazy && self.cursors[*ci].spec != Spec::All;
            let busy = self.order.iter().filter(|ci| !lazy_head(ci)).copied().collect();
            self.busy = Some((busy, self.order.iter().any(lazy_head)));
        }
        // First (the append's Python calls give the misses time to resolve): the heads'
        // next rows are older than this event, so no bound on their end is needed yet.
        self.prefetch_evictions(ts, u64::MAX);
        let (pos, k, idx) = self.append(py, &res, ts)?;
        self.trace.mark(2);
        let next_pos = pos + 1;
        // While the lazy heads lag, the cursors but them (a lazy head would only be left
        // behind below: `deferred`).
        let lag = self.lazy_head_lag > 1;
        let (n, mut deferred) = match &self.busy {
            Some((busy, any_lazy)) if lag => (busy.len(), *any_lazy),
            _ => (self.order.len(), false),
        };
        for oi in 0..n {
            let ci = match &self.busy {
                Some((busy, _)) if lag => busy[oi],
                _ => self.order[oi],
            };
            let c = &self.cursors[ci];
            if c.spec == Spec::All && c.pos == pos {
                // Fast path: the shared current-event tail takes only this event.
                let ws = std::mem::take(&mut self.cursors[ci].inserts);
                self.core.insert_all(&ws, &mut self.cur, ts, pos, &self.cursors);
                self.cursors[ci].inserts = ws;
                self.keep_kids(k, idx, true); // for the heads that evict it later
                let c = &mut self.cursors[ci];
                c.pos = next_pos;
                c.stale = true;
            } else if self.cursors[ci].lazy && self.lazy_head_lag > 1 {
                deferred = true; // moves in `catch_up`
            } else if !self.nothing_to_pass(ci, ts) {
                self.advance_one(py, ci, ts, next_pos)?;
            }
        }
        if deferred {
            self.behind += 1;
            self.behind_to = (ts, next_pos);
            if self.behind >= self.lazy_head_lag || self.core.row_eager(&mut self.cur) {
                self.catch_up(py)?;
            }
        }
        if self.chunks.bind(py).len() != chunks {
            self.trim_due = true;
        }
        self.trace.mark(3);
        self.core.after_step(&self.cursors);
        self.trace.mark(4);
        Ok(())
    }

    /// Ask the CPU for the states every head is about to evict (its next row's key record,
    /// at each of its windows' columns) before any eviction runs: with many misaligned
    /// windows each head evicts a row of another key, a cache miss each, and asked for
    /// together those misses overlap instead of coming one after another. Only a hint: rows
    /// not lowered yet, or whose key id went stale, are skipped.
    fn prefetch_evictions(&self, t: i64, next_pos: u64) {
        let kwidth = self.core.spaces.len();
        // Lazy heads are skipped: only the cursors `busy` holds (all but those).
        let Some((busy, _)) = &self.busy else { return };
        for c in busy.iter().map(|&ci| &self.cursors[ci]) {
            if c.evicts.is_empty() || c.stale || c.lazy {
                continue;
            }
            let (lim, end) = c.spec.limits(t, next_pos);
            if c.pos >= end {
                continue;
            }
            let Some(lw) = self.lowered.get(&c.k) else { continue };
            if lw.ts.len() <= c.idx || lw.ts[c.idx] > lim {
                continue;
            }
            // The row after the next too, whether this event or a later one evicts it: its
            // states are then on their way an event ahead (W1 evicts about a row an event,
            // and asked for only just before, the miss was still most of `evict_row`).
            for idx in c.idx..lw.ts.len().min(c.idx + EVICT_AHEAD) {
                let kids = &lw.kids[idx * kwidth..(idx + 1) * kwidth];
                for &w in &c.evicts {
                    for route in &self.core.windows[w].routes {
                        for g in &route.groups {
                            let tb = &self.core.tables[g.table];
                            let (r, space) = (kids[tb.space], &self.core.spaces[tb.space]);
                            if r.id != u32::MAX && space.valid(r.id, r.gen) {
                                tb.prefetch(space, r.id);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether head `ci` is known to pass nothing at time `t`: its next row is lowered already
    /// and later than its bound. With many misaligned windows most heads have nothing to
    /// evict on most events; this answers for them without the cursor's chunk bookkeeping.
    fn nothing_to_pass(&self, ci: usize, t: i64) -> bool {
        let c = &self.cursors[ci];
        let Spec::Le(d) = c.spec else { return false };
        if c.evicts.is_empty() {
            return false;
        }
        if c.ahead.0 == c.pos {
            return c.ahead.1 > t - d;
        }
        if c.stale {
            return false;
        }
        self.lowered.get(&c.k).is_some_and(|lw| lw.ts.get(c.idx).is_some_and(|&x| x > t - d))
    }

    fn advance_one(&mut self, py: Python<'_>, ci: usize, t: i64, next_pos: u64) -> PyResult<()> {
        let (lim, end) = self.cursors[ci].spec.limits(t, next_pos);
        if self.cursors[ci].pos >= end {
            return Ok(());
        }
        let res = self.res.clone_ref(py).into_bound(py);
        if self.cursors[ci].inserts.is_empty() && self.cursors[ci].evicts.is_empty() {
            // Feeds no window (a calendar window's head): only its position matters, so
            // read the times alone, without lowering the events, and at most
            // `IDLE_STEP_MAX` a call, so the day a window lets go of is passed over many
            // events, not at midnight. A lagging head only keeps more of the reservoir (and
            // a backfill reading from it fills buckets that the next roll drops).
            let mut budget = IDLE_STEP_MAX;
            while self.cursors[ci].pos < end && budget > 0 {
                budget -= 1;
                let (lowered, chunks) = (&self.lowered, &self.chunk_map);
                let c = &mut self.cursors[ci];
                c.position(py, &res, chunks, |k| lowered.contains_key(&k))?;
                let ts = match self.lowered.get(&c.k) {
                    Some(lw) if lw.ts.len() > c.idx => lw.ts[c.idx],
                    _ => {
                        let k = self.cursors[ci].k;
                        self.sync_batch(py, Some(k))?;
                        let c = &mut self.cursors[ci];
                        c.item(py, &res, c.idx)?.0
                    }
                };
                let c = &mut self.cursors[ci];
                if ts > lim {
                    break;
                }
                c.pos += 1;
                c.idx += 1;
            }
            return Ok(());
        }
        if self.cursors[ci].lazy {
            return self.advance_lazy(py, ci, lim, end);
        }
        let width = self.fields.len();
        let pwidth = self.preds.len();
        let kwidth = self.core.spaces.len();
        while self.cursors[ci].pos < end {
            let (lowered, chunks) = (&self.lowered, &self.chunk_map);
            self.cursors[ci].position(py, &res, chunks, |k| lowered.contains_key(&k))?;
            let (k, idx) = (self.cursors[ci].k, self.cursors[ci].idx);
            if self.lowered.get(&k).map_or(0, |l| l.ts.len()) <= idx {
                self.lower_chunk(py, ci, k, idx)?;
            }
            let lw = &self.lowered[&k];
            let ts = lw.ts[idx];
            if ts > lim {
                let c = &mut self.cursors[ci];
                c.ahead = (c.pos, ts);
                break;
            }
            self.tmp.vals.copy_from_slice(&lw.vals[idx * width..(idx + 1) * width]);
            self.tmp.preds.copy_from_slice(&lw.preds[idx * pwidth..(idx + 1) * pwidth]);
            self.tmp.kids.copy_from_slice(&lw.kids[idx * kwidth..(idx + 1) * kwidth]);
            let pos = self.cursors[ci].pos;
            let c = &self.cursors[ci];
            if c.spec == Spec::All {
                // The current-event tail catching up (a replay): as `take` inserts.
                self.core.insert_all(&c.inserts, &mut self.tmp, ts, pos, &self.cursors);
            } else {
                for &w in &c.inserts {
                    self.core.insert(w, &mut self.tmp, ts, pos, None);
                }
            }
            self.evict_row(py, ci, k, idx, ts, pos)?;
        }
        Ok(())
    }

    /// `advance_one` for a head all of whose windows' tables are lazy (lazy.rs): it passes a
    /// raw key's rows reading only their ts and key ids, and evicts an eager key's as
    /// `advance_one` does.
    fn advance_lazy(&mut self, py: Python<'_>, ci: usize, lim: i64, end: u64) -> PyResult<()> {
        let res = self.res.clone_ref(py).into_bound(py);
        let width = self.fields.len();
        let pwidth = self.preds.len();
        let kwidth = self.core.spaces.len();
        while self.cursors[ci].pos < end {
            // Most moves start on a row of a chunk lowered already: no chunk bookkeeping.
            let c = &self.cursors[ci];
            let on_row = !c.stale && self.lowered.get(&c.k).is_some_and(|lw| c.idx < lw.ts.len());
            if !on_row {
                let (lowered, chunks) = (&self.lowered, &self.chunk_map);
                self.cursors[ci].position(py, &res, chunks, |k| lowered.contains_key(&k))?;
                let (k, idx) = (self.cursors[ci].k, self.cursors[ci].idx);
                if self.lowered.get(&k).map_or(0, |l| l.ts.len()) <= idx {
                    self.lower_chunk(py, ci, k, idx)?;
                }
            }
            let k = self.cursors[ci].k;
            self.refresh_hot(k);
            // The chunk's lowered rows up to a row to evict: between two hot rows (which may
            // be evicted) by their times alone, a hot row by its key ids.
            let hit = {
                let lw = &self.lowered[&k];
                let c = &mut self.cursors[ci];
                let mut hit = None;
                loop {
                    let stop = lw.ts.len().min(c.idx.saturating_add(end.saturating_sub(c.pos) as usize));
                    if c.idx >= stop {
                        break;
                    }
                    let h = lw.hot.partition_point(|&x| (x as usize) < c.idx);
                    let next_hot = lw.hot.get(h).map_or(stop, |&x| (x as usize).min(stop));
                    // Times never go back: the rows up to `late` are at most `lim` old.
                    let late = c.idx + lw.ts[c.idx..next_hot].partition_point(|&x| x <= lim);
                    c.pos += (late - c.idx) as u64;
                    c.idx = late;
                    if late == stop {
                        break;
                    }
                    let ts = lw.ts[c.idx];
                    if ts > lim {
                        c.ahead = (c.pos, ts);
                        return Ok(());
                    }
                    if self.core.evicts_row(&c.evicts, &lw.kids[c.idx * kwidth..(c.idx + 1) * kwidth]) {
                        hit = Some((c.idx, ts));
                        break;
                    }
                    c.pos += 1;
                    c.idx += 1;
                }
                hit
            };
            let Some((idx, ts)) = hit else { continue };
            let lw = &self.lowered[&k];
            self.tmp.vals.copy_from_slice(&lw.vals[idx * width..(idx + 1) * width]);
            self.tmp.preds.copy_from_slice(&lw.preds[idx * pwidth..(idx + 1) * pwidth]);
            self.tmp.kids.copy_from_slice(&lw.kids[idx * kwidth..(idx + 1) * kwidth]);
            let pos = self.cursors[ci].pos;
            self.evict_row(py, ci, k, idx, ts, pos)?;
        }
        Ok(())
    }

    /// Bring lowered chunk `k`'s hot rows (`Lowered::hot`) up to date: all its rows, looked
    /// at anew if a key may have turned eager since, else only the rows added since.
    fn refresh_hot(&mut self, k: i64) {
        let (epoch, kw) = (self.core.eager_epoch, self.core.spaces.len());
        let Some(lw) = self.lowered.get_mut(&k) else { return };
        if lw.hot_epoch != epoch {
            (lw.hot_epoch, lw.hot_len) = (epoch, 0);
            lw.hot.clear();
        }
        let n = lw.ts.len();
        for i in lw.hot_len..n {
            if self.core.row_hot(&lw.kids[i * kw..(i + 1) * kw]) {
                lw.hot.push(i as u32);
            }
        }
        lw.hot_len = n;
    }

    /// The row `idx` of lowered chunk `k`, loaded into `tmp`, leaves head `ci`'s evicting
    /// windows; the head moves past it.
    fn evict_row(&mut self, py: Python<'_>, ci: usize, k: i64, idx: usize, ts: i64, pos: u64)
                 -> PyResult<()> {
        for wi in 0..self.cursors[ci].evicts.len() {
            let w = self.cursors[ci].evicts[wi];
            if let Err(m) = self.core.evict(w, &mut self.tmp, ts, pos) {
                return Err(self.invariant(py, m));
            }
        }
        // Ids this row got (or renewed) go back to the cache, compared in place: no copy of
        // the row's ids per event.
        let kwidth = self.core.spaces.len();
        if self.lowered[&k].kids[idx * kwidth..(idx + 1) * kwidth] != self.tmp.kids[..] {
            self.keep_kids(k, idx, false);
        }
        let c = &mut self.cursors[ci];
        c.pos += 1;
        c.idx += 1;
        Ok(())
    }

    /// Move the lazy heads `take` left behind (`lazy_head_lag`) to the last event's time, as
    /// they would have moved event by event: a head passes the same rows, in order, and
    /// evicts the same eager keys' events (a window's state does not depend on whether its
    /// adds and removes interleave, lazy.rs); only later. Every call that reads states,
    /// cursors or the reservoir's floor, other than an event's own reads, comes here first.
    fn catch_up(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.behind == 0 {
            return Ok(());
        }
        self.behind = 0;
        let (t, next_pos) = self.behind_to;
        for oi in 0..self.order.len() {
            let ci = self.order[oi];
            if self.cursors[ci].lazy && !self.nothing_to_pass(ci, t) {
                self.advance_one(py, ci, t, next_pos)?;
            }
        }
        Ok(())
    }

    /// Every raw key of a lazy table turns eager (lazy.rs `settle`).
    fn settle(&mut self) {
        self.core.settle(&self.cursors);
    }

    /// Lower the events of chunk `k` up to index `idx` into the shared cache, so that every
    /// cursor passing them (W1's 120 heads, W2's 7 cursors) reads the lowered row.
    fn lower_chunk(&mut self, py: Python<'_>, ci: usize, k: i64, idx: usize) -> PyResult<()> {
        self.sync_batch(py, Some(k))?;
        let mut lw = match self.lowered.remove(&k) {
            Some(lw) => lw,
            None => self.spare_lowered.pop().unwrap_or_default(),
        };
        let res = self.res.clone_ref(py).into_bound(py);
        for j in lw.ts.len()..=idx {
            let (ts, ev) = self.cursors[ci].item(py, &res, j)?;
            self.lower_into(py, &ev, false)?;
            lw.ts.push(ts);
            lw.vals.extend_from_slice(&self.tmp.vals);
            lw.preds.extend_from_slice(&self.tmp.preds);
            lw.kids.extend_from_slice(&self.tmp.kids);
        }
        self.lowered.insert(k, lw);
        self.bound_lowered(k);
        Ok(())
    }

    fn cursor_index(&self, id: i64) -> PyResult<usize> {
        self.cursors.iter().position(|c| c.id == id)
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(id))
    }

    fn floor_pos(&self, py: Python<'_>) -> PyResult<u64> {
        match self.cursors.iter().map(|c| c.pos).min() {
            Some(p) => Ok(p),
            None => self.res.bind(py).getattr("next_pos")?.extract(),
        }
    }

    fn scan<F>(&mut self, py: Python<'_>, start: u64, end: u64, mut f: F) -> PyResult<()>
    where
        F: FnMut(&mut StreamCore, Python<'_>, i64, u64, &Bound<'_, PyAny>) -> PyResult<bool>,
    {
        if start >= end {
            return Ok(());
        }
        self.sync_batch(py, None)?;
        let res = self.res.clone_ref(py).into_bound(py);
        let mut c = Cursor::new(-1, Spec::All, start);
        while c.pos < end {
            let (ts, ev) = c.peek(py, &res)?;
            if !f(self, py, ts, c.pos, &ev)? {
                break;
            }
            c.pos += 1;
            c.idx += 1;
        }
        Ok(())
    }
}

/// Row `i` of a batch's columns as the JSON `[t,{...}]` into `blob` (cleared first); `keys`
/// holds each column's `"name":`. An error names the column (its index) that refused.
fn row_json(blob: &mut Vec<u8>, t: i64, cols: &[Column<'_>], keys: &[Vec<u8>], i: usize)
            -> Result<(), (usize, Refused)> {
    blob.clear();
    blob.push(b'[');
    crate::json::int(blob, t);
    blob.extend_from_slice(b",{");
    for (c, col) in cols.iter().enumerate() {
        if c > 0 {
            blob.push(b',');
        }
        blob.extend_from_slice(&keys[c]);
        col.json(i, blob).map_err(|e| (c, e))?;
    }
    blob.extend_from_slice(b"}]");
    Ok(())
}

/// A template of `ingest`'s dict: each of `names` mapped to None, in order. Made once per plan
/// and copied per event, so built key by key from an empty dict: its table then holds str keys
/// only (`_PyDict_NewPresized` would make a general one), whose lookups are the fast ones.
fn template_dict<'a, 'py>(py: Python<'py>, names: impl Iterator<Item = &'a Py<PyString>>)
                          -> PyResult<Bound<'py, PyDict>> {
    let t = PyDict::new(py);
    for name in names {
        t.set_item(name.bind(py), py.None())?;
    }
    Ok(t)
}

type SlotSpec = (String, String, i64, String, i64);
type GroupSpec = (String, Vec<usize>, Vec<SlotSpec>);
type RouteSpec = (Option<usize>, Vec<GroupSpec>);
type WindowSpec = (u64, i64, Option<i64>, Vec<RouteSpec>, Option<(i64, i64, i64)>);
/// A group node of a table being assembled: gid, calendar window, slots, plan window.
type Member = (String, Option<Hop>, Vec<(String, Kind, Input)>, usize);
/// What calendar windows must share to share buckets: key space, bucket width and
/// alignment, filter, start position and tail cursor.
type Family = (usize, i64, i64, Option<usize>, u64, usize);
type OutputSpec = (String, Vec<usize>, usize, Option<usize>, Vec<(Py<PyString>, usize, String)>);

#[pymethods]
impl StreamCore {
    #[new]
    fn new(py: Python<'_>, res: PyObject, input_error: PyObject, invariant: PyObject) -> PyResult<Self> {
        let chunks = res.bind(py).getattr("chunks")?.downcast_into::<PyList>()?.unbind();
        let counters = res.bind(py).getattr("counters")?.downcast_into::<Counters>()?.unbind();
        let chunk_bytes_target: i64 = res.bind(py).getattr("chunk_bytes_target")?.extract()?;
        Ok(StreamCore {
            res, counters, chunks, input_error, invariant, fields: vec![], preds: vec![], cursors: vec![],
            order: vec![], outputs: vec![],
            core: Core { windows: vec![], tables: vec![], groups: vec![], spaces: vec![],
                         space_fields: vec![],
                         space_names: vec![],
                         key: vec![], lazy: vec![], logs: vec![], lazy_window: vec![],
                         folds: vec![], folded: None, raw_read: None, eager_epoch: 1, force_eager: false, eager_now: vec![],
                         sweep_ids: vec![], steps: 0 },
            gids: vec![],
            strings: Interner::default(), cur: Row::default(), tmp: Row::default(),
            blob: Vec::with_capacity(1024), chunk_bytes_target, lowered: FxHashMap::default(),
            spare_lowered: vec![],
            chunk_map: Chunks::default(), batch: None, scratch: Default::default(), npreds: None,
            trim_due: false, ojson: vec![b'['], template: None, template_by_name: None,
            fill_by_index: crate::outdict::layout_known(py), dict_known: crate::outdict::layout_known(py),
            last_out: None, recycled: 0,
            json_keys: Default::default(), prefetch_events: true, reused: 0, by_key: 0,
            look_ahead: true, out_block: 0,
            lazy_min_tables: LAZY_MIN_TABLES, lazy_min_allocating: LAZY_MIN_ALLOCATING,
            row_len: None, columnar: true,
            key_fingerprint_bits: 64,
            lazy_head_lag: LAZY_HEAD_LAG, busy: None, behind: 0, behind_to: (0, 0),
            trace: Default::default(), res_io: None,
        })
    }

    /// Take a new lowered plan; cursors (by id) and group tables (by gid) carry over.
    fn set_plan(&mut self, py: Python<'_>, fields: Vec<Py<PyString>>, preds: Vec<PyObject>,
                cursors: Vec<(i64, String, i64, i64, i64, u64)>, order: Vec<i64>,
                windows: Vec<WindowSpec>, outputs: Vec<OutputSpec>) -> PyResult<()> {
        self.catch_up(py)?;
        self.busy = None; // the cursors, their order and which are lazy change here
        // Raw keys turn eager first (lazy.rs): their logs follow the old plan's windows.
        self.settle();
        // Plain tables' states leave their spaces' record slabs while the plan changes (the
        // records' layout follows the tables and their slots), and go back at the end.
        for t in self.core.tables.iter_mut() {
            t.detach(&mut self.core.spaces[t.space]);
        }
        let mut old: FxHashMap<i64, Cursor> = self.cursors.drain(..).map(|c| (c.id, c)).collect();
        for (id, kind, a, b, c, pos) in cursors {
            let mut cur = old.remove(&id).unwrap_or_else(|| Cursor::new(id, Spec::All, pos));
            cur.spec = Spec::parse(&kind, a, b, c)?;
            cur.inserts.clear();
            cur.evicts.clear();
            self.cursors.push(cur);
        }
        self.order = order.iter().map(|id| self.cursor_index(*id)).collect::<PyResult<_>>()?;
        // Key spaces carry over by their fields' names (field numbers change between plans),
        // tables by gid; a table keeps its entries, indexed by its space's ids.
        let old_names = std::mem::take(&mut self.core.space_names);
        let mut old_spaces: FxHashMap<Vec<String>, KeySpace> =
            old_names.iter().cloned().zip(self.core.spaces.drain(..)).collect();
        let mut space_index: FxHashMap<Vec<String>, usize> = FxHashMap::default();
        let mut spaces: Vec<KeySpace> = vec![];
        let mut space_fields: Vec<Vec<usize>> = vec![];
        let mut space_names: Vec<Vec<String>> = vec![];
        let old_groups = std::mem::take(&mut self.core.groups);
        let old_table_of: FxHashMap<String, usize> =
            self.gids.drain(..).zip(old_groups.iter().map(|g| g.0)).collect();
        let mut old_tables: Vec<Option<GroupTable>> = self.core.tables.drain(..).map(Some).collect();
        let mut moved: FxHashMap<usize, usize> = FxHashMap::default(); // old table -> new
        let mut index: FxHashMap<String, usize> = FxHashMap::default(); // gid -> group
        let mut group_refs: Vec<(usize, usize)> = vec![];
        let mut tables: Vec<GroupTable> = vec![];
        // Per table: its group nodes (gid, calendar window size, slots, window), in plan order.
        let mut members: Vec<Vec<Member>> = vec![];
        // Calendar tables by what their windows must share to share buckets: key space, bucket
        // width and alignment, filter, start and tail.
        let mut families: FxHashMap<Family, Vec<usize>> = FxHashMap::default();
        let mut routed: Vec<bool> = vec![];
        let mut wins = vec![];
        for (wi, (start_pos, tail, head, routes, hop)) in windows.into_iter().enumerate() {
            let tail = self.cursor_index(tail)?;
            let head = head.map(|h| self.cursor_index(h)).transpose()?;
            let hop = hop.map(|(every, align, m)| Hop { every, align, m });
            self.cursors[tail].inserts.push(wi);
            if let Some(h) = head {
                // A calendar window's head only keeps the reservoir from being trimmed
                // below the window (backfill reads it); buckets evict natively.
                if hop.is_none() {
                    self.cursors[h].evicts.push(wi);
                }
            }
            let mut rs = vec![];
            for (pred, groups) in routes {
                let mut gs = vec![];
                for (gid, key_fields, slots) in groups {
                    let names = key_fields.iter()
                        .map(|&f| Ok(fields.get(f).ok_or_else(|| {
                            pyo3::exceptions::PyValueError::new_err(format!("group field {f}"))
                        })?.bind(py).to_str()?.to_string()))
                        .collect::<PyResult<Vec<String>>>()?;
                    let si = match space_index.get(&names) {
                        Some(&si) => si,
                        None => {
                            spaces.push(old_spaces.remove(&names).unwrap_or_else(|| {
                                KeySpace::with_fingerprint_bits(self.key_fingerprint_bits)
                            }));
                            space_fields.push(key_fields.clone());
                            space_names.push(names.clone());
                            space_index.insert(names, spaces.len() - 1);
                            spaces.len() - 1
                        }
                    };
                    if index.contains_key(&gid) {
                        return Err(pyo3::exceptions::PyValueError::new_err(
                            format!("group {gid} in two places of the plan")));
                    }
                    let mut ss = vec![];
                    for (sid, kind, arg, input, idx) in slots {
                        let inp = match input.as_str() {
                            "one" => Input::One,
                            "field" => Input::Field(idx as usize),
                            _ => Input::Pred(idx as usize),
                        };
                        ss.push((sid, Kind::parse(&kind, arg)?, inp));
                    }
                    let family = hop.map(|h| (si, h.every, h.align, pred, start_pos, tail));
                    let ti = match old_table_of.get(&gid) {
                        // A table carries over with its group nodes.
                        Some(&ot) if old_tables[ot].is_some() || moved.contains_key(&ot) => {
                            *moved.entry(ot).or_insert_with(|| {
                                let mut t = old_tables[ot].take().expect("an old table");
                                t.space = si;
                                tables.push(t);
                                members.push(vec![]);
                                routed.push(false);
                                tables.len() - 1
                            })
                        }
                        // A new calendar window joins a table of its family that holds
                        // nothing yet (W2 defines its windows before any event).
                        _ => match family.and_then(|f| families.get(&f))
                            .and_then(|ts| ts.iter().copied().find(|&t| !tables[t].fed)) {
                            Some(t) => t,
                            None => {
                                tables.push(GroupTable::new(si));
                                members.push(vec![]);
                                routed.push(false);
                                tables.len() - 1
                            }
                        },
                    };
                    if let Some(f) = family {
                        let ts = families.entry(f).or_default();
                        if !ts.contains(&ti) {
                            ts.push(ti);
                        }
                    }
                    members[ti].push((gid.clone(), hop, ss, wi));
                    index.insert(gid.clone(), group_refs.len());
                    group_refs.push((ti, members[ti].len() - 1));
                    self.gids.push(gid);
                    if !routed[ti] {
                        // One route per table: the first window inserts for all its views.
                        routed[ti] = true;
                        gs.push(GroupRoute { table: ti });
                    }
                }
                rs.push(Route { pred, groups: gs });
            }
            wins.push(Window { start_pos, tail, head, routes: rs });
        }
        for (t, mem) in tables.iter_mut().zip(members) {
            let si = t.space;
            match mem[0].1 {
                None => {
                    // A sliding window's table: one group node.
                    let (_, _, ss, _) = mem.into_iter().next().expect("a member");
                    t.hop = None;
                    t.set_slots(ss, &mut spaces[si]);
                }
                Some(h) => {
                    // A calendar table: the union of its views' slots, in plan order.
                    let mut all: Vec<(String, Kind, Input)> = vec![];
                    for (_, _, ss, _) in &mem {
                        for s in ss {
                            if !all.iter().any(|a| a.0 == s.0) {
                                all.push(s.clone());
                            }
                        }
                    }
                    let views = mem.into_iter().map(|(gid, hop, ss, window)| View {
                        slots: ss.iter().map(|s| all.iter().position(|a| a.0 == s.0).unwrap()).collect(),
                        sids: ss.into_iter().map(|s| s.0).collect(),
                        m: hop.map_or(h.m, |x| x.m), gid, window,
                    }).collect();
                    if t.hop.is_none() {
                        t.hop = Some(h);
                    }
                    t.set_views(views);
                    t.set_slots(all, &mut spaces[si]);
                }
            }
        }
        let mut outs = vec![];
        for (gid, key_fields, window, pred, metrics) in outputs {
            let g = *index.get(&gid).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!("output of unknown group {gid}"))
            })?;
            let (ti, v) = group_refs[g];
            let metrics = metrics.into_iter()
                .map(|(n, s, f)| Ok((n, tables[ti].slot_of(v, s), Func::parse(&f)?)))
                .collect::<PyResult<Vec<_>>>()?;
            // Same table and (slot, function) list as the previous output: see `same_as_prev`.
            let same_as_prev = outs.last().is_some_and(|p: &Output| {
                group_refs[p.table].0 == ti && p.metrics.len() == metrics.len()
                    && p.metrics.iter().zip(&metrics).all(|(a, b)| a.1 == b.1 && a.2 == b.2)
            });
            outs.push(Output { table: g, key_fields, window, pred, metrics, same_as_prev,
                               alike: false, probe: None });
        }
        // Tables that left the plan give their keys back to the spaces that stay.
        for mut t in old_tables.into_iter().flatten() {
            if let Some(&si) = old_names.get(t.space).and_then(|n| space_index.get(n)) {
                t.release_all(&mut spaces[si]);
            }
        }
        // Each space's record: its plain tables' slots side by side, in plan order (the order
        // the windows insert in).
        let mut stride = vec![0usize; spaces.len()];
        let mut cols = vec![None; tables.len()];
        for (ti, t) in tables.iter().enumerate() {
            if t.hop.is_none() {
                cols[ti] = Some(stride[t.space]);
                stride[t.space] += t.sids.len();
            }
        }
        for (si, sp) in spaces.iter_mut().enumerate() {
            sp.reset_slab(stride[si]);
        }
        for (t, col) in tables.iter_mut().zip(cols) {
            if let Some(c) = col {
                t.attach(&mut spaces[t.space], c);
            }
        }
        self.core.tables = tables;
        self.core.groups = group_refs;
        self.core.spaces = spaces;
        self.core.space_fields = space_fields;
        self.core.space_names = space_names;
        self.core.windows = wins;
        self.outputs = outs;
        self.cur = Row { looked: false, vals: vec![Val::Null; fields.len()], preds: vec![false; preds.len()],
                         kids: vec![NO_KEY; self.core.spaces.len()],
                         fps: vec![0; self.core.spaces.len()] };
        self.tmp = self.cur.clone();
        self.fields = fields;
        self.preds = preds;
        self.lowered.clear(); // rows of the old plan's width
        self.template = None; // names of the old plan's outputs
        self.template_by_name = None;
        self.last_out = None;
        self.core.plan_lazy(&self.cursors, self.lazy_min_tables, self.lazy_min_allocating);
        // Outputs of lazy tables that fold alike (lazy.rs) read one fold for a raw key: the
        // values of the output before, when its states are that very fold (`states_id`).
        let fam = |o: &Output| self.core.lazy[self.core.groups[o.table].0].as_ref().map(|l| l.fam);
        let alike: Vec<bool> = (0..self.outputs.len()).map(|i| {
            i > 0 && {
                let (a, b) = (&self.outputs[i - 1], &self.outputs[i]);
                fam(a).is_some() && fam(a) == fam(b) && a.metrics.len() == b.metrics.len()
                    && a.metrics.iter().zip(&b.metrics).all(|(x, y)| x.1 == y.1 && x.2 == y.2)
            }
        }).collect();
        for (o, a) in self.outputs.iter_mut().zip(alike) {
            o.same_as_prev |= a;
            o.alike = a;
            o.probe = self.core.lazy[self.core.groups[o.table].0].as_ref().filter(|_| a).map(|l| l.probe());
        }
        for c in self.cursors.iter_mut() {
            c.lazy = c.inserts.is_empty() && !c.evicts.is_empty()
                && c.evicts.iter().all(|&w| self.core.lazy_window[w].is_some());
        }
        self.core.set_floors(&self.cursors);
        Ok(())
    }

    /// Feed one event at `ts` (clamped here to the last event's time: time never goes back,
    /// see `Engine.ingest`); returns every metric of the stream for it, in output order, or
    /// (`by_name`) in the sorted order of the names.
    #[pyo3(signature = (event, ts, by_name=false))]
    fn ingest<'py>(&mut self, py: Python<'py>, event: &Bound<'py, PyAny>, ts: i64, by_name: bool)
                   -> PyResult<Bound<'py, PyDict>> {
        let ts = match self.counters.borrow(py).last_ts {
            Some(last) if ts < last => last,
            _ => ts,
        };
        self.trace.begin();
        self.step(py, event, ts)?;
        prefetch_probes(&self.outputs, &self.cursors);
        let (template, distinct) = self.template(py)?;
        let n = template.len();
        if by_name {
            self.template_by_name(py)?;
        }
        let at = self.template_by_name.as_ref().filter(|_| by_name).map(|t| t.1.as_slice());
        let by_index = distinct && self.fill_by_index && self.dict_known;
        // The last call's dict, if the caller let go of it and each name is still in its entry
        // (outdict.rs): every value is written again, None too.
        let again = self.last_out.take()
            .filter(|(d, b)| by_index && *b == by_name && d.get_refcnt(py) == 1)
            .map(|(d, _)| d.into_bound(py))
            .and_then(|d| Slots::of(&d, n, by_index).map(|sl| (d, sl)))
            .filter(|(_, sl)| self.outputs.iter().flat_map(|o| o.metrics.iter()).enumerate()
                .all(|(c, m)| sl.holds(at.map_or(c, |a| a[c] as usize), m.0.as_ptr())));
        let fresh = again.is_none();
        // Distinct names: each metric's entry of the copy is known (its place in the template),
        // and its value goes there by index (outdict.rs), else by key.
        let (out, slots) = match again {
            Some((d, sl)) => {
                self.recycled += 1;
                (d, Some(sl))
            }
            None => {
                let t = match &self.template_by_name {
                    Some((t, _)) if by_name => t.bind(py).clone(),
                    _ => template,
                };
                let out = t.copy()?;
                let slots = if distinct { Slots::of(&out, n, by_index) } else { None };
                (out, slots)
            }
        };
        let by_key = std::cell::Cell::new(0u64);
        let put = |c: usize, name: &Py<PyString>, v: Bound<'py, PyAny>| -> PyResult<()> {
            let v = match &slots {
                Some(sl) => {
                    let i = at.as_ref().map_or(c, |a| a[c] as usize);
                    match sl.put(i, name.as_ptr(), v) {
                        Ok(()) => return Ok(()),
                        Err(v) => v,
                    }
                }
                None => v,
            };
            by_key.set(by_key.get() + 1);
            out.set_item(name.bind(py), v)
        };
        // The last output's values (see `Output::same_as_prev`).
        let mut vals: Vec<Bound<'py, PyAny>> = vec![];
        let mut last: StatesId = (0, 0, 0);
        let mut c = 0; // the metric's place in output order
        for o in &self.outputs {
            if o.alike && self.core.reads_as_before(o.probe.as_ref(), ts, &self.cursors) {
                // The previous output's states, so its values (`last` stays theirs).
                self.reused += 1;
                for ((name, _, _), v) in o.metrics.iter().zip(&vals) {
                    if !fresh || !distinct || !v.is_none() {
                        put(c, name, v.clone())?;
                    }
                    c += 1;
                }
                continue;
            }
            let entry = self.core.read(o.table, &mut self.cur, ts, &self.cursors);
            let (states, tag) = self.core.states(entry);
            let here = states_id(states, tag);
            if o.same_as_prev && here == last {
                self.reused += 1;
            } else {
                vals.clear();
                for (_, slot, func) in &o.metrics {
                    // Bound: dropped with a plain decref (a `Py` dropped asks whether the GIL
                    // is held first, 405 times an event).
                    vals.push(finalize(py, *func, slot_state(states, *slot), ts, &self.strings)
                        .into_bound(py));
                }
            }
            last = here;
            for ((name, _, _), v) in o.metrics.iter().zip(&vals) {
                // None is there already in a fresh copy (unless a later output of the same
                // name set a value).
                if !fresh || !distinct || !v.is_none() {
                    put(c, name, v.clone())?;
                }
                c += 1;
            }
        }
        self.by_key += by_key.get();
        if by_index {
            self.last_out = Some((out.clone().unbind(), by_name));
        }
        self.trace.mark(5);
        self.trace.end();
        Ok(out)
    }

    /// Keep the section times (`TRACE_SECTIONS`) of the `ingest` calls at least this slow
    /// (ns) for `slow_calls`; 0 (the default) times nothing.
    #[getter]
    fn trace_slow_ns(&self) -> u64 {
        self.trace.threshold_ns
    }

    #[setter]
    fn set_trace_slow_ns(&mut self, ns: u64) {
        self.trace.threshold_ns = ns;
    }

    /// The slow calls kept since the last call, oldest first: (total ns, ns per section).
    fn slow_calls(&mut self) -> Vec<(u64, Vec<u64>)> {
        self.trace.slow.drain(..).map(|(t, s)| (t, s.to_vec())).collect()
    }

    /// `ingest_many` over columns: row `i` is the event `{names[j]: cols[j][i]}`, at `ts[i]`
    /// clamped as `ingest` clamps. Every row is checked and lowered first, natively from the
    /// columns (plus its JSON for the reservoir): a refused row raises `MetricInputError` with
    /// `index` set to its place and nothing of the batch is ingested. Then the rows go in one
    /// by one with their lowered values; returns each metric's values as a list.
    fn ingest_columns<'py>(&mut self, py: Python<'py>, names: Vec<Py<PyString>>,
                           cols: Vec<Bound<'py, PyList>>, ts: Vec<i64>)
                           -> PyResult<Bound<'py, PyDict>> {
        if cols.iter().any(|c| c.len() != ts.len()) || names.len() != cols.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("columns differ in length"));
        }
        let n = ts.len();
        let width = self.fields.len();
        let pwidth = self.preds.len();
        // Which column feeds each plan field (None: the events lack it, so it is null).
        let src: Vec<Option<usize>> = self.fields.iter().map(|f| {
            let f = f.bind(py).to_str().unwrap_or_default();
            names.iter().position(|x| x.bind(py).to_str().ok() == Some(f))
        }).collect();
        let mut vals: Vec<Val> = Vec::with_capacity(n * width);
        let mut flags: Vec<bool> = Vec::with_capacity(n * pwidth);
        let mut blobs: Vec<u8> = Vec::with_capacity(n * 64);
        let mut ends: Vec<usize> = Vec::with_capacity(n);
        let mut events: Vec<Bound<'py, PyDict>> = Vec::with_capacity(n);
        let mut clamped: Vec<i64> = Vec::with_capacity(n);
        let mut last: Option<i64> = self.res.bind(py).getattr("last_ts")?.extract()?;
        let tag = |e: PyErr, i: usize| {
            let _ = e.value(py).setattr("index", i);
            e
        };
        for (i, &t) in ts.iter().enumerate() {
            let t = match last { Some(l) if t < l => l, _ => t };
            last = Some(t);
            clamped.push(t);
            let d = PyDict::new(py);
            for (name, col) in names.iter().zip(&cols) {
                d.set_item(name.bind(py), col.get_item(i)?)?;
            }
            for j in 0..width {
                let f = self.fields[j].clone_ref(py).into_bound(py);
                let v = match src[j] {
                    None => Val::Null,
                    Some(c) => self.lower_value(py, &cols[c].get_item(i)?, &f)
                        .map_err(|e| tag(e, i))?,
                };
                vals.push(v);
            }
            for p in &self.preds {
                flags.push(p.bind(py).call1((&d,)).and_then(|x| x.is_truthy())
                    .map_err(|e| tag(e, i))?);
            }
            let d = match crate::json::event(&mut self.blob, t, d.as_any(), &mut self.json_keys) {
                Err((field, why)) => return Err(tag(self.input_error(py, &field, &why.0), i)),
                Ok(false) => d,
                Ok(true) => {
                    // NaN or an infinity, kept as null: as `step` does, the row is the event
                    // read back.
                    let ev = self.read_back(py)?.downcast_into::<PyDict>()?;
                    flags.truncate(i * pwidth);
                    for p in &self.preds {
                        flags.push(p.bind(py).call1((&ev,)).and_then(|x| x.is_truthy())
                            .map_err(|e| tag(e, i))?);
                    }
                    ev
                }
            };
            blobs.extend_from_slice(&self.blob);
            ends.push(blobs.len());
            events.push(d);
        }
        let onames: Vec<Py<PyString>> = self.outputs.iter()
            .flat_map(|o| o.metrics.iter().map(|m| m.0.clone_ref(py))).collect();
        let mut out_cols: Vec<Vec<PyObject>> =
            onames.iter().map(|_| Vec::with_capacity(n)).collect();
        let mut start = 0;
        for i in 0..events.len() {
            let t = clamped[i];
            self.cur.vals.copy_from_slice(&vals[i * width..(i + 1) * width]);
            self.cur.preds.copy_from_slice(&flags[i * pwidth..(i + 1) * pwidth]);
            self.cur.kids.fill(NO_KEY);
            self.cur.looked = false;
            self.blob.clear();
            self.blob.extend_from_slice(&blobs[start..ends[i]]);
            start = ends[i];
            self.take(py, t)?;
            let mut c = 0;
            let mut last: StatesId = (0, 0, 0);
            for o in &self.outputs {
                let entry = self.core.read(o.table, &mut self.cur, t, &self.cursors);
                let (states, tag) = self.core.states(entry);
                let here = states_id(states, tag);
                let again = o.same_as_prev && here == last;
                last = here;
                self.reused += again as u64;
                let m = o.metrics.len();
                for (_, slot, func) in &o.metrics {
                    let v = if again {
                        // The previous output's value (its columns are m back).
                        out_cols[c - m].last().expect("the previous output's value").clone_ref(py)
                    } else {
                        finalize(py, *func, slot_state(states, *slot), t, &self.strings)
                    };
                    out_cols[c].push(v);
                    c += 1;
                }
            }
        }
        let out = PyDict::new(py);
        for (nm, col) in onames.iter().zip(out_cols) {
            out.set_item(nm.bind(py), PyList::new(py, col)?)?;
        }
        Ok(out)
    }

    /// `ingest_columns` for a plan without predicates, over typed columns (`Column`, built
    /// by plan.py from Arrow or numpy): no Python object per row but the metrics' values.
    /// `ts` holds one little-endian i64 per row. Same checks, clamping and values.
    /// `kinds` (metric name -> `"i" | "f" | "b" | "s" | "n"` for SUM, MIN, MAX, OLDEST and
    /// RECENT; plan.py `value_kind`): every metric comes back as a column (outcols.rs), and
    /// the call returns `(values, misfits)`: `misfits` lists (metric, first row) of the
    /// values their column could not hold exactly (then the field-typed columns are lists).
    /// With no misfit (and distinct metric names, rows > 0), `values` is instead one record
    /// batch of all the columns, exported through the Arrow C data interface (`Exported`:
    /// import it with `pyarrow.RecordBatch._import_from_c(*values.addresses())`).
    #[pyo3(signature = (names, cols, ts, kinds=None))]
    fn ingest_arrays<'py>(&mut self, py: Python<'py>, names: Vec<Py<PyString>>,
                          cols: Vec<Bound<'py, PyTuple>>, ts: &[u8],
                          kinds: Option<Bound<'py, PyDict>>)
                          -> PyResult<Bound<'py, PyAny>> {
        if !self.preds.is_empty() && self.npreds.is_none() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "the plan's predicates are not lowered: use ingest_columns"));
        }
        let npreds = self.npreds.take();
        let r = self.ingest_typed(py, names, cols, ts, npreds.as_ref(), kinds.as_ref());
        self.npreds = npreds;
        r
    }

    /// Give the reservoir the open chunk's JSON held here (it calls this before it reads
    /// `open_blobs`: a clean close, a snapshot, decoding rows a batch left as None).
    fn hand_off(&mut self, py: Python<'_>) -> PyResult<()> {
        self.sync_batch(py, None)
    }

    /// Lower the plan's predicates (its expressions, in the order `set_plan` got their
    /// closures) for `ingest_arrays`; false when one cannot be (the batch then goes through
    /// `ingest_columns`).
    fn lower_preds(&mut self, exprs: Vec<Bound<'_, PyAny>>) -> bool {
        let mut fields = vec![];
        let nodes: Option<Vec<Node>> = exprs.iter()
            .map(|e| crate::predicate::parse(e, &mut fields, &mut self.strings)).collect();
        self.npreds = nodes.filter(|n| n.len() == self.preds.len()).map(|n| (n, fields));
        self.npreds.is_some()
    }
    /// Move every cursor to time `t` / position `next_pos` (replay after a crash).
    fn advance_all(&mut self, py: Python<'_>, t: i64, next_pos: u64) -> PyResult<()> {
        self.catch_up(py)?;
        for oi in 0..self.order.len() {
            self.advance_one(py, self.order[oi], t, next_pos)?;
        }
        self.core.after_step(&self.cursors);
        Ok(())
    }

    /// Move one cursor (a new one, catching its windows up alone).
    fn advance(&mut self, py: Python<'_>, cursor: i64, t: i64, next_pos: u64) -> PyResult<()> {
        self.catch_up(py)?;
        let ci = self.cursor_index(cursor)?;
        // A catch-up, as a backfill: every key it inserts is eager (lazy.rs).
        self.settle();
        self.core.force_eager = true;
        let r = self.advance_one(py, ci, t, next_pos);
        self.core.force_eager = false;
        self.core.set_floors(&self.cursors);
        r
    }

    /// Insert the reservoir's events [start, end) into window `window` (only into the state
    /// slot (gid, sid) when given): filling nodes added to a running plan.
    #[pyo3(signature = (window, start, end, only=None))]
    fn fill(&mut self, py: Python<'_>, window: usize, start: u64, end: u64,
            only: Option<(String, String)>) -> PyResult<()> {
        self.catch_up(py)?;
        let (mut window, mut start) = (window, start);
        let only = match only {
            None => None,
            Some((gid, sid)) => {
                let g = self.gids.iter().position(|g| *g == gid)
                    .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(gid.clone()))?;
                let (t, v) = self.core.groups[g];
                let tb = &self.core.tables[t];
                let s = tb.views.get(v).map_or(&tb.sids, |v| &v.sids).iter().position(|x| *x == sid)
                    .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(sid.clone()))?;
                let s = tb.slot_of(v, s);
                if tb.views.len() > 1 {
                    // A slot of a table that other windows share: filled once, for every
                    // view, from the start of the largest one's window, through the window
                    // that inserts into the table.
                    if !tb.unfilled.contains(&sid) {
                        return Ok(()); // no event came since the slot was added
                    }
                    let mut from = u64::MAX;
                    for view in &tb.views {
                        let w = &self.core.windows[view.window];
                        let head = w.head.map_or(w.start_pos, |h| self.cursors[h].pos);
                        from = from.min(w.start_pos.max(head));
                    }
                    start = from;
                    window = self.core.windows.iter()
                        .position(|w| w.routes.iter().any(|r| r.groups.iter().any(|g| g.table == t)))
                        .ok_or_else(|| self.invariant(py, format!("no window inserts into {gid}")))?;
                }
                let tb = &mut self.core.tables[t];
                if tb.views.len() > 1 {
                    tb.clear_slot(s);
                }
                tb.unfilled.retain(|u| *u != sid);
                Some((t, s))
            }
        };
        // A backfill inserts into states: raw keys turn eager first, and every key it
        // inserts is eager (lazy.rs).
        self.settle();
        self.core.force_eager = true;
        let filled = self.scan(py, start, end, |me, py, ts, pos, ev| {
            me.lower_into(py, ev, false)?;
            me.core.insert(window, &mut me.tmp, ts, pos, only);
            Ok(true)
        });
        self.core.force_eager = false;
        filled?;
        if let Some((t, _)) = only {
            if self.core.tables[t].hop.is_some() {
                self.core.tables[t].rebuild();
            }
        }
        Ok(())
    }

    /// Outputs that took the previous output's values (a debug counter for tests).
    fn reused_reads(&self) -> u64 {
        self.reused
    }

    /// Values `ingest` set by key rather than by index (a debug counter for tests).
    fn values_set_by_key(&self) -> u64 {
        self.by_key
    }

    /// Dicts `ingest` filled again after the caller let go of them (a debug counter for
    /// tests).
    fn dicts_recycled(&self) -> u64 {
        self.recycled
    }

    /// Events the lazy heads are behind now (`lazy_head_lag`; a debug counter for tests:
    /// reading it does not move them).
    fn heads_behind(&self) -> u32 {
        self.behind
    }

    /// Bucket operations the calendar windows' rolls have done (a debug counter for tests).
    fn roll_work(&self) -> u64 {
        self.core.tables.iter().map(|t| t.rolls).sum()
    }

    /// Calendar keys holding window states apart from their buckets' partials (a debug
    /// counter for tests: a window of one closed bucket is that bucket's partial).
    fn held_windows(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.catch_up(py)?;
        Ok(self.core.tables.iter().map(|t| t.held_windows()).sum())
    }

    /// Calendar buckets keeping their events raw (a debug counter for tests).
    fn raw_buckets(&self) -> usize {
        self.core.tables.iter().map(|t| t.raw_buckets()).sum()
    }

    fn seek(&mut self, py: Python<'_>, cursor: i64, pos: u64) -> PyResult<()> {
        self.catch_up(py)?;
        let ci = self.cursor_index(cursor)?;
        let res = self.res.bind(py).clone();
        self.settle(); // logs are relative to the heads' places
        self.cursors[ci].seek(&res, pos)?;
        self.core.set_floors(&self.cursors);
        Ok(())
    }

    fn cursor_pos(&mut self, py: Python<'_>, cursor: i64) -> PyResult<u64> {
        self.catch_up(py)?;
        Ok(self.cursors[self.cursor_index(cursor)?].pos)
    }

    fn floor(&mut self, py: Python<'_>) -> PyResult<u64> {
        self.catch_up(py)?;
        self.floor_pos(py)
    }

    /// Live group keys over all group nodes (for tests and explain).
    fn key_count(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.catch_up(py)?;
        Ok(self.core.tables.iter().map(|t| t.len()).sum())
    }

    /// States whose power sums overflowed i128 and are held in arbitrary precision (a debug
    /// counter for tests).
    fn big_sums(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.catch_up(py)?;
        Ok(self.core.spaces.iter().map(|s| s.big_sums()).sum())
    }

    /// Per key space, (live key ids, ids ever made): a debug counter for tests (an id is
    /// freed with the last entry holding it, and reused).
    fn key_ids(&mut self, py: Python<'_>) -> PyResult<Vec<(usize, usize)>> {
        self.catch_up(py)?;
        Ok(self.core.spaces.iter().map(|s| (s.ids(), s.made())).collect())
    }

    /// Per key space, the live keys whose fingerprint another live key held when they came
    /// (keyed.rs `KeySpace::clashes`): a debug counter for tests.
    fn key_clashes(&mut self, py: Python<'_>) -> PyResult<Vec<usize>> {
        self.catch_up(py)?;
        Ok(self.core.spaces.iter().map(|s| s.clashes()).collect())
    }

    /// Per key space, (times it grew, ids it has room for, ids whose records are made) of its
    /// record slab: a debug counter for tests (the slab grows without copying its records,
    /// which are made as the ids come, slab.rs).
    fn slab_shape(&mut self, py: Python<'_>) -> PyResult<Vec<(usize, usize, usize)>> {
        self.catch_up(py)?;
        Ok(self.core.spaces.iter().map(|s| s.slab_shape()).collect())
    }

    /// Metric `name`'s value for the group key `key` (one value per group field) at `ts`,
    /// as if an event came at `ts` without being part of any window. Changes nothing.
    fn query(&mut self, py: Python<'_>, name: &str, key: Vec<Bound<'_, PyAny>>, ts: i64) -> PyResult<PyObject> {
        self.catch_up(py)?;
        let (oi, slot, func) = self.outputs.iter().enumerate()
            .find_map(|(i, o)| o.metrics.iter().find(|m| m.0.bind(py).to_str().ok() == Some(name))
                .map(|m| (i, m.1, m.2)))
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_string()))?;
        let mut want = vec![];
        for k in &key {
            want.push(lower(k, &mut self.strings).unwrap_or(Val::Null));
        }
        let (table, window, pred, key_fields) = {
            let o = &self.outputs[oi];
            (o.table, o.window, o.pred, o.key_fields.clone())
        };
        let (table, view) = self.core.groups[table];
        if self.core.lazy[table].is_some() {
            // A raw key's states are made from its log (lazy.rs): the key turns eager.
            let s = self.core.tables[table].space;
            if let Some(id) = self.core.spaces[s].find(&want) {
                if self.core.logs[s].as_ref().is_some_and(|ls| ls.len(id) > 0) {
                    self.core.make_eager(s, id, &self.cursors);
                }
            }
        }
        let t = &self.core.tables[table];
        let space = &self.core.spaces[t.space];
        let (kind, inp) = (t.kinds[slot], t.inputs[slot]);
        if let Some(hop) = t.hop {
            // Every ingested event is in a bucket already: roll a copy to `ts`.
            let st = t.state_at(space, &want, view, slot, hop.bucket(ts));
            return Ok(finalize(py, func, st.as_ref(), ts, &self.strings));
        }
        let mut st = t.find(space, &want).and_then(|id| t.window(space, id, view, slot).cloned())
            .unwrap_or_else(|| State::new(kind));
        let (start_pos, tail, head) = {
            let w = &self.core.windows[window];
            (w.start_pos, w.tail, w.head)
        };
        let next_pos: u64 = self.res.bind(py).getattr("next_pos")?.extract()?;
        // The query sees every ingested event: "before-current" becomes "all".
        let tail_spec = match self.cursors[tail].spec { Spec::Prev => Spec::All, s => s };
        let mut parts = vec![(self.cursors[tail].pos, tail_spec, true)];
        if let Some(h) = head {
            parts.push((self.cursors[h].pos, self.cursors[h].spec, false));
        }
        for (from, spec, add) in parts {
            let (lim, end) = spec.limits(ts, next_pos);
            self.scan(py, from, end, |me, py, t_i, pos, ev| {
                if t_i > lim {
                    return Ok(false);
                }
                if pos < start_pos {
                    return Ok(true);
                }
                me.lower_into(py, ev, false)?;
                if pred.is_some_and(|p| !me.tmp.preds[p]) {
                    return Ok(true);
                }
                if key_fields.iter().map(|&f| me.tmp.vals[f]).ne(want.iter().copied()) {
                    return Ok(true);
                }
                let v = Core::input(inp, &me.tmp);
                if add { st.add(&v, t_i, pos) } else { st.remove(&v, t_i, pos) }
                Ok(true)
            })?;
        }
        Ok(finalize(py, func, Some(&st), ts, &self.strings))
    }

    /// Every table's state as bytes, ordered by gid and canonical key (`digest`: only what
    /// the logical state holds, for hashing).
    #[pyo3(signature = (digest=false))]
    fn dump<'py>(&mut self, py: Python<'py>, digest: bool) -> PyResult<Bound<'py, PyBytes>> {
        self.catch_up(py)?;
        // Raw keys turn eager (lazy.rs): the tables then hold every state, as written before.
        self.settle();
        // The digest hashes calendar windows as of the last event (rolled copies), so it
        // does not depend on which keys happened to be rolled lazily.
        let last: Option<i64> = self.res.bind(py).getattr("last_ts")?.extract()?;
        let mut out = Out::default();
        let mut order: Vec<usize> = (0..self.gids.len()).collect();
        order.sort_by(|a, b| self.gids[*a].cmp(&self.gids[*b]));
        out.u32(order.len() as u32);
        let mut rolled: FxHashMap<usize, GroupTable> = FxHashMap::default();
        for i in order {
            out.bytes(self.gids[i].as_bytes());
            let (ti, v) = self.core.groups[i];
            let t = &self.core.tables[ti];
            let space = &self.core.spaces[t.space];
            match (digest, t.hop, last) {
                (true, Some(hop), Some(l)) => {
                    // One rolled copy per table, written once per view.
                    let r = rolled.entry(ti).or_insert_with(|| t.rolled_to(hop.bucket(l)));
                    r.write(&mut out, &self.strings, space, v, digest)
                }
                _ => t.write(&mut out, &self.strings, space, v, digest),
            }
        }
        Ok(PyBytes::new(py, &out.buf))
    }

    /// The states `dump()` would write now, frozen: a copy of the held keys and their
    /// states (no encoding, no sort), whose `dump()` gives those bytes later, on any thread,
    /// without the GIL, while this core ingests on (a checkpoint's capture, frozen.rs).
    fn freeze(&mut self, py: Python<'_>) -> PyResult<crate::frozen::FrozenStates> {
        self.catch_up(py)?;
        self.settle(); // as `dump`: the tables then hold every state
        let mut order: Vec<usize> = (0..self.gids.len()).collect();
        order.sort_by(|a, b| self.gids[*a].cmp(&self.gids[*b]));
        let groups = order.into_iter()
            .map(|i| (self.gids[i].clone(), self.core.groups[i].0, self.core.groups[i].1))
            .collect();
        let tables = self.core.tables.iter()
            .map(|t| t.frozen(&self.core.spaces[t.space]))
            .collect();
        let spaces = self.core.spaces.iter().map(|s| s.frozen()).collect();
        Ok(crate::frozen::FrozenStates::new(crate::frozen::Frozen {
            groups, tables, spaces, strings: self.strings.texts_only() }))
    }

    /// Rewrite the event positions held in every state: position `p` becomes
    /// `positions[p]`. For a core fed one key partition of a stream: its states then hold
    /// the events' positions in the whole stream, ready to `dump` and merge. The core's own
    /// cursors and reservoir keep the old numbering: only `dump` is meaningful afterwards.
    fn renumber(&mut self, py: Python<'_>, positions: Vec<u64>) -> PyResult<()> {
        self.catch_up(py)?;
        self.settle(); // logged positions are not renumbered: states are
        let spaces = self.core.spaces.iter_mut().map(|s| s.renumber(&positions));
        for r in self.core.tables.iter_mut().map(|t| t.renumber(&positions)).chain(spaces) {
            if let Err(p) = r {
                return Err(self.invariant(py, format!("renumbering position {p} of {}",
                                                      positions.len())));
            }
        }
        Ok(())
    }

    /// Load what `dump` wrote into the tables of the current plan (matched by gid and sid).
    /// `disjoint`: merge into the tables, refusing a key they hold already (states built
    /// over disjoint key partitions; see `renumber`).
    #[pyo3(signature = (data, disjoint=false))]
    fn load(&mut self, py: Python<'_>, data: &[u8], disjoint: bool) -> PyResult<()> {
        self.catch_up(py)?;
        let mut inp = In { buf: data, at: 0 };
        if inp.done() {
            return Ok(());
        }
        let n = inp.u32()?;
        self.settle();
        for t in self.core.tables.iter_mut() {
            t.begin_load();
        }
        for _ in 0..n {
            let gid = String::from_utf8_lossy(inp.bytes()?).to_string();
            let mut scratch = GroupTable::new(0);
            let mut scratch_space = KeySpace::default();
            let (t, space, v) = match self.gids.iter().position(|g| *g == gid) {
                Some(i) => {
                    let (ti, v) = self.core.groups[i];
                    let t = &mut self.core.tables[ti];
                    let s = t.space;
                    (t, &mut self.core.spaces[s], v)
                }
                None => (&mut scratch, &mut scratch_space, 0), // a group no metric uses any more
            };
            t.read(py, &mut inp, &mut self.strings, space, v, disjoint)?;
        }
        // Loaded keys hold states: their heads evict their events (lazy.rs).
        self.core.mark_held_eager();
        Ok(())
    }

    /// Per key space with lazy tables (lazy.rs): (keys with a log, events logged, keys
    /// turned eager because their log was full, eager keys held by a lazy table). A debug
    /// counter for tests.
    fn lazy_counts(&mut self, py: Python<'_>) -> PyResult<Vec<(usize, usize, u64, usize)>> {
        self.catch_up(py)?;
        let mut out = vec![];
        for (s, ls) in self.core.logs.iter().enumerate() {
            let Some(ls) = ls else { continue };
            let logged = ls.logged();
            let events = logged.iter().map(|&id| ls.len(id)).sum();
            let space = &self.core.spaces[s];
            let eager = (0..space.made() as u32)
                .filter(|&id| ls.is_eager(id, space.gen(id))
                        && ls.tables.iter().any(|&t| self.core.tables[t].has(id)))
                .count();
            out.push((logged.len(), events, ls.turned, eager));
        }
        Ok(out)
    }
}
