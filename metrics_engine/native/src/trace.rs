//! Where a slow `ingest` call spent its time: the call's sections timed one after another,
//! kept only for calls slower than a threshold (the `--tail` benchmark's attribution of the
//! events over P3's 20 µs). Off by default: each section's clock read costs ~20 ns.

use std::time::Instant;

/// The sections of one `ingest` call, in order (plan.rs marks the end of each).
pub const SECTIONS: [&str; 6] = ["lower", "trim", "append", "cursors", "sweep", "outputs"];
/// Slow calls kept at most (the oldest are dropped first).
const SLOW_MAX: usize = 100_000;

#[derive(Default)]
pub struct Trace {
    /// Keep calls at least this slow (ns); 0: off.
    pub threshold_ns: u64,
    active: bool,
    start: Option<Instant>,
    last: Option<Instant>,
    ns: [u64; SECTIONS.len()],
    pub slow: std::collections::VecDeque<(u64, [u64; SECTIONS.len()])>,
}

impl Trace {
    /// A call begins (times nothing when off).
    #[inline]
    pub fn begin(&mut self) {
        self.active = self.threshold_ns > 0;
        if self.active {
            let now = Instant::now();
            (self.start, self.last, self.ns) = (Some(now), Some(now), [0; SECTIONS.len()]);
        }
    }

    /// Section `s` of the call ends now.
    #[inline]
    pub fn mark(&mut self, s: usize) {
        if self.active {
            let now = Instant::now();
            if let Some(last) = self.last {
                self.ns[s] += (now - last).as_nanos() as u64;
            }
            self.last = Some(now);
        }
    }

    /// The call ends: kept if it was slow.
    #[inline]
    pub fn end(&mut self) {
        if !self.active {
            return;
        }
        self.active = false;
        let total = self.start.map_or(0, |s| s.elapsed().as_nanos() as u64);
        if total >= self.threshold_ns {
            if self.slow.len() >= SLOW_MAX {
                self.slow.pop_front();
            }
            self.slow.push_back((total, self.ns));
        }
    }
}
