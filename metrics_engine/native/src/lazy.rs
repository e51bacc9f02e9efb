//! Lazy eviction for many sliding windows over one group-by (W1's P3: 120 `RANGE` windows of
//! different lengths, grouped by card).
//!
//! Eagerly, each window's head evicts every event from its key's record when the event leaves
//! that window: with 120 windows, 120 evictions per event, each on the record of another
//! (random) key, a cache miss each. Here the `RANGE` windows of a key space (`LazyTable`: the
//! plain tables of windows that take the current event and have a head) leave the keys that
//! had few events lately *raw*: such a key keeps its last events (at most `LOG_MAX`) in a short
//! log (`LazySpace`) instead of window states. A window's state of a raw key is folded from
//! the log when it is read (`Fold`), over the logged events the window's head has not passed,
//! so the heads pass a raw key's events without touching it. The tail logs an event once for
//! all the windows, and a read folds once for all the windows that leave the same events out.
//!
//! A key whose log would overflow turns *eager*: each window takes the logged events its head
//! has not passed as states (`Core::make_eager` in plan.rs), and from then on the key's events
//! go into and out of its states as before, its heads evicting them, until every window has let
//! them go and its id is freed. So a key logs at most `LOG_MAX` events and memory does not grow
//! with window length. Logged events every head has passed (below the space's `floor`) leave
//! the log when the key is touched, or when a slow sweep over the ids reaches it (`sweep_next`),
//! which frees the ids of keys that stopped coming.
//!
//! A read tells the logged events a window let go of from their times (`LazyTable::first_in`:
//! the reservoir's times never go back), not from its head's place, so the heads all of whose
//! windows are lazy need not move at every event: they move in runs of up to
//! `StreamCore.lazy_head_lag` events (plan.rs `catch_up`), at once when an eager key's states
//! are read, and before any call that reads states, cursors or the reservoir's floor.
//!
//! A state folded from the log is the eager state: a window's state depends only on the events
//! in it, not on the order its adds and removes came in (aggregations.rs: sums are exact, the
//! min/max deque holds the window's suffix extremes, the others count). Snapshots, digests,
//! queries, plan changes and backfills see eager keys only: the core turns every raw key eager
//! first (`settle`), so their formats and meaning do not change.

use crate::aggregations::{Kind, State};
use crate::keyed::Input;
use crate::value::Val;

/// Events a raw key logs; one more and it turns eager. Four (ts, pos) pairs are a cache line.
pub const LOG_MAX: usize = 4;
/// Lazy tables a key space needs before its keys are evicted lazily (settable per core:
/// `StreamCore.lazy_min_tables`): with a few windows an event's evictions cost about what its
/// log and folds cost, and the eager path keeps no log.
pub const LAZY_MIN_TABLES: usize = 4;
/// Lazy tables a key space needs when one of them keeps states that allocate for a new key
/// (`Kind::allocates`: W2's distinct sets, OLDEST queues, power sums): an eager new key makes
/// them at its first event (with their first pages), a raw key logs the event and its reads
/// fold into reused states, so one such table is enough (settable per core:
/// `StreamCore.lazy_min_allocating`).
pub const LAZY_MIN_ALLOCATING: usize = 1;
/// Ids per page of the logs' events (`LazySpace::at`, `vals`): a page is 4 KiB of times and
/// 8 KiB of values per column, allocated once and never moved.
const PAGE_IDS: usize = 64;
/// Ids with a log the sweep visits per event, and ids it looks at to find them.
const SWEEP_IDS: usize = 2;
const SWEEP_SCAN: usize = 16;

/// A plain table evicted lazily: of a window that takes the current event (the shared `all`
/// tail) and has a head of a time bound.
#[derive(Clone, Debug)]
pub struct LazyTable {
    pub space: usize,
    /// Its window's head (a cursor index), the head's reach (`Spec::Le(reach)`: it passes
    /// the events at least this old) and the window's first position.
    pub head: usize,
    pub reach: i64,
    pub start_pos: u64,
    /// Its window's filter: the row's predicate, and the log column holding it.
    pub pred: Option<usize>,
    pub pcol: Option<usize>,
    /// Per slot, its kind and the log column holding its input.
    pub kinds: Vec<Kind>,
    pub cols: Vec<usize>,
    /// Tables with the same filter, slots and inputs fold alike: one `Fold` per family.
    pub fam: usize,
}

impl LazyTable {
    /// The first position its window holds (its head's, or its start if later).
    #[inline]
    pub fn lo(&self, head_pos: u64) -> u64 {
        head_pos.max(self.start_pos)
    }

    /// How many of the logged events `times` (oldest first) the window has let go of at time
    /// `t`: those before `lo` (its head's place, or its start) or at most `t - reach` old.
    /// The reservoir's times never go back, so the head passes exactly those once it has
    /// moved to `t`; a head that has not moved yet (plan.rs `lazy_head_lag`) is behind, and
    /// the times tell what it would have passed.
    #[inline]
    pub fn first_in(&self, times: &[(i64, u64)], head_pos: u64, t: i64) -> usize {
        self.probe().first_in(times, head_pos, t)
    }

    /// What `first_in` reads of it, small enough to keep beside an output (plan.rs
    /// `Output::probe`): W1's 120 outputs each asked their table, a cache line apart.
    pub fn probe(&self) -> Probe {
        Probe { space: self.space, head: self.head, reach: self.reach, start_pos: self.start_pos }
    }
}

/// A lazy table's key space, head, reach and start (`LazyTable::probe`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Probe {
    pub space: usize,
    pub head: usize,
    pub reach: i64,
    pub start_pos: u64,
}

impl Probe {
    /// `LazyTable::first_in`.
    #[inline]
    pub fn first_in(&self, times: &[(i64, u64)], head_pos: u64, t: i64) -> usize {
        let (lo, cut) = (head_pos.max(self.start_pos), t.saturating_sub(self.reach));
        times.partition_point(|a| a.1 < lo || a.0 <= cut)
    }
}

/// The logs of one key space's raw keys, and which keys are eager. By key id: `len` events,
/// each its (ts, pos) in `at` and its value of every column (`inputs`: an input of a slot, or
/// a filter as a bool) in `vals`. `at` and `vals` (64 bytes an id, and `LOG_MAX` values of
/// 32 bytes per column, against 9 bytes in the by-id vectors) are kept in pages of
/// `PAGE_IDS` ids, added as ids come and never moved: grown as vectors, each doubling copied
/// every log so far and filled the new half (W2's quick run, where nearly every event brings
/// a new key: ~5 % of its CPU, NOISY). A log holds one reference on its key's id while it is not
/// empty (the caller takes and gives it back: `KeySpace::acquire`/`release`).
#[derive(Default)]
pub struct LazySpace {
    /// Its lazy tables (table indexes).
    pub tables: Vec<usize>,
    pub inputs: Vec<Input>,
    len: Vec<u8>,
    /// By page (id / `PAGE_IDS`): `PAGE_IDS * LOG_MAX` (ts, pos), id by id; and as many
    /// rows of `inputs.len()` values.
    at: Vec<Box<[(i64, u64)]>>,
    vals: Vec<Box<[Val]>>,
    /// By id: its generation + 1 while the key is eager (a freed id's mark is void).
    eager: Vec<u64>,
    /// Bit `id`: the id may be eager (set with its mark, cleared when it logs an event): a
    /// head passing a row asks it first, from a few cache lines, not a line per id.
    maybe: Vec<u64>,
    /// Logged events below this position were passed by every head of the space's tables.
    pub floor: u64,
    sweep: usize,
    /// Moves on with every change to a log (a fold remembers it).
    pub tick: u64,
    /// Keys turned eager because their log was full (a debug counter for tests).
    pub turned: u64,
}

impl LazySpace {
    pub fn new(tables: Vec<usize>, inputs: Vec<Input>) -> LazySpace {
        LazySpace { tables, inputs, ..Default::default() }
    }

    /// Room for id `id`: the by-id vectors grow like vectors (amortised; 9 bytes an id), the
    /// pages of logged events up to id's, never moving the ones before.
    fn room(&mut self, id: u32) {
        let i = id as usize;
        if self.len.len() <= i {
            let n = (i + 1).max(self.len.len() * 2).max(64);
            self.len.resize(n, 0);
            self.eager.resize(n, 0);
            self.maybe.resize(n.div_ceil(64), 0);
        }
        let w = self.inputs.len();
        while self.at.len() <= i / PAGE_IDS {
            self.at.push(vec![(0, 0); PAGE_IDS * LOG_MAX].into_boxed_slice());
            self.vals.push(vec![Val::Null; PAGE_IDS * LOG_MAX * w].into_boxed_slice());
        }
    }

    /// Key `id`'s page and the place of its first logged event in it.
    #[inline]
    fn place(id: u32) -> (usize, usize) {
        let i = id as usize;
        (i / PAGE_IDS, i % PAGE_IDS * LOG_MAX)
    }

    /// How many events key `id` has logged.
    #[inline]
    pub fn len(&self, id: u32) -> usize {
        self.len.get(id as usize).map_or(0, |&n| n as usize)
    }

    /// Whether key `id` of generation `gen` is eager.
    #[inline]
    pub fn is_eager(&self, id: u32, gen: u32) -> bool {
        self.eager.get(id as usize) == Some(&(gen as u64 + 1))
    }

    pub fn set_eager(&mut self, id: u32, gen: u32) {
        self.room(id);
        self.eager[id as usize] = gen as u64 + 1;
        self.maybe[id as usize / 64] |= 1 << (id % 64);
    }

    /// Whether key `id` may be eager (`is_eager` tells; false: it is not).
    #[inline]
    pub fn maybe_eager(&self, id: u32) -> bool {
        self.maybe.get(id as usize / 64).is_some_and(|w| w >> (id % 64) & 1 == 1)
    }

    /// (ts, pos) of key `id`'s logged events, oldest first.
    #[inline]
    pub fn times(&self, id: u32) -> &[(i64, u64)] {
        let n = self.len(id);
        if n == 0 {
            return &[];
        }
        let (p, i) = LazySpace::place(id);
        &self.at[p][i..i + n]
    }

    /// Column `col` of key `id`'s logged event `j`.
    #[inline]
    pub fn val(&self, id: u32, j: usize, col: usize) -> Val {
        let (p, i) = LazySpace::place(id);
        self.vals[p][(i + j) * self.inputs.len() + col]
    }

    /// Drop key `id`'s logged events every head has passed (below `floor`). Returns whether
    /// the log had events and has none left (its hold on the id is then the caller's to give
    /// back, or to keep for an event it logs at once).
    pub fn drop_passed(&mut self, id: u32) -> bool {
        let n = self.len(id);
        if n == 0 {
            return false;
        }
        let (p, base) = LazySpace::place(id);
        let floor = self.floor;
        let k = self.at[p][base..base + n].iter().take_while(|a| a.1 < floor).count();
        if k == 0 {
            return false;
        }
        let w = self.inputs.len();
        self.at[p].copy_within(base + k..base + n, base);
        self.vals[p].copy_within((base + k) * w..(base + n) * w, base * w);
        self.len[id as usize] = (n - k) as u8;
        self.tick += 1;
        n == k
    }

    /// Ask the CPU for key `id`'s logged times (what `drop_passed` reads first); a hint only.
    #[inline]
    pub fn prefetch_log(&self, id: u32) {
        let (p, base) = LazySpace::place(id);
        if let Some(page) = self.at.get(p) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint: it never faults and changes no memory; `base` is
            // inside the page (`place`).
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    page.as_ptr().add(base).cast::<i8>());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (page, base);
        }
    }

    /// Log an event of key `id` at (`ts`, `pos`), its value of each column by `value`. The
    /// caller checked there is room (`len(id) < LOG_MAX`).
    pub fn push(&mut self, id: u32, ts: i64, pos: u64, value: impl Fn(Input) -> Val) {
        self.room(id);
        let n = self.len(id);
        debug_assert!(n < LOG_MAX);
        let (p, base) = LazySpace::place(id);
        let at = base + n;
        self.at[p][at] = (ts, pos);
        let w = self.inputs.len();
        let row = &mut self.vals[p][at * w..(at + 1) * w];
        for (v, &inp) in row.iter_mut().zip(&self.inputs) {
            *v = value(inp);
        }
        self.len[id as usize] = n as u8 + 1;
        self.maybe[id as usize / 64] &= !(1 << (id % 64)); // a key that logs is raw
        self.tick += 1;
    }

    /// Empty key `id`'s log.
    pub fn clear(&mut self, id: u32) {
        if self.len(id) > 0 {
            self.len[id as usize] = 0;
            self.tick += 1;
        }
    }

    /// Ids with a log.
    pub fn logged(&self) -> Vec<u32> {
        (0..self.len.len()).filter(|&i| self.len[i] > 0).map(|i| i as u32).collect()
    }

    /// The next ids with a log the sweep reaches, into `out`: at most `SWEEP_IDS`, among the
    /// next `SWEEP_SCAN` ids (O(1) per event; a pass over the ids takes ids / 16 events).
    pub fn sweep_next(&mut self, out: &mut Vec<u32>) {
        out.clear();
        let n = self.len.len();
        for _ in 0..SWEEP_SCAN.min(n) {
            self.sweep = if self.sweep + 1 >= n { 0 } else { self.sweep + 1 };
            if self.len[self.sweep] > 0 {
                out.push(self.sweep as u32);
                if out.len() == SWEEP_IDS {
                    break;
                }
            }
        }
    }
}

/// A raw key's window states for a read, folded from its log: the states of one family's
/// slots over the logged events from `first` on that the filter keeps. Kept for the reads
/// that follow while the logs (`tick`), the key and `first` stay the same: W1's 120 windows
/// of a key that logged only the current event read one fold.
#[derive(Default)]
pub struct Fold {
    key: Option<(usize, u64, u32, usize)>, // (space, tick, id, first)
    pub states: Vec<Option<State>>,
    /// Folds made so far: tells two reads of the same buffer apart (plan.rs `states_id`).
    pub made: u64,
}

impl Fold {
    pub fn fold(&mut self, ls: &LazySpace, lt: &LazyTable, id: u32, first: usize) {
        let key = (lt.space, ls.tick, id, first);
        if self.key == Some(key) && self.states.len() == lt.kinds.len() {
            return;
        }
        self.key = Some(key);
        self.made += 1;
        if self.states.len() != lt.kinds.len() {
            self.states = lt.kinds.iter().map(|_| None).collect();
        }
        for st in self.states.iter_mut().flatten() {
            st.clear(); // an empty state reads as no state (aggregations.rs `lower`)
        }
        let times = ls.times(id);
        for (j, &(ts, pos)) in times.iter().enumerate().skip(first) {
            if let Some(c) = lt.pcol {
                if !matches!(ls.val(id, j, c), Val::Bool(true)) {
                    continue;
                }
            }
            for (i, st) in self.states.iter_mut().enumerate() {
                st.get_or_insert_with(|| State::new(lt.kinds[i])).add(&ls.val(id, j, lt.cols[i]), ts, pos);
            }
        }
    }
}
