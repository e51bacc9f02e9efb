//! Keyed state. A stream's group keys are interned once per group-by field list (`KeySpace`)
//! to dense ids shared by every group node grouping by those fields, so an event is hashed
//! once per group-by, not once per window, and a lowered row that carries its key's id (see
//! plan.rs) is evicted without a lookup. The sliding windows' states of a group-by lie in one
//! record per key id (the space's slab: every plain table's slots at its own column), so an
//! event updates all its windows (W1's P3: 120) in one contiguous stretch of memory; a
//! calendar table (`GroupTable`: one window, filter and group-by) keeps an entry per id. An entry holds one state
//! per state slot; an entry whose states are all empty after an eviction is freed, and a key
//! id is freed once no table holds an entry for it, so state does not grow with keys that
//! left every window. Keys are stored canonical (see value.rs), and snapshots and digests
//! order entries by the canonical key's bytes, never by id.
//!
//! A calendar (tumbling/hopping) window's table is `hop`: each entry also holds a ring of
//! per-bucket partial states. An event goes into its bucket's partial; the window state
//! takes a bucket in when the bucket closes and gives it back when it leaves, lazily, when
//! the key is touched or read (`roll`), so a boundary costs nothing for keys nobody touches.
//! Each insert also rolls one other entry (a slow sweep), so keys that stop coming are freed.
//! Calendar windows of one group-by, filter and bucket width (W2's 7, 28, 182 and 392 days
//! by 1 day) are views of one table (`View`): the ring is kept once, for the largest, and
//! each view keeps only its window over it (`Win`: the closed buckets inside, its running
//! states), so an event joins one bucket, not four, and a day that closes is added to each
//! window and the day leaving it taken back: O(1) per window per boundary. A view whose
//! window holds the same buckets as a smaller view's (a key with no bucket older than 28
//! days, for W2's 182 and 392) keeps no states and reads that view's, so the closing day is
//! folded once for all of them; it folds its own when they part (`roll`).
//!
//! A window of one closed bucket is that bucket's partial: the entry holds window states of
//! its own only while two or more closed buckets are in the window (most keys of a large
//! table never get there), and drops them when it is back to one. Slot vectors of buckets
//! and windows that leave are kept (`Spare`) for the next bucket that opens, so the ring
//! path allocates nothing per event in steady state.
//!
//! A bucket of a few events keeps them raw (`Bucket::raw`) and makes its partials only when a
//! window reads or folds it: most keys of W2's scenario 2 see one event a day, and a raw event
//! costs a few values where partials cost a slot vector, power sums, a set and a queue (on
//! `month`, a day's buckets were most of the engine's memory, and its page faults).

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::aggregations::{Kind, State};
use crate::slab::Slab;
use crate::value::{In, Interner, Out, Val};

/// What a state slot takes from an event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Input {
    One,
    Field(usize),
    Pred(usize),
}

/// A group key as the index holds it: up to `KEY_INLINE` values inline, so a lookup compares
/// against the table's own bucket instead of chasing a heap pointer per key.
/// Longer keys live in `rest`. Hash and equality are those of the value slice, so the index
/// is queried with a plain `&[Val]`.
#[derive(Clone)]
struct Key {
    len: u32,
    inline: [Val; KEY_INLINE],
    rest: Vec<Val>,
}

const KEY_INLINE: usize = 2;

impl Key {
    fn fill(&mut self, key: &[Val]) {
        self.len = key.len() as u32;
        self.rest.clear();
        if key.len() <= KEY_INLINE {
            for (slot, v) in self.inline.iter_mut().zip(key) {
                *slot = v.canonical();
            }
        } else {
            self.rest.extend(key.iter().map(|v| v.canonical()));
        }
    }

    fn as_slice(&self) -> &[Val] {
        let n = self.len as usize;
        if n <= KEY_INLINE { &self.inline[..n] } else { &self.rest }
    }
}

impl Default for Key {
    fn default() -> Key {
        Key { len: 0, inline: [Val::Null; KEY_INLINE], rest: vec![] }
    }
}

impl PartialEq for Key {
    fn eq(&self, o: &Key) -> bool {
        self.as_slice() == o.as_slice()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}

impl std::borrow::Borrow<[Val]> for Key {
    fn borrow(&self) -> &[Val] {
        self.as_slice()
    }
}

/// The group keys of one group-by field list, interned to dense ids. An id stays taken while
/// a table holds an entry for it (`refs`); freed, its generation moves on, so an id kept in a
/// lowered row is known stale (`valid`) once its key has gone, even if the id was reused.
#[derive(Default)]
pub struct KeySpace {
    /// A live key's fingerprint (`fingerprint`) to its id: 16 bytes an entry, where an entry
    /// holding the key itself was 112, so the table's lines stay in cache and the lookups and
    /// removals of keys touched minutes ago (W1's, each event) miss less. A hit is checked
    /// against the id's key; a key whose fingerprint another live key holds goes to
    /// `clashes`, so no answer rests on the hash.
    index: FxHashMap<u64, u32>,
    clashes: FxHashMap<Key, u32>,
    /// Fingerprint bits kept (64, but fewer in tests, to make clashes common).
    fp_mask: u64,
    /// By id, canonical; a `Key` keeps keys of up to `KEY_INLINE` values inline, so a new
    /// key of W2's (card; card and one more field) allocates nothing.
    keys: Vec<Key>,
    refs: Vec<u32>,
    gens: Vec<u32>,
    /// By id, its key's fingerprint as indexed: freeing the id removes it from `index`
    /// without hashing the key again (W1 frees about one key per event and space).
    fps: Vec<u64>,
    free: Vec<u32>,
    /// The sliding (plain) tables' states of this group-by, one record per key id: `stride`
    /// states, each attached table's slots at its column (`GroupTable::col`), so an event
    /// updates every window of its key in one contiguous stretch of memory instead of one
    /// cold place per window. A freed id's states stay there, emptied, for the next key.
    /// The slab grows without copying its records (slab.rs).
    slab: Slab,
}

impl KeySpace {
    /// An empty space whose fingerprints keep `bits` bits (64; tests take fewer).
    pub fn with_fingerprint_bits(bits: u32) -> KeySpace {
        let fp_mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        KeySpace { fp_mask, ..Default::default() }
    }

    /// A key's 64-bit hash (of its canonical values, as the index hashes them).
    pub fn fingerprint(&self, key: &[Val]) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        key.hash(&mut h);
        // A space made by `default` (a scratch one) keeps every bit.
        let mask = if self.fp_mask == 0 { u64::MAX } else { self.fp_mask };
        h.finish() & mask
    }

    pub fn find(&self, key: &[Val]) -> Option<u32> {
        self.find_at(self.fingerprint(key), key)
    }

    /// `find` of a key whose `fingerprint` is `fp`.
    pub fn find_at(&self, fp: u64, key: &[Val]) -> Option<u32> {
        if let Some(&id) = self.index.get(&fp) {
            if self.keys[id as usize].as_slice() == key {
                return Some(id);
            }
        }
        if self.clashes.is_empty() {
            return None;
        }
        self.clashes.get(key).copied()
    }

    /// `key`'s id, a new one if it has none. A new id holds no reference: the caller makes a
    /// table entry for it at once (`GroupTable::insert_at`), or the id is never freed.
    pub fn intern(&mut self, key: &[Val]) -> u32 {
        self.intern_at(self.fingerprint(key), key)
    }

    /// `intern` of a key whose `fingerprint` is `fp` (a batch hashed it a few rows ahead:
    /// plan.rs `find_ahead`). A new key costs one probe of the index, not a lookup and then
    /// an insert.
    pub fn intern_at(&mut self, fp: u64, key: &[Val]) -> u32 {
        use std::collections::hash_map::Entry;
        debug_assert_eq!(fp, self.fingerprint(key));
        let vacant = match self.index.entry(fp) {
            Entry::Occupied(e) => {
                let id = *e.get();
                if self.keys[id as usize].as_slice() == key {
                    return id;
                }
                None // another key's fingerprint: `key` is among the clashes, or new
            }
            Entry::Vacant(v) => Some(v),
        };
        // A clash outlives the key whose fingerprint it clashed with: look even if vacant.
        if !self.clashes.is_empty() {
            if let Some(&id) = self.clashes.get(key) {
                return id;
            }
        }
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.keys.push(Key::default());
                self.refs.push(0);
                self.gens.push(0);
                self.fps.push(0);
                (self.keys.len() - 1) as u32
            }
        };
        let k = &mut self.keys[id as usize];
        k.fill(key); // a freed id's key, reused: no allocation per new key in steady state
        self.fps[id as usize] = fp;
        match vacant {
            Some(v) => {
                v.insert(id);
            }
            None => {
                self.clashes.insert(k.clone(), id);
            }
        }
        id
    }

    /// Ask the CPU for the key slot of the id the `k`-th next new key will most likely
    /// take (0: the next one): freed ids first, last freed first, then new ones at the end
    /// (`intern_at`), as long as no key is freed meanwhile. A hint, for `find_ahead`.
    pub fn prefetch_new(&self, k: usize) {
        let id = match self.free.len().checked_sub(k + 1) {
            Some(i) => self.free[i] as usize,
            None => self.keys.len() + (k - self.free.len()),
        };
        if id < self.keys.capacity() {
            let p = self.keys.as_ptr().wrapping_add(id);
            prefetch_lines(p.cast(), std::mem::size_of::<Key>());
        }
    }

    pub fn gen(&self, id: u32) -> u32 {
        self.gens[id as usize]
    }

    /// Whether `id` still holds the key it held when its generation was `gen`.
    pub fn valid(&self, id: u32, gen: u32) -> bool {
        self.gens.get(id as usize) == Some(&gen)
    }

    /// The canonical key of a live id.
    pub fn key(&self, id: u32) -> &[Val] {
        self.keys[id as usize].as_slice()
    }

    /// Take a reference on `id` (a table entry, or a lazy key's log: lazy.rs).
    pub fn acquire(&mut self, id: u32) {
        self.refs[id as usize] += 1;
    }

    /// Give a reference on `id` back; the last frees the id (its generation moves on).
    pub fn release(&mut self, id: u32) {
        let r = &mut self.refs[id as usize];
        *r -= 1;
        if *r == 0 {
            // One probe of the index, at the fingerprint kept when the key was interned.
            use std::collections::hash_map::Entry;
            match self.index.entry(self.fps[id as usize]) {
                Entry::Occupied(e) if *e.get() == id => {
                    e.remove();
                }
                _ => {
                    self.clashes.remove(self.keys[id as usize].as_slice());
                }
            }
            self.gens[id as usize] = self.gens[id as usize].wrapping_add(1);
            self.free.push(id);
        }
    }

    /// A copy holding only the keys by id (what a snapshot's `GroupTable::write` reads):
    /// a frozen view's space (frozen.rs).
    pub fn frozen(&self) -> KeySpace {
        KeySpace { keys: self.keys.clone(), fp_mask: self.fp_mask, ..Default::default() }
    }

    /// Live keys kept apart from the fingerprint index (a debug counter for tests).
    pub fn clashes(&self) -> usize {
        self.clashes.len()
    }

    /// Live ids (a debug counter for tests).
    pub fn ids(&self) -> usize {
        self.keys.len() - self.free.len()
    }

    /// Ids ever made (the slabs' length).
    pub fn made(&self) -> usize {
        self.keys.len()
    }

    /// (times it grew, ids it has room for, ids whose records are made) of the record slab
    /// (a debug counter for tests).
    pub fn slab_shape(&self) -> (usize, usize, usize) {
        (self.slab.grows(), self.slab.capacity(), self.slab.ready())
    }

    /// No huge pages for the record slab: most ids of a lazy space make no record (lazy.rs).
    pub fn sparse_slab(&mut self) {
        self.slab.set_sparse();
    }

    /// Empty the record slab and give it `stride` states per id (the plain tables are
    /// detached: `GroupTable::detach`, then `attach` each at its column).
    pub fn reset_slab(&mut self, stride: usize) {
        self.slab = Slab::new(stride);
    }

    /// Rewrite the event positions of every state in the slab (see `State::renumber`).
    pub fn renumber(&mut self, map: &[u64]) -> Result<(), u64> {
        for s in self.slab.iter_mut() {
            s.renumber(map)?;
        }
        Ok(())
    }

    /// States whose power sums overflowed i128 and live in arbitrary precision now (a debug
    /// counter for tests).
    pub fn big_sums(&self) -> usize {
        self.slab.iter().filter(|s| s.is_big()).count()
    }
}

/// A calendar bucket of one key. While it holds at most `RAW_MAX` events and has no partials
/// (`parts` empty), it keeps its events as they came in `raw`: `stride` values each (ts and
/// pos in one int, then the value of each distinct input of the table's slots, see
/// `Spare::cols`). Most keys
/// of W2's scenario 2 see one event a day, and a raw event costs 5 values where the partials
/// cost a vector of slots, power sums, a set and a queue. The partials are made from `raw`
/// when needed (a window reads or folds it, a sixth event, a snapshot), by the same
/// `add_partial` calls in the same order, so they are the same states.
#[derive(Clone)]
pub struct Bucket {
    pub idx: i64,
    raw: Vec<Val>,
    pub parts: Vec<Option<State>>,
}

/// Events a bucket keeps raw before it makes its partials.
const RAW_MAX: usize = 4;

impl Bucket {
    fn is_raw(&self) -> bool {
        self.parts.is_empty() && !self.raw.is_empty()
    }
}

/// A raw event's ts and pos, packed in one value (ts in the high 64 bits).
fn raw_ts_pos(ts: i64, pos: u64) -> Val {
    Val::Int(((ts as i128) << 64) | pos as i128)
}

fn raw_unpack(v: &Val) -> (i64, u64) {
    match v {
        Val::Int(i) => ((*i >> 64) as i64, *i as u64),
        _ => unreachable!("a raw event starts with its ts and pos"),
    }
}

/// Add a raw bucket's events to `parts` (one state per slot) as `insert_bucket` adds an event.
fn add_raw(parts: &mut [Option<State>], kinds: &[Kind], cols: &[usize], stride: usize,
           raw: &[Val]) {
    for ev in raw.chunks_exact(stride) {
        let (ts, pos) = raw_unpack(&ev[0]);
        for (i, part) in parts.iter_mut().enumerate() {
            part.get_or_insert_with(|| State::new(kinds[i])).add_partial(&ev[1 + cols[i]], ts, pos);
        }
    }
}

/// Give a raw bucket its partials (its raw events go).
fn make_parts(bk: &mut Bucket, kinds: &[Kind], spare: &mut Spare) {
    if !bk.is_raw() {
        return;
    }
    let mut parts = spare.take(kinds.len());
    add_raw(&mut parts, kinds, &spare.cols, spare.stride, &bk.raw);
    bk.parts = parts;
    spare.give_raw(std::mem::take(&mut bk.raw));
}

/// One calendar window of a table's views over the entry's shared ring: `ring[lo..hi]` are
/// the closed buckets inside it. Its own states are the fold of their partials while two or
/// more are in it, none otherwise (a window of one closed bucket reads that bucket's partial).
#[derive(Clone, Default)]
pub struct Win {
    pub states: Vec<Option<State>>,
    lo: usize,
    hi: usize,
}

impl Win {
    fn n(&self) -> usize {
        self.hi - self.lo
    }
}

#[derive(Clone)]
pub struct Entry {
    /// Calendar tables: buckets still inside the largest view, oldest first (shared by
    /// every view: an event joins one bucket, not one per window).
    pub ring: std::collections::VecDeque<Bucket>,
    /// One window per view of the table (`GroupTable::views`), same order.
    pub wins: Vec<Win>,
    /// The bucket the entry was last rolled to (`i64::MIN`: not known, roll it anyway).
    at: i64,
}

impl Entry {
    /// Slot `slot`'s state of view `v`'s window: a window of one closed bucket is its partial.
    pub fn window(&self, v: usize, slot: usize) -> Option<&State> {
        self.window_states(v).and_then(|s| s.get(slot)).and_then(|s| s.as_ref())
    }

    /// Every slot's state of view `v`'s window (see `window`; a slot past the slice has none).
    pub fn window_states(&self, v: usize) -> Option<&[Option<State>]> {
        let w = &self.wins[v];
        if !w.states.is_empty() {
            return Some(w.states.as_slice());
        }
        if w.n() >= 2 {
            return Some(self.view_states(v));
        }
        if w.n() == 1 {
            // A raw bucket is given its partials before a read (`GroupTable::readable`).
            return Some(self.ring[w.lo].parts.as_slice());
        }
        None
    }

    /// The window states of view `v` when it has two or more closed buckets: its own, or
    /// those of the view over the same buckets it shares (see `roll`); empty otherwise.
    fn view_states(&self, v: usize) -> &[Option<State>] {
        let w = &self.wins[v];
        if !w.states.is_empty() || w.n() < 2 {
            return &w.states;
        }
        self.wins.iter().find(|o| o.lo == w.lo && o.hi == w.hi && !o.states.is_empty())
            .map_or(&[], |o| &o.states)
    }

    /// Give every window that shares another's states states of its own (before its
    /// views are renumbered or one of them is set from a snapshot).
    fn unshare(&mut self, kinds: &[Kind], spare: &mut Spare) {
        for v in 0..self.wins.len() {
            if self.wins[v].states.is_empty() && self.wins[v].n() >= 2 {
                refold(&mut self.wins[v], &self.ring, kinds, spare);
            }
        }
    }

    /// The ring index of view `v`'s one closed bucket when that bucket is raw.
    fn one_raw(&self, v: usize) -> Option<usize> {
        let w = &self.wins[v];
        (w.states.is_empty() && w.n() == 1 && self.ring[w.lo].is_raw()).then_some(w.lo)
    }

    /// Views whose window holds states apart from its buckets' partials.
    pub fn held(&self) -> usize {
        if self.ring.is_empty() { 0 } else { self.wins.iter().filter(|w| !w.states.is_empty()).count() }
    }

    /// Whether view `v` has nothing: no bucket from its window's start on, no states.
    fn view_dead(&self, v: usize) -> bool {
        let w = &self.wins[v];
        self.ring.len() <= w.lo && w.states.iter().all(|s| s.as_ref().is_none_or(|s| s.empty()))
    }
}

/// One calendar window of a table: the table keeps the buckets once (its `hop.m` is the
/// largest view's), each view its own window over them. Windows of one group-by, filter and
/// bucket width (W2's 7, 28, 182 and 392 days) are views of one table; each keeps its gid
/// (snapshots, digests and backfills name it) and its own slots, a subset of the table's.
#[derive(Clone, Debug)]
pub struct View {
    pub gid: String,
    pub m: i64,
    pub sids: Vec<String>,
    /// The table slot of each of the view's slots.
    pub slots: Vec<usize>,
    /// The plan window the view belongs to.
    pub window: usize,
}

/// A calendar window's buckets: `every` wide from `align`; the window is the `m` buckets
/// before the current one (`b - size <= ts < b`, `size = m * every`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hop {
    pub every: i64,
    pub align: i64,
    pub m: i64,
}

impl Hop {
    pub fn bucket(&self, ts: i64) -> i64 {
        (ts - self.align).div_euclid(self.every)
    }
}

/// Slot vectors (a bucket's partials, a window's states) of one table, given back when their
/// bucket leaves or their entry is freed and taken by the next bucket or window that needs
/// one: their states stay allocated, emptied, so a new bucket reuses them as they are.
/// Every vector is as wide as the table's slots, with their kinds (`set_slots` drops them).
/// It also holds what raw buckets need: the column of each slot's input (`cols`), the values
/// an event takes (`stride`: ts and pos packed, and one per distinct input, `inputs`), spare raw vectors
/// and a scratch of partials made from a raw bucket to fold it into a window.
#[derive(Clone, Default)]
pub struct Spare {
    vecs: Vec<Vec<Option<State>>>,
    raws: Vec<Vec<Val>>,
    pub cols: Vec<usize>,
    pub inputs: Vec<Input>,
    pub stride: usize,
    scratch: Vec<Option<State>>,
}

impl Spare {
    fn take(&mut self, width: usize) -> Vec<Option<State>> {
        self.vecs.pop().unwrap_or_else(|| {
            let mut v = Vec::with_capacity(width);
            v.resize_with(width, || None);
            v
        })
    }

    fn give(&mut self, mut v: Vec<Option<State>>) {
        if v.is_empty() || self.vecs.len() >= SPARE_MAX {
            return;
        }
        for s in v.iter_mut().flatten() {
            s.clear();
        }
        self.vecs.push(v);
    }

    fn clear(&mut self) {
        self.vecs.clear();
        self.raws.clear();
        self.scratch.clear();
    }

    /// Take the slots' inputs (their distinct ones become a raw event's columns).
    fn set_layout(&mut self, inputs: &[Input]) {
        self.inputs.clear();
        self.cols = inputs.iter().map(|inp| match self.inputs.iter().position(|x| x == inp) {
            Some(c) => c,
            None => {
                self.inputs.push(*inp);
                self.inputs.len() - 1
            }
        }).collect();
        self.stride = 1 + self.inputs.len();
    }

    /// The same layout, holding no vectors (for a copy rolled apart).
    fn layout(&self) -> Spare {
        Spare { cols: self.cols.clone(), inputs: self.inputs.clone(), stride: self.stride,
                ..Spare::default() }
    }

    fn take_raw(&mut self) -> Vec<Val> {
        self.raws.pop().unwrap_or_else(|| Vec::with_capacity(self.stride))
    }

    fn give_raw(&mut self, mut v: Vec<Val>) {
        if v.capacity() == 0 || self.raws.len() >= SPARE_MAX {
            return;
        }
        v.clear();
        if v.capacity() > self.stride * RAW_MAX {
            v.shrink_to(self.stride);
        }
        self.raws.push(v);
    }

    /// The partials of raw bucket `raw`, made in the scratch.
    fn scratch_of(&mut self, kinds: &[Kind], raw: &[Val]) -> &[Option<State>] {
        if self.scratch.len() != kinds.len() {
            self.scratch = kinds.iter().map(|k| Some(State::new(*k))).collect();
        }
        for s in self.scratch.iter_mut().flatten() {
            s.clear();
        }
        add_raw(&mut self.scratch, kinds, &self.cols, self.stride, raw);
        &self.scratch
    }
}

/// Bucket `bk`'s partials enter (`sign` 1) or leave (-1) the window states `states`.
fn absorb_into(states: &mut [Option<State>], kinds: &[Kind], bk: &Bucket, sign: i64,
               spare: &mut Spare) {
    if bk.is_raw() && bk.raw.len() == spare.stride {
        // One raw event: its partial folded in is the event added as one at position
        // `bucket` (what `State::absorb` does with a bucket's best, first or last value), at
        // its ts (COUNT's last time), so no partial is made.
        let (ts, _) = raw_unpack(&bk.raw[0]);
        let pos = bk.idx as u64;
        for (i, st) in states.iter_mut().enumerate() {
            let v = &bk.raw[1 + spare.cols[i]];
            if sign > 0 {
                st.get_or_insert_with(|| State::new(kinds[i])).add(v, ts, pos);
            } else if let Some(st) = st.as_mut() {
                st.remove(v, ts, pos);
            }
        }
        return;
    }
    let parts: &[Option<State>] =
        if bk.is_raw() { spare.scratch_of(kinds, &bk.raw) } else { &bk.parts };
    for (i, p) in parts.iter().enumerate() {
        let Some(p) = p else { continue };
        if sign > 0 {
            states[i].get_or_insert_with(|| State::new(kinds[i])).absorb(p, bk.idx, 1);
        } else if let Some(st) = states[i].as_mut() {
            st.absorb(p, bk.idx, -1);
        }
    }
}

/// Set view window `w`'s states from its closed buckets: the fold of their partials when
/// there are two or more, none otherwise (the window is its one closed bucket's partial).
fn refold(w: &mut Win, ring: &std::collections::VecDeque<Bucket>, kinds: &[Kind], spare: &mut Spare) {
    spare.give(std::mem::take(&mut w.states));
    if w.n() >= 2 {
        let mut states = spare.take(kinds.len());
        for bk in ring.range(w.lo..w.hi) {
            absorb_into(&mut states, kinds, bk, 1, spare);
        }
        w.states = states;
    }
}

/// The ring range `roll_win` would give window `w` (of `m` buckets) at bucket `b`.
fn rolled_range(w: &Win, ring: &std::collections::VecDeque<Bucket>, m: i64, b: i64) -> (usize, usize) {
    let (mut lo, mut hi) = (w.lo, w.hi);
    while lo < ring.len() && ring[lo].idx < b - m {
        if lo >= hi {
            hi += 1;
        }
        lo += 1;
    }
    while hi < ring.len() && ring[hi].idx < b {
        hi += 1;
    }
    (lo, hi)
}

/// Bring view window `w` (of `m` buckets) to the bucket `b` being the current one: buckets
/// older than the window leave (taken back from its states), closed ones enter (added).
/// Returns the bucket operations done.
fn roll_win(w: &mut Win, ring: &std::collections::VecDeque<Bucket>, kinds: &[Kind], m: i64, b: i64,
            spare: &mut Spare) -> u64 {
    let mut work = 0;
    while w.lo < ring.len() && ring[w.lo].idx < b - m {
        if w.lo < w.hi {
            let left = w.n() - 1;
            if left == 1 {
                spare.give(std::mem::take(&mut w.states)); // the window is the one left
            } else if left >= 2 {
                absorb_into(&mut w.states, kinds, &ring[w.lo], -1, spare);
            }
        } else {
            w.hi += 1; // an open bucket that left before it closed
        }
        w.lo += 1;
        work += 1;
    }
    while w.hi < ring.len() && ring[w.hi].idx < b {
        w.hi += 1;
        if w.n() == 2 {
            refold(w, ring, kinds, spare);
        } else if w.n() > 2 {
            absorb_into(&mut w.states, kinds, &ring[w.hi - 1], 1, spare);
        }
        work += 1;
    }
    work
}

/// Bring an entry's windows to the bucket `b` being the current one (each view's window
/// rolls over the shared ring), then drop the buckets no view holds any more. O(1) when the
/// entry is at `b` already (every window of a key read after its event). Returns the bucket
/// operations done.
pub fn roll(e: &mut Entry, kinds: &[Kind], hop: &Hop, views: &[View], b: i64, spare: &mut Spare)
            -> u64 {
    if e.at == b {
        return 0;
    }
    if e.ring.is_empty() {
        // No bucket (a new key's entry, before its first event goes in): every window is
        // empty over an empty ring (`lo == hi == 0`, no states), and nothing rolls.
        debug_assert!(e.wins.iter().all(|w| w.lo == 0 && w.hi == 0 && w.states.is_empty()));
        e.at = e.at.max(b);
        return 0;
    }
    let mut work = 0;
    for i in 0..e.wins.len().min(views.len()) {
        let (lo, hi) = rolled_range(&e.wins[i], &e.ring, views[i].m, b);
        let (done, rest) = e.wins.split_at_mut(i);
        let w = &mut rest[0];
        if hi - lo >= 2 && done.iter().any(|o| o.lo == lo && o.hi == hi && !o.states.is_empty()) {
            // Over the same buckets as a smaller view already rolled (W2's 28, 182 and 392
            // days while a key has no older bucket): the same states, so it keeps none and
            // reads that view's (`Entry::view_states`) instead of folding each bucket again.
            spare.give(std::mem::take(&mut w.states));
            (w.lo, w.hi) = (lo, hi);
        } else if w.states.is_empty() && w.n() >= 2 {
            // It shared another view's states and no longer can: its own, from its buckets.
            (w.lo, w.hi) = (lo, hi);
            refold(w, &e.ring, kinds, spare);
            work += w.n() as u64;
        } else {
            work += roll_win(w, &e.ring, kinds, views[i].m, b, spare);
        }
    }
    let gone = match e.wins.iter().map(|w| w.lo).min() {
        Some(lo) => lo,
        // No view (a table read from a snapshot for a group no metric uses): its own width.
        None => e.ring.iter().take_while(|bk| bk.idx < b - hop.m).count(),
    };
    for _ in 0..gone {
        let front = e.ring.pop_front().unwrap();
        spare.give(front.parts);
        spare.give_raw(front.raw);
    }
    for w in e.wins.iter_mut() {
        w.lo -= gone;
        w.hi -= gone;
    }
    if views.is_empty() {
        work += gone as u64;
    }
    e.at = e.at.max(b);
    work
}

fn entry_dead(e: &Entry) -> bool {
    e.ring.is_empty()
        && e.wins.iter().all(|w| w.states.iter().all(|s| s.as_ref().is_none_or(|s| s.empty())))
}

/// One group node's states, indexed by the key ids of its key space (`space`, an index into
/// the stream's key spaces). A plain (sliding) table keeps them flat, `width` per id, with a
/// bit per id saying whether it holds the key (an eviction touches one place, not an entry
/// and then its vector); a freed id's states stay there emptied, for the next key to take
/// without allocating. A calendar table keeps an `Entry` (states and bucket ring) per id.
#[derive(Clone)]
pub struct GroupTable {
    pub space: usize,
    pub hop: Option<Hop>,
    /// Bucket operations done by rolls (a debug counter: tests check a boundary costs
    /// nothing for keys that are not touched).
    pub rolls: u64,
    sweep: usize,
    sweep_tick: u32,
    pub sids: Vec<String>,
    pub kinds: Vec<Kind>,
    pub inputs: Vec<Input>,
    entries: Vec<Option<Entry>>, // by key id (calendar tables)
    /// Plain tables: where the states are. Attached (`Some(col)`): in the key space's record
    /// slab (slab.rs), id's record from `col`; detached (while a plan changes, or a scratch
    /// table): in `flat`, by `id * width + slot`.
    col: Option<usize>,
    flat: Vec<Option<State>>,
    present: Vec<u64>,           // plain tables: bit `id` set while the table holds key `id`
    live: usize,
    spare: Vec<Entry>, // freed entries whose vectors the next new key reuses (no allocation)
    spare_slots: Spare,
    /// Calendar tables: the partials of key `read_id`'s one closed bucket `read_idx`, made
    /// from its raw events by `readable` for the reads that follow while `read_tick` is the
    /// table's `tick` (`u32::MAX`: none). The views of a key whose windows hold that one
    /// bucket (most of W2's keys, all four windows) read the partials made once.
    read_id: u32,
    read_idx: i64,
    read_tick: u64,
    read_parts: Vec<Option<State>>,
    /// Moves on with every change to a bucket's events or an entry's key (see `read_tick`).
    tick: u64,
    /// Calendar tables: the windows over the buckets (one for a table of one window).
    pub views: Vec<View>,
    /// Whether an event or a snapshot ever went in: a new window joins only a table that
    /// holds nothing yet (its buckets then hold what the new window's would).
    pub fed: bool,
    /// Slots added while the table held events, not yet filled by a backfill.
    pub unfilled: Vec<String>,
    /// Key ids this `load` made (a key of a merged snapshot comes once per view).
    fresh: rustc_hash::FxHashSet<u32>,
}

/// Ask the CPU for every cache line of `bytes` bytes at `p` (a hint: reads nothing, never
/// faults, so a stale or dangling pointer of an empty vector is harmless).
#[inline]
fn prefetch_lines(p: *const i8, bytes: usize) {
    if bytes == 0 {
        return;
    }
    // Every line from the one holding the first byte to the one holding the last.
    let (mut off, end) = (0, bytes + (p as usize & 63));
    while off < end {
        let q = p.wrapping_add(off);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults and changes no memory.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(q);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = q;
        off += 64;
    }
}

const SPARE_MAX: usize = 1024;
/// Inserts per swept entry (each sweep step touches a cold entry: a cache miss).
const SWEEP_EVERY: u32 = 8;

impl GroupTable {
    pub fn new(space: usize) -> GroupTable {
        GroupTable { space, hop: None, rolls: 0, sweep: 0, sweep_tick: 0, sids: vec![], kinds: vec![],
                     inputs: vec![], entries: vec![], col: None, flat: vec![], present: vec![], live: 0,
                     spare: vec![], spare_slots: Spare::default(), read_id: u32::MAX,
                     read_idx: 0, read_tick: 0, read_parts: vec![], tick: 0, views: vec![],
                     fed: false, unfilled: vec![], fresh: Default::default() }
    }

    /// The id of `key` if this table holds an entry for it.
    pub fn find(&self, space: &KeySpace, key: &[Val]) -> Option<u32> {
        space.find(key).filter(|&id| self.has(id))
    }

    /// Whether the table holds key id `id`.
    pub fn has(&self, id: u32) -> bool {
        if self.hop.is_none() {
            return self.present.get(id as usize / 64).is_some_and(|w| w >> (id % 64) & 1 == 1);
        }
        self.entries.get(id as usize).is_some_and(|e| e.is_some())
    }

    /// Ask the CPU to bring in key id `id`'s entry (calendar) or states (plain: every cache
    /// line they span) ahead of use; reads nothing itself, so an id past the slab is simply
    /// skipped.
    #[inline]
    pub fn prefetch(&self, space: &KeySpace, id: u32) {
        let i = id as usize;
        let (p, bytes): (*const i8, usize) = if self.hop.is_some() {
            match self.entries.get(i) {
                // Every line of the entry (its 64 bytes may straddle two).
                Some(e) => ((e as *const Option<Entry>).cast(), std::mem::size_of::<Option<Entry>>()),
                None => return,
            }
        } else {
            let got = match self.col {
                Some(c) => space.slab.addr(i, c),
                None => self.flat.get(i * self.sids.len()).map(|s| s as *const Option<State>),
            };
            match got {
                Some(s) => ((s as *const Option<State>).cast(),
                            self.sids.len() * std::mem::size_of::<Option<State>>()),
                None => return,
            }
        };
        prefetch_lines(p, bytes);
    }

    /// Ask the CPU for what a calendar entry's roll and reads go to after the entry itself
    /// (`prefetch`), one level further each call, so that the levels' misses overlap with
    /// other rows' work instead of coming one after another: `deep` 1, the entry's window
    /// list and bucket ring; 2, the windows' own states and the newest bucket's events or
    /// partials. Reads only what the call before brought in; changes nothing.
    pub fn prefetch_deep(&self, id: u32, deep: u8) {
        if self.hop.is_none() {
            return;
        }
        let Some(Some(e)) = self.entries.get(id as usize) else { return };
        let (a, b) = e.ring.as_slices();
        if deep <= 1 {
            prefetch_lines(e.wins.as_ptr().cast(), std::mem::size_of_val(e.wins.as_slice()));
            for part in [a, b] {
                // Up to the 8 last buckets of each half of the ring (the newest, which a roll
                // takes in, are at the end): a few lines at most.
                let n = part.len().min(8);
                let tail = &part[part.len() - n..];
                prefetch_lines(tail.as_ptr().cast(), std::mem::size_of_val(tail));
            }
            return;
        }
        for w in &e.wins {
            if !w.states.is_empty() {
                prefetch_lines(w.states.as_ptr().cast(), std::mem::size_of_val(w.states.as_slice()));
            }
        }
        if let Some(bk) = b.last().or(a.last()) {
            prefetch_lines(bk.raw.as_ptr().cast(), std::mem::size_of_val(bk.raw.as_slice()));
            prefetch_lines(bk.parts.as_ptr().cast(), std::mem::size_of_val(bk.parts.as_slice()));
        }
    }

    /// Slot `slot`'s window state of key id `id` (none if the table does not hold the key);
    /// of view `view`'s window in a calendar table (`slot` is the table's slot).
    pub fn window<'a>(&'a self, space: &'a KeySpace, id: u32, view: usize, slot: usize)
                      -> Option<&'a State> {
        if self.hop.is_none() {
            if !self.has(id) {
                return None;
            }
            return self.states_of(space, id)[slot].as_ref();
        }
        let e = self.entries.get(id as usize).and_then(|e| e.as_ref())?;
        if let Some(lo) = e.one_raw(view) {
            assert!(id == self.read_id && e.ring[lo].idx == self.read_idx
                    && self.read_tick == self.tick, "a raw bucket read without readable()");
            return self.read_parts.get(slot).and_then(|p| p.as_ref());
        }
        e.window(view, slot)
    }

    /// Every slot's window state of key id `id` in view `view` (`window` for all slots at
    /// once; index by the table's slot with `get`), and the bucket whose raw events they were
    /// made from in `read_parts` (`i64::MIN`: they are not). Two reads of one key giving the
    /// same slice and bucket between changes to the table read the same states (plan.rs
    /// lowers them once for views over the same buckets).
    pub fn window_states<'a>(&'a self, space: &'a KeySpace, id: u32, view: usize)
                             -> (Option<&'a [Option<State>]>, i64) {
        if self.hop.is_none() {
            if !self.has(id) {
                return (None, i64::MIN);
            }
            return (Some(self.states_of(space, id)), i64::MIN);
        }
        let Some(e) = self.entries.get(id as usize).and_then(|e| e.as_ref()) else {
            return (None, i64::MIN);
        };
        if let Some(lo) = e.one_raw(view) {
            assert!(id == self.read_id && e.ring[lo].idx == self.read_idx
                    && self.read_tick == self.tick, "a raw bucket read without readable()");
            return (Some(self.read_parts.as_slice()), self.read_idx);
        }
        (e.window_states(view), i64::MIN)
    }

    /// The states of key id `id` (a plain table's).
    fn states_of<'a>(&'a self, space: &'a KeySpace, id: u32) -> &'a [Option<State>] {
        let (w, i) = (self.sids.len(), id as usize);
        match self.col {
            Some(c) => space.slab.states(i, c, w),
            None => &self.flat[i * w..(i + 1) * w],
        }
    }

    /// Whether key id `id` holds nothing (a digest leaves it out; plain tables).
    fn dead(&self, space: &KeySpace, id: u32) -> bool {
        self.states_of(space, id).iter().all(|s| s.as_ref().is_none_or(|s| s.empty()))
    }

    /// Ids the table holds, in id order.
    fn ids(&self) -> Vec<u32> {
        (0..self.entries.len().max(self.present.len() * 64) as u32).filter(|&i| self.has(i)).collect()
    }

    /// Make sure the table holds key id `id` (of its space), taking a reference to it if not.
    pub fn insert_at(&mut self, space: &mut KeySpace, id: u32) {
        let i = id as usize;
        if self.hop.is_none() {
            if self.present.len() <= i / 64 {
                self.present.resize(i / 64 + 1, 0);
            }
            let w = &mut self.present[i / 64];
            if *w >> (i % 64) & 1 == 1 {
                return;
            }
            *w |= 1 << (i % 64);
            let width = self.sids.len();
            if self.col.is_some() {
                space.slab.grow(i);
            } else if self.flat.len() < (i + 1) * width {
                // Room for the ids up to this one (grows like a vector: amortised).
                let want = ((i + 1) * width).max(self.flat.len() * 2);
                self.flat.resize_with(want, || None);
            }
            self.live += 1;
            space.acquire(id);
            return;
        }
        if i < self.entries.len() && self.entries[i].is_some() {
            return;
        }
        let mut entry = self.spare.pop().unwrap_or_else(|| Entry {
            ring: Default::default(), wins: vec![], at: i64::MIN });
        entry.ring.clear();
        entry.at = i64::MIN;
        entry.wins.resize_with(self.views.len(), Win::default);
        for w in entry.wins.iter_mut() {
            w.lo = 0;
            w.hi = 0; // states: given back when the entry was freed
        }
        self.tick += 1;
        if i >= self.entries.len() {
            self.entries.resize_with(i + 1, || None);
        }
        self.entries[i] = Some(entry);
        self.live += 1;
        space.acquire(id);
    }

    /// `key`'s id, with an entry for it in this table.
    pub fn find_or_insert(&mut self, space: &mut KeySpace, key: &[Val]) -> u32 {
        let id = space.intern(key);
        self.insert_at(space, id);
        id
    }

    pub fn entry(&self, id: u32) -> &Entry {
        self.entries[id as usize].as_ref().expect("live entry")
    }

    /// The slots' kinds and inputs beside a plain table's states of key id `id` (disjoint
    /// borrows; the states lie in `space`'s slab when the table is attached).
    pub fn slots_mut<'a>(&'a mut self, space: &'a mut KeySpace, id: u32)
                         -> (&'a [Kind], &'a [Input], &'a mut [Option<State>]) {
        let (w, i) = (self.sids.len(), id as usize);
        let states = match self.col {
            Some(c) => space.slab.states_mut(i, c, w),
            None => &mut self.flat[i * w..(i + 1) * w],
        };
        (&self.kinds, &self.inputs, states)
    }

    /// Move a plain table's states out of its space's slab into its own `flat` (before the
    /// plan changes: slots, tables and so the record layout may change).
    pub fn detach(&mut self, space: &mut KeySpace) {
        let Some(c) = self.col.take() else { return };
        let w = self.sids.len();
        let ids = self.ids();
        let n = ids.last().map_or(0, |&i| i as usize + 1);
        self.flat = Vec::with_capacity(n * w);
        self.flat.resize_with(n * w, || None);
        for id in ids {
            let i = id as usize;
            for j in 0..w {
                self.flat[i * w + j] = space.slab.take(i, c + j);
            }
        }
    }

    /// Move a detached plain table's states into its space's slab at column `col` (the
    /// space's slab was reset to the new record layout).
    pub fn attach(&mut self, space: &mut KeySpace, col: usize) {
        if self.hop.is_some() || self.col.is_some() {
            return;
        }
        let w = self.sids.len();
        let mut flat = std::mem::take(&mut self.flat);
        self.col = Some(col);
        for id in self.ids() {
            let i = id as usize;
            space.slab.grow(i);
            let states = space.slab.states_mut(i, col, w);
            for (j, st) in states.iter_mut().enumerate() {
                *st = flat.get_mut(i * w + j).and_then(|s| s.take());
            }
        }
    }

    /// Roll entry `id` to the current bucket `b` (calendar tables); frees it if nothing is
    /// left (giving its key id back to `space`, unless none: a copy for a digest). Returns
    /// whether it is still live.
    pub fn roll(&mut self, id: u32, b: i64, space: Option<&mut KeySpace>) -> bool {
        let Some(hop) = self.hop else { return true };
        let e = self.entries[id as usize].as_mut().expect("live entry");
        if e.at == b && !e.ring.is_empty() {
            return true; // rolled to `b` already (every read of a key after its event) and live
        }
        self.rolls += roll(e, &self.kinds, &hop, &self.views, b, &mut self.spare_slots);
        if entry_dead(e) {
            self.remove(id, space);
            return false;
        }
        true
    }

    /// Make key id `id`'s window of view `view` readable by `window` (calendar tables, after
    /// `roll`): a window of one closed bucket is that bucket's partials; if the bucket is raw
    /// they are made in `read_parts` for the reads that follow (the bucket stays raw: most
    /// keys read again keep one closed bucket for days, and its partials would stay with it),
    /// once for all the views whose window is that bucket.
    pub fn readable(&mut self, id: u32, view: usize) {
        if self.hop.is_none() {
            return;
        }
        let e = self.entries[id as usize].as_ref().expect("live entry");
        if let Some(lo) = e.one_raw(view) {
            let bk = &e.ring[lo];
            if self.read_id == id && self.read_idx == bk.idx && self.read_tick == self.tick {
                return;
            }
            let kinds = &self.kinds;
            if self.read_parts.len() != kinds.len() {
                self.read_parts = kinds.iter().map(|k| Some(State::new(*k))).collect();
            }
            for p in self.read_parts.iter_mut().flatten() {
                p.clear();
            }
            let sp = &self.spare_slots;
            add_raw(&mut self.read_parts, kinds, &sp.cols, sp.stride, &bk.raw);
            (self.read_id, self.read_idx, self.read_tick) = (id, bk.idx, self.tick);
        }
    }

    /// Every `SWEEP_EVERY` inserts, roll the next live entry after the sweep cursor: O(1),
    /// and a key that stops coming is freed after one pass over the table.
    /// The inserts in between bring the entry the sweep rolls next into the cache, level by
    /// level (`prefetch`, `prefetch_deep`): it is a key nobody touched for days, cold.
    pub fn sweep_one(&mut self, b: i64, space: &mut KeySpace) {
        self.sweep_tick = self.sweep_tick.wrapping_add(1);
        let n = self.entries.len();
        match self.sweep_tick % SWEEP_EVERY {
            0 => {}
            2 => {
                // The slots the next sweep step looks at (it takes the first live one).
                let from = (self.sweep + 1).min(n);
                let to = (from + 4).min(n);
                let slots = &self.entries[from..to];
                prefetch_lines(slots.as_ptr().cast(), std::mem::size_of_val(slots));
                return;
            }
            p @ (4 | 6) => {
                if let Some(id) = self.sweep_next() {
                    self.prefetch_deep(id, if p == 4 { 1 } else { 2 });
                }
                return;
            }
            _ => return,
        }
        for _ in 0..n.min(4) {
            self.sweep = if self.sweep + 1 >= n { 0 } else { self.sweep + 1 };
            if self.entries[self.sweep].is_some() {
                self.roll(self.sweep as u32, b, Some(space));
                return;
            }
        }
    }

    /// The entry the next sweep step will roll, if it finds one (as `sweep_one` looks).
    fn sweep_next(&self) -> Option<u32> {
        let n = self.entries.len();
        let mut i = self.sweep;
        for _ in 0..n.min(4) {
            i = if i + 1 >= n { 0 } else { i + 1 };
            if self.entries[i].is_some() {
                return Some(i as u32);
            }
        }
        None
    }

    /// An event of key `id` at `ts` joins its bucket's partial (calendar tables; `value`: what
    /// an input takes from the event; `only`: the one slot fed, else all). Values are made
    /// slot by slot where they are added, not gathered first: a gathered 32-byte value is
    /// stored and read back in pieces, which stalls. Events come in time order, except when
    /// filling one new slot, whose window states `rebuild` then recomputes.
    pub fn insert_bucket(&mut self, id: u32, ts: i64, pos: u64, only: Option<usize>,
                         value: impl Fn(Input) -> Val) {
        let hop = self.hop.expect("calendar table");
        let bi = hop.bucket(ts);
        let n = self.sids.len();
        self.fed = true;
        self.tick += 1;
        let e = self.entries[id as usize].as_mut().expect("live entry");
        let spare = &mut self.spare_slots;
        // Not freed: the event joins it.
        self.rolls += roll(e, &self.kinds, &hop, &self.views, bi, spare);
        let at = match e.ring.back() {
            Some(b) if b.idx == bi => e.ring.len() - 1,
            Some(b) if b.idx > bi => match e.ring.binary_search_by_key(&bi, |b| b.idx) {
                Ok(i) => i,
                Err(i) => {
                    e.ring.insert(i, Bucket { idx: bi, raw: vec![], parts: spare.take(n) });
                    for w in e.wins.iter_mut() {
                        if i < w.lo {
                            w.lo += 1;
                            w.hi += 1;
                        } else if i < w.hi {
                            // An empty closed bucket inside: the window only refolds (the
                            // next roll lets it go if it is older than the window).
                            w.hi += 1;
                            refold(w, &e.ring, &self.kinds, spare);
                        }
                    }
                    e.at = i64::MIN;
                    i
                }
            },
            _ => {
                if e.ring.capacity() == 0 {
                    e.ring.reserve_exact(1); // most keys of a large table live one bucket
                }
                // A new bucket keeps its events raw (unless one slot is filled alone).
                let (raw, parts) = if only.is_none() && n > 0 {
                    (spare.take_raw(), vec![])
                } else {
                    (vec![], spare.take(n))
                };
                e.ring.push_back(Bucket { idx: bi, raw, parts });
                if bi < e.at {
                    e.at = i64::MIN; // closed already: the next roll takes it in
                }
                e.ring.len() - 1
            }
        };
        let bk = &mut e.ring[at];
        if bk.parts.is_empty() && only.is_none() && bk.raw.len() < spare.stride * RAW_MAX {
            bk.raw.push(raw_ts_pos(ts, pos));
            for &inp in &spare.inputs {
                bk.raw.push(value(inp));
            }
            return;
        }
        make_parts(bk, &self.kinds, spare);
        let parts = &mut bk.parts;
        for (i, (part, &kind)) in parts.iter_mut().zip(&self.kinds).enumerate() {
            if only.is_some_and(|s| s != i) {
                continue;
            }
            let v = value(self.inputs[i]);
            part.get_or_insert_with(|| State::new(kind)).add_partial(&v, ts, pos);
        }
    }

    /// Recompute every entry's window states from its closed buckets (after filling a new
    /// slot out of order).
    pub fn rebuild(&mut self) {
        for e in self.entries.iter_mut().flatten() {
            for w in e.wins.iter_mut() {
                refold(w, &e.ring, &self.kinds, &mut self.spare_slots);
            }
        }
    }

    /// A copy of view `view`'s slot `slot` window state of key `key` as it would be at
    /// bucket `b` (`slot`: the table's).
    pub fn state_at(&self, space: &KeySpace, key: &[Val], view: usize, slot: usize, b: i64)
                    -> Option<State> {
        let id = self.find(space, key)?;
        match self.hop {
            None => self.window(space, id, view, slot).cloned(),
            Some(hop) => {
                let mut e = self.entry(id).clone();
                let mut spare = self.spare_slots.layout();
                roll(&mut e, &self.kinds, &hop, &self.views, b, &mut spare);
                if let Some(lo) = e.one_raw(view) {
                    make_parts(&mut e.ring[lo], &self.kinds, &mut spare);
                }
                e.window(view, slot).cloned()
            }
        }
    }

    /// Calendar windows holding states apart from their buckets' partials (a debug
    /// counter: tests check that a window of one closed bucket is not held twice).
    pub fn held_windows(&self) -> usize {
        self.entries.iter().flatten().map(|e| e.held()).sum()
    }

    /// Buckets keeping their events raw (a debug counter: tests check that a bucket of a few
    /// events makes no partials until it is read or folded).
    pub fn raw_buckets(&self) -> usize {
        self.entries.iter().flatten().map(|e| e.ring.iter().filter(|b| b.is_raw()).count()).sum()
    }

    /// This table with every entry rolled to bucket `b` (the logical state, for digests).
    pub fn rolled_to(&self, b: i64) -> GroupTable {
        let mut t = self.clone();
        if t.hop.is_some() {
            let ids: Vec<u32> = (0..t.entries.len() as u32)
                .filter(|i| t.entries[*i as usize].is_some()).collect();
            for id in ids {
                t.roll(id, b, None);
            }
        }
        t
    }

    /// Free entry `id`, giving its key id back to `space` (none: a copy for a digest).
    pub fn remove(&mut self, id: u32, space: Option<&mut KeySpace>) {
        if self.hop.is_none() {
            if !self.has(id) {
                return;
            }
            self.present[id as usize / 64] &= !(1 << (id % 64));
            self.live -= 1;
            let w = self.sids.len();
            let states = match space {
                Some(space) => {
                    space.release(id);
                    self.slots_mut(space, id).2
                }
                None if self.col.is_none() => &mut self.flat[id as usize * w..(id as usize + 1) * w],
                None => return, // states in a slab that is not at hand: a copy's (never hot)
            };
            for st in states.iter_mut().flatten() {
                st.clear(); // kept for the next key taking the id
            }
            return;
        }
        if let Some(mut e) = self.entries[id as usize].take() {
            self.live -= 1;
            if let Some(space) = space {
                space.release(id);
            }
            self.tick += 1;
            for bk in e.ring.drain(..) {
                self.spare_slots.give(bk.parts);
                self.spare_slots.give_raw(bk.raw);
            }
            for w in e.wins.iter_mut() {
                self.spare_slots.give(std::mem::take(&mut w.states));
            }
            if self.spare.len() < SPARE_MAX {
                self.spare.push(e); // its ring and windows' vectors, for the next new key
            }
        }
    }

    pub fn len(&self) -> usize {
        self.live
    }

    /// Free every entry (the table leaves the plan), giving the key ids back to `space`.
    pub fn release_all(&mut self, space: &mut KeySpace) {
        for id in self.ids() {
            self.remove(id, Some(space));
        }
    }

    /// Take a new list of slots (sid, kind, input): states of kept sids move along, states
    /// of dropped sids go, and entries left without any state are freed.
    pub fn set_slots(&mut self, slots: Vec<(String, Kind, Input)>, space: &mut KeySpace) {
        let map: Vec<Option<usize>> =
            slots.iter().map(|(sid, _, _)| self.sids.iter().position(|s| s == sid)).collect();
        if self.hop.is_none() {
            self.detach(space); // a new width: the space's record layout changes too
            let ids = self.ids();
            let (old_w, new_w) = (self.sids.len(), slots.len());
            let n = ids.last().map_or(0, |&i| i as usize + 1);
            let mut old = std::mem::take(&mut self.flat);
            self.flat.resize_with(n * new_w, || None);
            let mut dead = vec![];
            for &id in &ids {
                let id = id as usize;
                for (j, m) in map.iter().enumerate() {
                    if let Some(i) = m {
                        self.flat[id * new_w + j] = old[id * old_w + i].take();
                    }
                }
                if self.flat[id * new_w..(id + 1) * new_w].iter().all(|s| s.is_none()) {
                    dead.push(id as u32);
                }
            }
            self.sids = slots.iter().map(|s| s.0.clone()).collect();
            self.kinds = slots.iter().map(|s| s.1).collect();
            self.inputs = slots.iter().map(|s| s.2).collect();
            self.spare_slots.set_layout(&self.inputs);
            for id in dead {
                self.remove(id, Some(space));
            }
            return;
        }
        let mut dead = vec![];
        for (id, e) in self.entries.iter_mut().enumerate() {
            if let Some(e) = e {
                for b in e.ring.iter_mut() {
                    // Partials of the old slots, before they are mapped to the new ones.
                    make_parts(b, &self.kinds, &mut self.spare_slots);
                }
                for w in e.wins.iter_mut().filter(|w| !w.states.is_empty()) {
                    let mut old: Vec<Option<State>> = std::mem::take(&mut w.states);
                    w.states = map.iter().map(|m| m.and_then(|i| old[i].take())).collect();
                }
                for b in e.ring.iter_mut() {
                    let mut old: Vec<Option<State>> = std::mem::take(&mut b.parts);
                    b.parts = map.iter().map(|m| m.and_then(|i| old[i].take())).collect();
                }
                if entry_dead(e) {
                    dead.push(id as u32);
                }
            }
        }
        for id in dead {
            self.remove(id, Some(space));
        }
        if self.fed {
            // Slots the buckets have no events for yet: a backfill fills them once, for
            // every view (see `unfilled`).
            for (sid, _, _) in &slots {
                if !self.sids.contains(sid) && !self.unfilled.contains(sid) {
                    self.unfilled.push(sid.clone());
                }
            }
        }
        self.unfilled.retain(|u| slots.iter().any(|s| s.0 == *u));
        self.spare_slots.clear(); // vectors of the old slots' width and kinds
        self.read_parts.clear();
        self.read_id = u32::MAX;
        self.tick += 1;
        self.sids = slots.iter().map(|s| s.0.clone()).collect();
        self.kinds = slots.iter().map(|s| s.1).collect();
        self.inputs = slots.iter().map(|s| s.2).collect();
        self.spare_slots.set_layout(&self.inputs);
    }

    /// Take a new list of views (calendar tables): a view keeps its windows by gid, a new
    /// view's windows start empty and fill at the next roll of each key (it joins a table
    /// that holds nothing: see `fed`), a view that left gives its windows' states back. The
    /// buckets are kept for the largest view.
    pub fn set_views(&mut self, views: Vec<View>) {
        let map: Vec<Option<usize>> =
            views.iter().map(|v| self.views.iter().position(|o| o.gid == v.gid)).collect();
        if self.fed {
            // A slot a view did not read before: its windows' states of that slot may be
            // none (a view restored beside others), so a backfill fills it anew, for all.
            for (v, m) in views.iter().zip(&map) {
                for sid in &v.sids {
                    let had = m.is_some_and(|i| self.views[i].sids.contains(sid));
                    if !had && !self.unfilled.contains(sid) {
                        self.unfilled.push(sid.clone());
                    }
                }
            }
        }
        for e in self.entries.iter_mut().flatten() {
            e.unshare(&self.kinds, &mut self.spare_slots);
            let mut old = std::mem::take(&mut e.wins);
            e.wins = map.iter().map(|m| m.map_or_else(Win::default, |i| std::mem::take(&mut old[i])))
                .collect();
            for w in old {
                self.spare_slots.give(w.states);
            }
            e.at = i64::MIN;
        }
        for e in self.spare.iter_mut() {
            e.wins.clear();
        }
        if let Some(h) = self.hop.as_mut() {
            h.m = views.iter().map(|v| v.m).max().unwrap_or(h.m);
        }
        self.views = views;
        self.tick += 1;
    }

    /// Empty table slot `slot` in every bucket and window (before a backfill fills it anew).
    pub fn clear_slot(&mut self, slot: usize) {
        for e in self.entries.iter_mut().flatten() {
            for b in e.ring.iter_mut() {
                make_parts(b, &self.kinds, &mut self.spare_slots);
                if let Some(p) = b.parts.get_mut(slot) {
                    *p = None;
                }
            }
            for w in e.wins.iter_mut() {
                if let Some(p) = w.states.get_mut(slot) {
                    *p = None;
                }
            }
        }
        self.tick += 1;
    }

    /// View `view`'s slot `slot` as a table slot.
    pub fn slot_of(&self, view: usize, slot: usize) -> usize {
        self.views.get(view).map_or(slot, |v| v.slots[slot])
    }

    /// Rewrite the event positions of every state through `map` (see `State::renumber`).
    /// A calendar window's own states hold bucket numbers, not positions: only its buckets'
    /// partials are rewritten.
    pub fn renumber(&mut self, map: &[u64]) -> Result<(), u64> {
        for s in self.flat.iter_mut().flatten() {
            s.renumber(map)?; // a detached plain table's (attached ones: KeySpace::renumber)
        }
        let stride = self.spare_slots.stride;
        for e in self.entries.iter_mut().flatten() {
            for b in e.ring.iter_mut() {
                for s in b.parts.iter_mut().flatten() {
                    s.renumber(map)?;
                }
                for ev in b.raw.chunks_exact_mut(stride) {
                    let (ts, p) = raw_unpack(&ev[0]);
                    ev[0] = raw_ts_pos(ts, *map.get(p as usize).ok_or(p)?);
                }
            }
        }
        Ok(())
    }

    /// Held ids ordered by their canonical key bytes: (key bytes, id).
    fn sorted(&self, strings: &Interner, space: &KeySpace) -> Vec<(Vec<u8>, u32)> {
        let mut out: Vec<(Vec<u8>, u32)> = self
            .ids()
            .into_iter()
            .map(|id| {
                let key = space.key(id);
                let mut o = Out::default();
                o.u32(key.len() as u32);
                for v in key {
                    o.val(v, strings);
                }
                (o.buf, id)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every entry (`digest`: only entries holding a non-empty state, for the logical digest);
    /// of view `view` for a calendar table, written as a table of that one window was.
    pub fn write(&self, out: &mut Out, strings: &Interner, space: &KeySpace, view: usize,
                 digest: bool) {
        if self.hop.is_some() {
            return self.write_view(out, strings, space, view, digest);
        }
        out.u32(self.sids.len() as u32);
        for s in &self.sids {
            out.bytes(s.as_bytes());
        }
        let entries = self.sorted(strings, space);
        let kept: Vec<_> = entries
            .into_iter()
            .filter(|(_, id)| !digest || !self.dead(space, *id))
            .collect();
        out.u32(kept.len() as u32);
        for (k, id) in kept {
            out.buf.extend_from_slice(&k);
            for s in self.states_of(space, id) {
                write_state(out, strings, s.as_ref(), digest);
            }
            out.u32(0); // a plain table: no buckets
            out.u32(0);
        }
    }

    /// View `view` of a calendar table as the table of that one window wrote it: its slots,
    /// and per key its window's own states (none while it holds one closed bucket), its
    /// buckets from its window's start on and how many of them are closed in it.
    fn write_view(&self, out: &mut Out, strings: &Interner, space: &KeySpace, view: usize,
                  digest: bool) {
        let (sids, slots): (Vec<String>, Vec<usize>) = match self.views.get(view) {
            Some(v) => (v.sids.clone(), v.slots.clone()),
            None => (self.sids.clone(), (0..self.sids.len()).collect()),
        };
        out.u32(sids.len() as u32);
        for s in &sids {
            out.bytes(s.as_bytes());
        }
        let none = Win::default();
        let kept: Vec<_> = self.sorted(strings, space)
            .into_iter()
            .filter(|(_, id)| {
                let e = self.entry(*id);
                if view < e.wins.len() { !e.view_dead(view) } else { !entry_dead(e) }
            })
            .collect();
        out.u32(kept.len() as u32);
        for (k, id) in kept {
            out.buf.extend_from_slice(&k);
            let e = self.entry(id);
            let w = e.wins.get(view).unwrap_or(&none);
            let states = if view < e.wins.len() { e.view_states(view) } else { &w.states };
            for &j in &slots {
                write_state(out, strings, states.get(j).and_then(|s| s.as_ref()), digest);
            }
            let ring: Vec<&Bucket> = e.ring.range(w.lo.min(e.ring.len())..).collect();
            out.u32(ring.len() as u32);
            out.u32(w.n().min(ring.len()) as u32);
            for b in ring {
                out.i64(b.idx);
                let made;
                let parts: &[Option<State>] = if b.is_raw() {
                    // Written as its partials: the same bytes as a bucket that made them.
                    let mut p: Vec<Option<State>> = vec![None; self.kinds.len()];
                    let sp = &self.spare_slots;
                    add_raw(&mut p, &self.kinds, &sp.cols, sp.stride, &b.raw);
                    made = p;
                    &made
                } else {
                    &b.parts
                };
                for &j in &slots {
                    write_state(out, strings, parts.get(j).and_then(|s| s.as_ref()), digest);
                }
            }
        }
    }

    /// A copy holding what `write` reads (slots, views, the held keys' states; a plain
    /// table's in its own `flat`, out of `space`'s slab), sharing nothing with this table:
    /// a snapshot's frozen view (frozen.rs), written later while this table changes.
    pub fn frozen(&self, space: &KeySpace) -> GroupTable {
        let mut t = GroupTable::new(self.space);
        t.hop = self.hop;
        t.sids = self.sids.clone();
        t.kinds = self.kinds.clone();
        t.inputs = self.inputs.clone();
        t.views = self.views.clone();
        t.spare_slots = self.spare_slots.layout(); // a raw bucket's columns, for `write_view`
        t.live = self.live;
        if self.hop.is_some() {
            t.entries = self.entries.clone();
            return t;
        }
        t.present = self.present.clone();
        let w = self.sids.len();
        let ids = self.ids();
        let n = ids.last().map_or(0, |&i| i as usize + 1);
        t.flat = Vec::with_capacity(n * w);
        for id in ids {
            t.flat.resize_with(id as usize * w, || None);
            t.flat.extend_from_slice(self.states_of(space, id));
        }
        t
    }

    /// Clear the ids the last `load` made (before a new one).
    pub fn begin_load(&mut self) {
        self.fresh.clear();
    }

    /// Read entries written by `write` into this table (into view `view` of a calendar
    /// table), mapping slots by sid. `disjoint`: refuse a key the table holds already
    /// (merging tables built over disjoint keys; a key this load made for another view of
    /// the table is the same key, not a second holder).
    pub fn read(&mut self, py: Python<'_>, inp: &mut In<'_>, strings: &mut Interner,
                space: &mut KeySpace, view: usize, disjoint: bool) -> PyResult<()> {
        let n = inp.u32()? as usize;
        let mut sids = Vec::with_capacity(n);
        for _ in 0..n {
            sids.push(String::from_utf8_lossy(inp.bytes()?).to_string());
        }
        let map: Vec<Option<usize>> = sids.iter().map(|s| self.sids.iter().position(|x| x == s)).collect();
        let calendar = self.hop.is_some();
        if calendar {
            self.fed = true;
            self.tick += 1;
        }
        let k = inp.u32()?;
        for _ in 0..k {
            let kl = inp.u32()? as usize;
            let mut key = Vec::with_capacity(kl);
            for _ in 0..kl {
                key.push(inp.val(py, strings)?);
            }
            let held = self.find(space, &key);
            if disjoint && held.is_some_and(|id| !self.fresh.contains(&id)) {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a group key held by two of the merged states"));
            }
            let id = self.find_or_insert(space, &key);
            if held.is_none() {
                self.fresh.insert(id);
            }
            let width = self.sids.len();
            let mut states: Vec<Option<State>> = vec![None; width];
            for slot in map.iter() {
                let st = if inp.u8()? == 1 { Some(State::read(py, inp, strings)?) } else { None };
                if let (Some(i), Some(st)) = (slot, st) {
                    states[*i] = Some(st);
                }
            }
            let nb = inp.u32()? as usize;
            let absorbed = inp.u32()? as usize;
            if !calendar {
                let (_, _, slots) = self.slots_mut(space, id);
                for (slot, st) in slots.iter_mut().zip(states) {
                    *slot = st;
                }
                for _ in 0..nb {
                    // Buckets of a table that was a calendar one (none are written for plain
                    // tables): read past them.
                    inp.i64()?;
                    for _ in map.iter() {
                        if inp.u8()? == 1 {
                            State::read(py, inp, strings)?;
                        }
                    }
                }
                continue;
            }
            let mut buckets = Vec::with_capacity(nb);
            for _ in 0..nb {
                let idx = inp.i64()?;
                let mut parts = vec![None; width];
                for slot in map.iter() {
                    let st = if inp.u8()? == 1 { Some(State::read(py, inp, strings)?) } else { None };
                    if let (Some(i), Some(st)) = (slot, st) {
                        parts[*i] = Some(st);
                    }
                }
                buckets.push((idx, parts));
            }
            let kinds = self.kinds.clone();
            let e = self.entries[id as usize].as_mut().expect("live entry");
            e.at = i64::MIN;
            merge_view(e, view, buckets, absorbed.min(nb), states, &kinds, &mut self.spare_slots);
        }
        Ok(())
    }
}

/// One state of a snapshot: a flag, then the state (`digest`: an empty state as none).
fn write_state(out: &mut Out, strings: &Interner, s: Option<&State>, digest: bool) {
    match s {
        Some(s) if !(digest && s.empty()) => {
            out.u8(1);
            s.write(out, strings);
        }
        _ => out.u8(0),
    }
}

/// Merge view `view`'s buckets and window, as a snapshot holds them, into entry `e`: buckets
/// another view of the table brought already are the same buckets (their missing slots are
/// filled in), new ones go in order. The view's window is its first `absorbed` buckets,
/// with the states read (the fold of its buckets when the ring holds others between them:
/// views written apart, at different rolls). Views with nothing read roll into their window
/// from the ring at the next roll.
fn merge_view(e: &mut Entry, view: usize, buckets: Vec<(i64, Vec<Option<State>>)>, absorbed: usize,
              states: Vec<Option<State>>, kinds: &[Kind], spare: &mut Spare) {
    e.unshare(kinds, spare);
    let mut places = Vec::with_capacity(buckets.len());
    for (idx, parts) in buckets {
        match e.ring.binary_search_by_key(&idx, |b| b.idx) {
            Ok(i) => {
                make_parts(&mut e.ring[i], kinds, spare);
                let have = &mut e.ring[i].parts;
                have.resize(kinds.len(), None);
                for (h, p) in have.iter_mut().zip(parts) {
                    if h.is_none() {
                        *h = p;
                    }
                }
                places.push(i);
            }
            Err(i) => {
                e.ring.insert(i, Bucket { idx, raw: vec![], parts });
                for p in places.iter_mut().filter(|p| **p >= i) {
                    *p += 1;
                }
                for (v, w) in e.wins.iter_mut().enumerate() {
                    if v == view {
                        continue;
                    }
                    if i < w.lo {
                        w.lo += 1;
                        w.hi += 1;
                    } else if i < w.hi {
                        w.hi += 1; // written at another roll: the window refolds below
                        refold(w, &e.ring, kinds, spare);
                    }
                }
                places.push(i);
            }
        }
    }
    if view >= e.wins.len() {
        return; // a table with no views (a group no metric uses): only its buckets matter
    }
    let w = &mut e.wins[view];
    spare.give(std::mem::take(&mut w.states));
    match places.first() {
        None => {
            (w.lo, w.hi) = (0, 0); // nothing of its own: it rolls into its window later
        }
        Some(&lo) => {
            let hi = if absorbed == 0 { lo } else { places[absorbed - 1] + 1 };
            (w.lo, w.hi) = (lo, hi);
            if hi - lo != absorbed {
                refold(w, &e.ring, kinds, spare);
            } else if absorbed >= 2 {
                w.states = states;
            }
        }
    }
}
