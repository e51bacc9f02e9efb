//! Keyed state: per group node, group keys interned to integer ids, and per key one state
//! per state slot. An entry whose states are all empty after an eviction is freed, so state
//! does not grow with keys that left every window. Keys are stored canonical (see value.rs),
//! and snapshots and digests order entries by the canonical key's bytes, never by id.

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use crate::aggregations::{Kind, State};
use crate::value::{In, Interner, Out, Val};

/// What a state slot takes from an event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Input {
    One,
    Field(usize),
    Pred(usize),
}

/// A group key as the index holds it: up to `KEY_INLINE` values inline, so a lookup compares
/// against the table's own bucket instead of chasing a heap pointer per key (with one table
/// per window, W1's 120 windows make 240 lookups per event: cache misses dominated them).
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

pub struct Entry {
    pub key: Vec<Val>,
    pub states: Vec<Option<State>>,
}

pub struct GroupTable {
    pub sids: Vec<String>,
    pub kinds: Vec<Kind>,
    pub inputs: Vec<Input>,
    index: FxHashMap<Key, u32>,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    spare: Vec<Entry>, // freed entries whose vectors the next new key reuses (no allocation)
    spare_keys: Vec<Key>,
}

const SPARE_MAX: usize = 1024;

impl GroupTable {
    pub fn new() -> GroupTable {
        GroupTable { sids: vec![], kinds: vec![], inputs: vec![], index: FxHashMap::default(),
                     entries: vec![], free: vec![], spare: vec![],
                     spare_keys: vec![] }
    }

    pub fn find(&self, key: &[Val]) -> Option<u32> {
        self.index.get(key).copied()
    }

    pub fn find_or_insert(&mut self, key: &[Val]) -> u32 {
        if let Some(&id) = self.index.get(key) {
            return id;
        }
        let mut entry = self.spare.pop().unwrap_or_else(|| Entry { key: vec![], states: vec![] });
        entry.key.clear();
        entry.key.extend(key.iter().map(|v| v.canonical()));
        entry.states.clear();
        entry.states.resize_with(self.sids.len(), || None);
        let mut canon = self.spare_keys.pop().unwrap_or_default();
        canon.fill(&entry.key);
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = Some(entry);
                id
            }
            None => {
                self.entries.push(Some(entry));
                (self.entries.len() - 1) as u32
            }
        };
        self.index.insert(canon, id);
        id
    }

    pub fn entry(&self, id: u32) -> &Entry {
        self.entries[id as usize].as_ref().expect("live entry")
    }

    pub fn entry_mut(&mut self, id: u32) -> &mut Entry {
        self.entries[id as usize].as_mut().expect("live entry")
    }

    /// The slots' kinds and inputs beside one entry's states (disjoint borrows).
    pub fn slots_mut(&mut self, id: u32) -> (&[Kind], &[Input], &mut Vec<Option<State>>) {
        let e = self.entries[id as usize].as_mut().expect("live entry");
        (&self.kinds, &self.inputs, &mut e.states)
    }

    pub fn remove(&mut self, id: u32) {
        if let Some(mut e) = self.entries[id as usize].take() {
            if let Some((k, _)) = self.index.remove_entry(e.key.as_slice()) {
                if self.spare_keys.len() < SPARE_MAX {
                    self.spare_keys.push(k);
                }
            }
            self.free.push(id);
            if self.spare.len() < SPARE_MAX {
                e.states.clear();
                self.spare.push(e);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Take a new list of slots (sid, kind, input): states of kept sids move along, states
    /// of dropped sids go, and entries left without any state are freed.
    pub fn set_slots(&mut self, slots: Vec<(String, Kind, Input)>) {
        let map: Vec<Option<usize>> =
            slots.iter().map(|(sid, _, _)| self.sids.iter().position(|s| s == sid)).collect();
        let mut dead = vec![];
        for (id, e) in self.entries.iter_mut().enumerate() {
            if let Some(e) = e {
                let mut old: Vec<Option<State>> = std::mem::take(&mut e.states);
                e.states = map.iter().map(|m| m.and_then(|i| old[i].take())).collect();
                if e.states.iter().all(|s| s.is_none()) {
                    dead.push(id as u32);
                }
            }
        }
        for id in dead {
            self.remove(id);
        }
        self.sids = slots.iter().map(|s| s.0.clone()).collect();
        self.kinds = slots.iter().map(|s| s.1).collect();
        self.inputs = slots.iter().map(|s| s.2).collect();
    }

    /// Entries ordered by their canonical key bytes: (key bytes, entry).
    fn sorted(&self, py: Python<'_>, strings: &Interner) -> Vec<(Vec<u8>, &Entry)> {
        let mut out: Vec<(Vec<u8>, &Entry)> = self
            .entries
            .iter()
            .flatten()
            .map(|e| {
                let mut o = Out::default();
                o.u32(e.key.len() as u32);
                for v in &e.key {
                    o.val(py, v, strings);
                }
                (o.buf, e)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every entry (`digest`: only entries holding a non-empty state, for the logical digest).
    pub fn write(&self, py: Python<'_>, out: &mut Out, strings: &Interner, digest: bool) {
        out.u32(self.sids.len() as u32);
        for s in &self.sids {
            out.bytes(s.as_bytes());
        }
        let entries = self.sorted(py, strings);
        let kept: Vec<_> = entries
            .into_iter()
            .filter(|(_, e)| !digest || e.states.iter().flatten().any(|s| !s.empty()))
            .collect();
        out.u32(kept.len() as u32);
        for (k, e) in kept {
            out.buf.extend_from_slice(&k);
            for s in &e.states {
                match s {
                    Some(s) if !(digest && s.empty()) => {
                        out.u8(1);
                        s.write(py, out, strings);
                    }
                    _ => out.u8(0),
                }
            }
        }
    }

    /// Read entries written by `write` into this table, mapping slots by sid.
    pub fn read(&mut self, py: Python<'_>, inp: &mut In<'_>, strings: &mut Interner) -> PyResult<()> {
        let n = inp.u32()? as usize;
        let mut sids = Vec::with_capacity(n);
        for _ in 0..n {
            sids.push(String::from_utf8_lossy(inp.bytes()?).to_string());
        }
        let map: Vec<Option<usize>> = sids.iter().map(|s| self.sids.iter().position(|x| x == s)).collect();
        let k = inp.u32()?;
        for _ in 0..k {
            let kl = inp.u32()? as usize;
            let mut key = Vec::with_capacity(kl);
            for _ in 0..kl {
                key.push(inp.val(py, strings)?);
            }
            let id = self.find_or_insert(&key);
            for slot in map.iter() {
                let st = if inp.u8()? == 1 { Some(State::read(py, inp, strings)?) } else { None };
                if let (Some(i), Some(st)) = (slot, st) {
                    self.entry_mut(id).states[*i] = Some(st);
                }
            }
        }
        Ok(())
    }
}
