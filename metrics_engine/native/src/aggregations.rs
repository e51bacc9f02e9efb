//! Aggregation states as monoids with an inverse: `lift` turns a value into what the state
//! adds, `combine` adds it (an event enters the window), `inverse` takes it back out (the
//! event leaves; windows are FIFO, so removals come in insertion order), `lower` finalizes.
//!
//! - `Count`: n and the time of the latest event (COUNT, TIME_SINCE_LAST).
//! - `Moments`: exact power sums (SUM, AVG, VARIANCE, STDDEV, SKEWNESS) in i128, falling back
//!   to arbitrary precision on overflow. Floats are exact integers scaled by the finest power
//!   of two in the window, so sums never drift; results are rounded once, exactly as Python's
//!   `int / int` rounds (see num.rs), so values are bit-identical to the Python engine's.
//! - `Extreme`: a monotonic deque of (position, value) for MIN/MAX, O(1) amortised.
//! - `Distinct`: value -> multiplicity; `Fifo`: values in order (OLDEST); `Recent`; `Ratio`.

use std::collections::VecDeque;

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use num_bigint::BigInt;

use crate::num::{div, div_square_by_cube, Num};
use crate::value::{to_py, In, Interner, Out, Val};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Count,
    Moments(u8),
    Extreme(i8),
    Distinct,
    Fifo,
    Recent,
    Ratio,
}

impl Kind {
    pub fn parse(kind: &str, arg: i64) -> PyResult<Kind> {
        Ok(match kind {
            "count" => Kind::Count,
            "moments" => Kind::Moments(arg as u8),
            "extreme" => Kind::Extreme(arg as i8),
            "distinct" => Kind::Distinct,
            "fifo" => Kind::Fifo,
            "recent" => Kind::Recent,
            "ratio" => Kind::Ratio,
            _ => return Err(pyo3::exceptions::PyValueError::new_err(format!("state {kind}"))),
        })
    }
}

impl Kind {
    /// Whether a new state of this kind allocates when its first value comes: a distinct
    /// set, a queue (OLDEST, MIN/MAX), power sums past the first (VARIANCE, STDDEV,
    /// SKEWNESS). A lazy key space (lazy.rs) makes such states only for keys that turn eager.
    pub fn allocates(&self) -> bool {
        match self {
            Kind::Moments(order) => *order > 1,
            Kind::Extreme(_) | Kind::Distinct | Kind::Fifo => true,
            Kind::Count | Kind::Recent | Kind::Ratio => false,
        }
    }

    /// Whether a state of this kind leaves value `v` out (adding it changes nothing).
    pub fn skips(&self, v: &Val) -> bool {
        match self {
            Kind::Moments(_) | Kind::Extreme(_) => !v.is_numeric(),
            Kind::Count | Kind::Distinct | Kind::Fifo | Kind::Recent => v.is_null(),
            Kind::Ratio => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Func {
    Count,
    TimeSinceLast,
    Sum,
    Avg,
    VarSamp,
    VarPop,
    StddevSamp,
    StddevPop,
    Skewness,
    Min,
    Max,
    CountDistinct,
    Oldest,
    Recent,
    Ratio,
}

impl Func {
    pub fn parse(f: &str) -> PyResult<Func> {
        Ok(match f {
            "count" => Func::Count,
            "time_since_last" => Func::TimeSinceLast,
            "sum" => Func::Sum,
            "avg" => Func::Avg,
            "var_samp" => Func::VarSamp,
            "var_pop" => Func::VarPop,
            "stddev_samp" => Func::StddevSamp,
            "stddev_pop" => Func::StddevPop,
            "skewness" => Func::Skewness,
            "min" => Func::Min,
            "max" => Func::Max,
            "count_distinct" => Func::CountDistinct,
            "oldest" => Func::Oldest,
            "recent" => Func::Recent,
            "ratio" => Func::Ratio,
            _ => return Err(pyo3::exceptions::PyValueError::new_err(format!("function {f}"))),
        })
    }
}

/// Exact power sums of a window. The sum lies inline as an i128 (with the count), so a
/// sliding window's SUM/AVG state is part of its key's record (keyed.rs) with no pointer to
/// chase per event, and a state stays 48 bytes: a record holds a state per window and slot,
/// so every byte counts for how much of it the caches hold. What only some windows need
/// lives in `ext`, made on first use and kept while the state is reused: the squares and
/// cubes (VARIANCE, STDDEV, SKEWNESS), the exponents of floats in the window, and the sums
/// in arbitrary precision after an overflow of i128 (until they fit again).
#[derive(Clone, Debug)]
pub struct Moments {
    s0: i128, // the sum while `ext.big` is none
    n: i64,
    f: u32,
    order: u8,
    ext: Option<Box<Ext>>,
}

#[derive(Clone, Debug, Default)]
struct Ext {
    s: [i128; 2],        // the sums of squares and cubes while `big` is none
    fx: Vec<(u32, i64)>, // floats in the window by binary exponent, sorted
    // Boxed: rare, and inline it would triple the size of every state's `Ext` (W2 keeps one
    // per window, bucket and key).
    big: Option<Box<[BigInt; 3]>>,
}

#[derive(Clone, Debug)]
pub enum State {
    Count { n: i64, last_ts: Option<i64> },
    // Inline (see Moments): a sliding window's sums are read and written with its other
    // states, without a cache miss of their own per event.
    Moments(Moments),
    Extreme { sign: i8, q: VecDeque<(u64, Val)> },
    Distinct(FxHashMap<Val, u32>),
    Fifo(VecDeque<(u64, Val)>),
    Recent { n: i64, last: Val },
    Ratio { n: i64, hits: i64 },
}

/// `v = num * 2**-k` exactly, with `num` an integer (Python's float.as_integer_ratio).
fn float_ratio(v: f64) -> (Num, u32) {
    if v == 0.0 {
        return (Num::ZERO, 0);
    }
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (mut m, mut e) = if exp == 0 { (frac, -1074) } else { (frac | (1u64 << 52), exp - 1075) };
    let tz = m.trailing_zeros();
    m >>= tz;
    e += tz as i64;
    let signed = if v < 0.0 { -(m as i128) } else { m as i128 };
    if e >= 0 {
        (Num::S(signed).shl(e as u32), 0)
    } else {
        (Num::S(signed), (-e) as u32)
    }
}

impl Moments {
    fn new(order: u8) -> Moments {
        Moments { s0: 0, n: 0, f: 0, order, ext: None }
    }

    fn ext_mut(&mut self) -> &mut Ext {
        self.ext.get_or_insert_with(Default::default)
    }

    /// Floats in the window by binary exponent.
    fn fx(&self) -> &[(u32, i64)] {
        self.ext.as_ref().map_or(&[], |e| &e.fx)
    }

    /// The three sums as exact integers.
    fn sums(&self) -> [Num; 3] {
        match &self.ext {
            None => [Num::S(self.s0), Num::ZERO, Num::ZERO],
            Some(e) => match &e.big {
                None => [Num::S(self.s0), Num::S(e.s[0]), Num::S(e.s[1])],
                Some(b) => [Num::norm(b[0].clone()), Num::norm(b[1].clone()),
                            Num::norm(b[2].clone())],
            },
        }
    }

    /// Set the sums: inline if all three fit in i128, else in arbitrary precision.
    fn set_sums(&mut self, v: [Num; 3]) {
        if let [Num::S(a), Num::S(b), Num::S(c)] = v {
            self.s0 = a;
            if b != 0 || c != 0 || self.ext.is_some() {
                let e = self.ext_mut();
                e.s = [b, c];
                e.big = None;
            }
        } else {
            self.s0 = 0;
            let [a, b, c] = v;
            let e = self.ext_mut();
            e.s = [0; 2];
            e.big = Some(Box::new([a.big(), b.big(), c.big()]));
        }
    }

    /// Whether the sums are held in arbitrary precision (a debug probe for tests).
    pub fn is_big(&self) -> bool {
        self.ext.as_ref().is_some_and(|e| e.big.is_some())
    }

    fn rescale(&mut self, f: u32) {
        let [a, b, c] = self.sums();
        if f > self.f {
            let d = f - self.f;
            self.set_sums([a.shl(d), b.shl(2 * d), c.shl(3 * d)]);
        } else if f < self.f {
            let d = self.f - f;
            self.set_sums([a.shr(d), b.shr(2 * d), c.shr(3 * d)]);
        }
        self.f = f;
    }

    /// Count `delta` floats of exponent `k` in (or out of) the window.
    fn count_float(&mut self, k: u32, delta: i64) {
        let fx = &mut self.ext_mut().fx;
        match fx.binary_search_by_key(&k, |p| p.0) {
            Ok(i) => {
                fx[i].1 += delta;
                if fx[i].1 == 0 {
                    fx.remove(i);
                }
            }
            Err(i) => fx.insert(i, (k, delta)),
        }
    }

    /// The exact scaled integer of `v` (None if not a finite number); counts floats.
    fn lift(&mut self, v: &Val, delta: i64) -> Option<Num> {
        match v {
            Val::Int(i) if self.f == 0 => Some(Num::S(*i)),
            Val::Int(i) => Some(Num::S(*i).shl(self.f)),
            Val::Bool(b) => Some(Num::S(*b as i128).shl(self.f)),
            Val::Float(x) if x.is_finite() => {
                let (num, k) = float_ratio(*x);
                self.count_float(k, delta);
                if k > self.f {
                    self.rescale(k);
                }
                Some(num.shl(self.f - k))
            }
            _ => None,
        }
    }

    /// The inline path: `x` added to (`sign` 1) or taken from (-1) the i128 sums; false,
    /// changing nothing, if a power or a sum would overflow (or the sums are big already).
    fn combine_small(&mut self, x: i128, sign: i64) -> bool {
        let apply = |a: i128, b: i128| if sign > 0 { a.checked_add(b) } else { a.checked_sub(b) };
        if self.is_big() {
            return false;
        }
        let Some(s0) = apply(self.s0, x) else { return false };
        if self.order > 1 {
            let order = self.order;
            let e = self.ext_mut();
            let Some(xx) = x.checked_mul(x) else { return false };
            let Some(s1) = apply(e.s[0], xx) else { return false };
            let mut s2 = e.s[1];
            if order > 2 {
                let Some(v) = xx.checked_mul(x).and_then(|xxx| apply(s2, xxx)) else { return false };
                s2 = v;
            }
            e.s = [s1, s2];
        }
        self.s0 = s0;
        true
    }

    fn combine(&mut self, x: &Num, sign: i64) {
        self.n += sign;
        if let Num::S(v) = x {
            if self.combine_small(*v, sign) {
                return;
            }
        }
        let apply = |a: &Num, b: &Num| if sign > 0 { a.add(b) } else { a.sub(b) };
        let [mut s0, mut s1, mut s2] = self.sums();
        s0 = apply(&s0, x);
        if self.order > 1 {
            let xx = x.mul(x);
            s1 = apply(&s1, &xx);
            if self.order > 2 {
                s2 = apply(&s2, &xx.mul(x));
            }
        }
        self.set_sums([s0, s1, s2]);
    }

    fn add(&mut self, v: &Val) {
        if let Some(x) = self.lift(v, 1) {
            self.combine(&x, 1);
        }
    }

    /// Add (`sign` 1) or take back (-1) a whole bucket's partial sums: both are brought to
    /// the finer scale first, so the result is the same exact sums as event by event.
    fn merge(&mut self, o: &Moments, sign: i64) {
        let f = self.f.max(o.f);
        if f > self.f {
            self.rescale(f);
        }
        let d = f - o.f;
        let mut done = false;
        if d == 0 && !self.is_big() && !o.is_big() {
            // The inline path: both sums are i128 at one scale.
            let apply = |a: i128, b: i128| if sign > 0 { a.checked_add(b) } else { a.checked_sub(b) };
            let (a, ob) = (self.ext.as_ref().map_or([0; 2], |e| e.s), o.ext.as_ref().map_or([0; 2], |e| e.s));
            if let (Some(x), Some(y), Some(z)) =
                (apply(self.s0, o.s0), apply(a[0], ob[0]), apply(a[1], ob[1])) {
                self.s0 = x;
                if y != 0 || z != 0 || self.ext.is_some() {
                    self.ext_mut().s = [y, z];
                }
                done = true;
            }
        }
        if !done {
            let [o0, o1, o2] = o.sums();
            let x = [o0.shl(d), o1.shl(2 * d), o2.shl(3 * d)];
            let mut s = self.sums();
            for (s, x) in s.iter_mut().zip(&x) {
                *s = if sign > 0 { s.add(x) } else { s.sub(x) };
            }
            self.set_sums(s);
        }
        self.n += sign * o.n;
        for &(k, c) in o.fx() {
            self.count_float(k, sign * c);
        }
        if sign < 0 && self.f > 0 {
            let f = self.fx().last().map(|p| p.0).unwrap_or(0);
            if f < self.f {
                self.rescale(f);
            }
        }
    }

    fn remove(&mut self, v: &Val) {
        if let Some(x) = self.lift(v, -1) {
            self.combine(&x, -1);
            if self.f > 0 {
                let f = self.fx().last().map(|p| p.0).unwrap_or(0);
                if f < self.f {
                    self.rescale(f); // the finest float left: a coarser scale, still exact
                }
            }
        }
    }
}

impl State {
    pub fn new(kind: Kind) -> State {
        match kind {
            Kind::Count => State::Count { n: 0, last_ts: None },
            Kind::Moments(o) => State::Moments(Moments::new(o)),
            Kind::Extreme(sign) => State::Extreme { sign, q: VecDeque::new() },
            Kind::Distinct => State::Distinct(FxHashMap::default()),
            Kind::Fifo => State::Fifo(VecDeque::new()),
            Kind::Recent => State::Recent { n: 0, last: Val::Null },
            Kind::Ratio => State::Ratio { n: 0, hits: 0 },
        }
    }

    /// An event enters the window.
    pub fn add(&mut self, v: &Val, ts: i64, pos: u64) {
        match self {
            State::Count { n, last_ts } => {
                if !v.is_null() {
                    *n += 1;
                    *last_ts = Some(ts);
                }
            }
            State::Moments(m) => m.add(v),
            State::Extreme { sign, q } => {
                if !v.is_numeric() {
                    return;
                }
                let worse = if *sign == 1 { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Less };
                while q.back().is_some_and(|b| b.1.num_cmp(v) == worse) {
                    q.pop_back();
                }
                q.push_back((pos, *v));
            }
            State::Distinct(c) => {
                if !v.is_null() {
                    *c.entry(*v).or_insert(0) += 1;
                }
            }
            State::Fifo(q) => {
                if !v.is_null() {
                    q.push_back((pos, *v));
                }
            }
            State::Recent { n, last } => {
                if !v.is_null() {
                    *n += 1;
                    *last = *v;
                }
            }
            State::Ratio { n, hits } => {
                *n += 1;
                if matches!(v, Val::Bool(true)) {
                    *hits += 1;
                }
            }
        }
    }

    /// The event at `pos` leaves the window (the value it was added with).
    pub fn remove(&mut self, v: &Val, _ts: i64, pos: u64) {
        match self {
            State::Count { n, last_ts } => {
                if !v.is_null() {
                    *n -= 1;
                    if *n == 0 {
                        *last_ts = None;
                    }
                }
            }
            State::Moments(m) => m.remove(v),
            State::Extreme { q, .. } => {
                if q.front().is_some_and(|f| f.0 == pos) {
                    q.pop_front();
                }
            }
            State::Distinct(c) => {
                if !v.is_null() {
                    if let Some(k) = c.get_mut(v) {
                        *k -= 1;
                        if *k == 0 {
                            c.remove(v);
                        }
                    }
                }
            }
            State::Fifo(q) => {
                if !v.is_null() {
                    q.pop_front();
                }
            }
            State::Recent { n, last } => {
                if !v.is_null() {
                    *n -= 1;
                    if *n == 0 {
                        *last = Val::Null;
                    }
                }
            }
            State::Ratio { n, hits } => {
                *n -= 1;
                if matches!(v, Val::Bool(true)) {
                    *hits -= 1;
                }
            }
        }
    }

    /// An event joins a calendar bucket's partial: as `add`, except that OLDEST keeps only
    /// the bucket's first value and MIN/MAX only its best (the earliest of equals, as the
    /// monotonic deque keeps it), so a closed bucket costs O(1) memory for them.
    pub fn add_partial(&mut self, v: &Val, ts: i64, pos: u64) {
        match self {
            State::Fifo(q) => {
                if q.is_empty() && !v.is_null() {
                    q.reserve_exact(1); // one value per bucket: no room for four
                    q.push_back((pos, *v));
                }
            }
            State::Extreme { sign, q } => {
                if !v.is_numeric() {
                    return;
                }
                let worse = if *sign == 1 { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Less };
                if q.front().is_none_or(|b| b.1.num_cmp(v) == worse) {
                    q.clear();
                    q.push_back((pos, *v));
                }
            }
            _ => self.add(v, ts, pos),
        }
    }

    /// A closed bucket's partial `part` enters (`sign` 1) or leaves (-1) the window state.
    /// Buckets enter and leave in order, so MIN/MAX, OLDEST and RECENT treat each bucket as
    /// one event at position `bucket` carrying the bucket's best, first or last value.
    pub fn absorb(&mut self, part: &State, bucket: i64, sign: i64) {
        let pos = bucket as u64;
        match (self, part) {
            (State::Count { n, last_ts }, State::Count { n: nb, last_ts: lb }) => {
                *n += sign * nb;
                if sign > 0 && *nb > 0 {
                    *last_ts = *lb;
                } else if *n == 0 {
                    *last_ts = None;
                }
            }
            (State::Moments(m), State::Moments(o)) => m.merge(o, sign),
            (me @ State::Extreme { .. }, State::Extreme { q, .. })
            | (me @ State::Fifo(_), State::Fifo(q)) => {
                if let Some((_, v)) = q.front() {
                    if sign > 0 { me.add(v, 0, pos) } else { me.remove(v, 0, pos) }
                }
            }
            (State::Distinct(c), State::Distinct(o)) => {
                for v in o.keys() {
                    if sign > 0 {
                        *c.entry(*v).or_insert(0) += 1;
                    } else if let Some(k) = c.get_mut(v) {
                        *k -= 1;
                        if *k == 0 {
                            c.remove(v);
                        }
                    }
                }
            }
            (me @ State::Recent { .. }, State::Recent { n: nb, last }) if *nb > 0 => {
                if sign > 0 { me.add(last, 0, pos) } else { me.remove(last, 0, pos) }
            }
            (State::Ratio { n, hits }, State::Ratio { n: nb, hits: hb }) => {
                *n += sign * nb;
                *hits += sign * hb;
            }
            _ => {}
        }
    }

    /// Back to the empty state of its kind, keeping small allocations for reuse (a bucket
    /// that opens takes the states of one that left; see keyed.rs `Spare`).
    pub fn clear(&mut self) {
        const KEEP: usize = 8; // larger buffers go: a spare state must stay small
        match self {
            State::Count { n, last_ts } => {
                *n = 0;
                *last_ts = None;
            }
            State::Moments(m) => {
                m.n = 0;
                m.f = 0;
                m.s0 = 0;
                if let Some(e) = m.ext.as_mut() {
                    e.s = [0; 2];
                    e.fx.clear();
                    e.fx.shrink_to(KEEP);
                    e.big = None;
                }
            }
            State::Extreme { q, .. } | State::Fifo(q) => {
                q.clear();
                q.shrink_to(KEEP);
            }
            State::Distinct(c) => {
                c.clear();
                c.shrink_to(KEEP);
            }
            State::Recent { n, last } => {
                *n = 0;
                *last = Val::Null;
            }
            State::Ratio { n, hits } => {
                *n = 0;
                *hits = 0;
            }
        }
    }

    /// Whether the state holds power sums that overflowed i128 (see Moments).
    pub fn is_big(&self) -> bool {
        matches!(self, State::Moments(m) if m.is_big())
    }

    pub fn empty(&self) -> bool {
        match self {
            State::Count { n, .. } | State::Recent { n, .. } | State::Ratio { n, .. } => *n == 0,
            State::Moments(m) => m.n == 0,
            State::Extreme { q, .. } | State::Fifo(q) => q.is_empty(),
            State::Distinct(c) => c.is_empty(),
        }
    }

    /// Rewrite the event positions the state holds (MIN/MAX, OLDEST) through `map`: position
    /// `p` becomes `map[p]`. Err(p) when `map` has no entry for `p`.
    pub fn renumber(&mut self, map: &[u64]) -> Result<(), u64> {
        if let State::Extreme { q, .. } | State::Fifo(q) = self {
            for (p, _) in q.iter_mut() {
                *p = *map.get(*p as usize).ok_or(*p)?;
            }
        }
        Ok(())
    }

    // -- bytes (snapshots and digests; deterministic) ----------------------------------------
    pub fn write(&self, out: &mut Out, strings: &Interner) {
        match self {
            State::Count { n, last_ts } => {
                out.u8(0);
                out.i64(*n);
                out.i64(last_ts.unwrap_or(i64::MIN));
            }
            State::Moments(m) => {
                out.u8(1);
                out.u8(m.order);
                out.i64(m.n);
                out.u32(m.f);
                out.u32(m.fx().len() as u32);
                for (k, c) in m.fx() {
                    out.u32(*k);
                    out.i64(*c);
                }
                for s in &m.sums() {
                    out.bytes(&s.to_bytes()); // canonical: the same bytes inline or big
                }
            }
            State::Extreme { sign, q } => {
                out.u8(2);
                out.u8(*sign as u8);
                out.u32(q.len() as u32);
                for (p, v) in q {
                    out.u64(*p);
                    out.val(v, strings);
                }
            }
            State::Distinct(c) => {
                out.u8(3);
                let mut items: Vec<(Vec<u8>, u32)> = c
                    .iter()
                    .map(|(v, k)| {
                        let mut o = Out::default();
                        o.val(v, strings);
                        (o.buf, *k)
                    })
                    .collect();
                items.sort();
                out.u32(items.len() as u32);
                for (b, k) in items {
                    out.buf.extend_from_slice(&b);
                    out.u32(k);
                }
            }
            State::Fifo(q) => {
                out.u8(4);
                out.u32(q.len() as u32);
                for (p, v) in q {
                    out.u64(*p);
                    out.val(v, strings);
                }
            }
            State::Recent { n, last } => {
                out.u8(5);
                out.i64(*n);
                out.val(last, strings);
            }
            State::Ratio { n, hits } => {
                out.u8(6);
                out.i64(*n);
                out.i64(*hits);
            }
        }
    }

    pub fn read(py: Python<'_>, inp: &mut In<'_>, strings: &mut Interner) -> PyResult<State> {
        Ok(match inp.u8()? {
            0 => {
                let n = inp.i64()?;
                let t = inp.i64()?;
                State::Count { n, last_ts: if t == i64::MIN { None } else { Some(t) } }
            }
            1 => {
                let order = inp.u8()?;
                let n = inp.i64()?;
                let f = inp.u32()?;
                let k = inp.u32()?;
                let mut fx = Vec::with_capacity(k as usize);
                for _ in 0..k {
                    fx.push((inp.u32()?, inp.i64()?));
                }
                let s = [Num::from_bytes(inp.bytes()?), Num::from_bytes(inp.bytes()?),
                         Num::from_bytes(inp.bytes()?)];
                let mut m = Moments { s0: 0, n, f, order, ext: None };
                if !fx.is_empty() {
                    m.ext_mut().fx = fx;
                }
                m.set_sums(s);
                State::Moments(m)
            }
            2 => {
                let sign = inp.u8()? as i8;
                let k = inp.u32()?;
                let mut q = VecDeque::with_capacity(k as usize);
                for _ in 0..k {
                    q.push_back((inp.u64()?, inp.val(py, strings)?));
                }
                State::Extreme { sign, q }
            }
            3 => {
                let k = inp.u32()?;
                let mut c = FxHashMap::default();
                for _ in 0..k {
                    let v = inp.val(py, strings)?;
                    c.insert(v, inp.u32()?);
                }
                State::Distinct(c)
            }
            4 => {
                let k = inp.u32()?;
                let mut q = VecDeque::with_capacity(k as usize);
                for _ in 0..k {
                    q.push_back((inp.u64()?, inp.val(py, strings)?));
                }
                State::Fifo(q)
            }
            5 => {
                let n = inp.i64()?;
                State::Recent { n, last: inp.val(py, strings)? }
            }
            6 => State::Ratio { n: inp.i64()?, hits: inp.i64()? },
            t => return Err(pyo3::exceptions::PyValueError::new_err(format!("state tag {t}"))),
        })
    }
}

fn num_to_py(py: Python<'_>, n: &Num) -> PyObject {
    match n {
        // Most sums fit 64 bits: a plain C long, not a conversion from 16 bytes.
        Num::S(v) if i64::try_from(*v).is_ok() => {
            (*v as i64).into_pyobject(py).map(|o| o.into_any().unbind()).unwrap_or(py.None())
        }
        Num::S(v) => v.into_pyobject(py).map(|o| o.into_any().unbind()).unwrap_or(py.None()),
        Num::B(b) => b.into_pyobject(py).map(|o| o.into_any().unbind()).unwrap_or(py.None()),
    }
}

fn float(py: Python<'_>, v: f64) -> PyObject {
    pyo3::types::PyFloat::new(py, v).into_any().unbind()
}

fn var(m: &Moments, ddof: i64) -> Option<f64> {
    if m.n <= ddof {
        return None;
    }
    let n = Num::S(m.n as i128);
    let s = m.sums();
    let num = n.mul(&s[1]).sub(&s[0].mul(&s[0])); // exact, >= 0
    let den = Num::S((m.n as i128) * ((m.n - ddof) as i128)).shl(2 * m.f);
    Some(div(&num, &den))
}

fn skewness(m: &Moments) -> Option<f64> {
    if m.n == 0 {
        return None;
    }
    let n = Num::S(m.n as i128);
    let s = m.sums();
    let (s1, s2, s3) = (&s[0], &s[1], &s[2]);
    let b = n.mul(s2).sub(&s1.mul(s1));
    if b.is_zero() {
        return None;
    }
    let a = n.mul(&n).mul(s3).sub(&Num::S(3).mul(&n).mul(s1).mul(s2))
        .add(&Num::S(2).mul(s1).mul(s1).mul(s1));
    let g = div_square_by_cube(&a, &b).sqrt(); // exact ratio, rounded once
    Some(if a.is_negative() { -g } else { g })
}

/// The value of `func` for a state (None: the key has no state) at time `ts`.
/// A value `lower` always makes a float or an int of (or None), made natively: a batch
/// answers these functions as Arrow buffers, with no Python object per value.
#[derive(Clone, Copy)]
pub enum Typed {
    F(Option<f64>),
    I(Option<i64>),
}

/// `lower`'s value of `func` as `Typed`, for the functions whose value is always a float
/// (AVG, variances, deviations, SKEWNESS, RATIO) or an int (COUNT, COUNT DISTINCT,
/// TIME_SINCE_LAST); None for the others (their value's type follows the field's). The same
/// values as `lower`, bit for bit.
pub fn lower_typed(func: Func, st: Option<&State>, ts: i64) -> Option<Typed> {
    use Typed::{F, I};
    let m = match st {
        Some(State::Moments(m)) => Some(m),
        _ => None,
    };
    Some(match func {
        Func::Count => I(match st {
            None => Some(0),
            Some(State::Count { n, .. }) => Some(*n),
            _ => None,
        }),
        Func::CountDistinct => I(match st {
            None => Some(0),
            Some(State::Distinct(c)) => Some(c.len() as i64),
            _ => None,
        }),
        Func::TimeSinceLast => I(match st {
            Some(State::Count { last_ts: Some(t), .. }) => Some(ts - t),
            _ => None,
        }),
        Func::Avg => F(m.filter(|m| m.n != 0)
            .map(|m| div(&m.sums()[0], &Num::S(m.n as i128).shl(m.f)))),
        Func::VarSamp => F(m.and_then(|m| var(m, 1))),
        Func::VarPop => F(m.and_then(|m| var(m, 0))),
        Func::StddevSamp => F(m.and_then(|m| var(m, 1)).map(f64::sqrt)),
        Func::StddevPop => F(m.and_then(|m| var(m, 0)).map(f64::sqrt)),
        Func::Skewness => F(m.and_then(skewness)),
        Func::Ratio => F(match st {
            Some(State::Ratio { n, hits }) if *n != 0 => {
                Some(div(&Num::S(*hits as i128), &Num::S(*n as i128)))
            }
            _ => None,
        }),
        Func::Sum | Func::Min | Func::Max | Func::Oldest | Func::Recent => return None,
    })
}

/// `lower`'s value of SUM, MIN, MAX, OLDEST and RECENT as the scalar it makes the Python
/// object of (`Val::Null`: None): `Some` for these functions, except a sum held in arbitrary
/// precision (its object is made by `lower`); None for the others.
pub fn lower_scalar(func: Func, st: Option<&State>) -> Option<Val> {
    match (func, st) {
        (Func::Sum, Some(State::Moments(m))) => {
            if m.n == 0 {
                Some(Val::Null)
            } else if !m.fx().is_empty() {
                Some(Val::Float(div(&m.sums()[0], &Num::S(1).shl(m.f))))
            } else if m.is_big() {
                None
            } else {
                Some(Val::Int(m.s0))
            }
        }
        (Func::Min | Func::Max, Some(State::Extreme { q, .. })) | (Func::Oldest, Some(State::Fifo(q))) => {
            Some(q.front().map_or(Val::Null, |(_, v)| *v))
        }
        (Func::Recent, Some(State::Recent { last, .. })) => Some(*last),
        (Func::Sum | Func::Min | Func::Max | Func::Oldest | Func::Recent, _) => Some(Val::Null),
        _ => None,
    }
}

pub fn lower(py: Python<'_>, func: Func, st: Option<&State>, ts: i64, strings: &Interner) -> PyObject {
    let none = || py.None();
    match (func, st) {
        (Func::Count, None) | (Func::CountDistinct, None) => 0i64.into_pyobject(py).unwrap().into_any().unbind(),
        (_, None) => none(),
        (Func::Count, Some(State::Count { n, .. })) => n.into_pyobject(py).unwrap().into_any().unbind(),
        (Func::TimeSinceLast, Some(State::Count { last_ts, .. })) => match last_ts {
            Some(t) => (ts - t).into_pyobject(py).unwrap().into_any().unbind(),
            None => none(),
        },
        (Func::Sum, Some(State::Moments(m))) => {
            if m.n == 0 {
                none()
            } else if !m.fx().is_empty() {
                float(py, div(&m.sums()[0], &Num::S(1).shl(m.f))) // a float in the window: a float sum
            } else {
                if m.is_big() { num_to_py(py, &m.sums()[0]) } else { num_to_py(py, &Num::S(m.s0)) }
            }
        }
        (Func::Avg, Some(State::Moments(m))) => {
            if m.n == 0 {
                none()
            } else {
                float(py, div(&m.sums()[0], &Num::S(m.n as i128).shl(m.f)))
            }
        }
        (Func::VarSamp, Some(State::Moments(m))) => var(m, 1).map_or_else(none, |v| float(py, v)),
        (Func::VarPop, Some(State::Moments(m))) => var(m, 0).map_or_else(none, |v| float(py, v)),
        (Func::StddevSamp, Some(State::Moments(m))) => var(m, 1).map_or_else(none, |v| float(py, v.sqrt())),
        (Func::StddevPop, Some(State::Moments(m))) => var(m, 0).map_or_else(none, |v| float(py, v.sqrt())),
        (Func::Skewness, Some(State::Moments(m))) => skewness(m).map_or_else(none, |v| float(py, v)),
        (Func::Min | Func::Max, Some(State::Extreme { q, .. })) => {
            q.front().map_or_else(none, |(_, v)| to_py(py, v, strings))
        }
        (Func::CountDistinct, Some(State::Distinct(c))) => c.len().into_pyobject(py).unwrap().into_any().unbind(),
        (Func::Oldest, Some(State::Fifo(q))) => q.front().map_or_else(none, |(_, v)| to_py(py, v, strings)),
        (Func::Recent, Some(State::Recent { last, .. })) => to_py(py, last, strings),
        (Func::Ratio, Some(State::Ratio { n, hits })) => {
            if *n == 0 {
                none()
            } else {
                float(py, div(&Num::S(*hits as i128), &Num::S(*n as i128)))
            }
        }
        _ => none(),
    }
}


