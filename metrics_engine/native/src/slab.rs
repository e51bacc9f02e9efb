//! A key space's record slab (keyed.rs `KeySpace`): `stride` states per key id, in segments
//! that never move. Segment 0 holds `first` ids and segment j >= 1 holds `first << (j - 1)`,
//! so a slab of n ids has O(log n) segments, finds a record with a shift and a leading-zero
//! count, and grows by adding a segment: the records already there are neither copied nor
//! moved. (A doubling vector copied the whole slab within one event: with W1's 120
//! misaligned windows a record is 15 KiB, and a few thousand keys made a copy of tens of
//! MiB, a latency spike of milliseconds, with every fresh page faulted in twice.)
//!
//! Callers index by (id, column, width) and must `grow` to an id before touching it.
//! Records are made in id order as `grow` reaches them (a segment's memory is reserved
//! whole, its pages touched record by record).

use crate::aggregations::State;

/// A slab state on a cache line of its own: a state is 64 bytes, and aligned it spans one
/// line, not two (a record's window is then two lines for SUM and COUNT, not three).
#[repr(C, align(64))]
pub struct Line(pub Option<State>);

// A slice of `Line`s is read as a slice of states (`Slab::states`): same size, no gaps.
const _: () = assert!(std::mem::size_of::<Line>() == std::mem::size_of::<Option<State>>());

/// Bytes of states segment 0 holds at most (then at least one record).
const FIRST_BYTES: usize = 64 << 10;

#[derive(Default)]
pub struct Slab {
    segs: Vec<Vec<Line>>,
    stride: usize,
    shift: u32, // segment 0 holds `1 << shift` ids
    ready: usize, // ids `0..ready` have their records made
}

impl Slab {
    pub fn new(stride: usize) -> Slab {
        let per = (FIRST_BYTES / (stride.max(1) * std::mem::size_of::<Line>())).max(1);
        Slab { segs: vec![], stride, shift: usize::BITS - 1 - per.leading_zeros(), ready: 0 }
    }

    /// Ids the segments made so far have room for (ids `0..capacity()`).
    pub fn capacity(&self) -> usize {
        match self.segs.len() {
            0 => 0,
            n => (1usize << self.shift) << (n - 1),
        }
    }

    /// Segments made so far (a debug counter for tests).
    pub fn segments(&self) -> usize {
        self.segs.len()
    }

    /// Ids whose records are made (a debug counter for tests).
    pub fn ready(&self) -> usize {
        self.ready
    }

    /// (segment, first id of that segment) of id `id`.
    #[inline]
    fn place(&self, id: usize) -> (usize, usize) {
        let q = id >> self.shift;
        if q == 0 {
            return (0, 0);
        }
        let seg = (usize::BITS - q.leading_zeros()) as usize; // 2^(seg-1) <= q < 2^seg
        (seg, (1usize << (seg - 1)) << self.shift)
    }

    /// The lines of id `id`'s record from column `col`, `w` of them (None past the slab).
    #[inline]
    fn lines(&self, id: usize, col: usize, w: usize) -> Option<&[Line]> {
        let (s, first) = self.place(id);
        let at = (id - first) * self.stride + col;
        self.segs.get(s)?.get(at..at + w)
    }

    #[inline]
    fn lines_mut(&mut self, id: usize, col: usize, w: usize) -> Option<&mut [Line]> {
        let (s, first) = self.place(id);
        let at = (id - first) * self.stride + col;
        self.segs.get_mut(s)?.get_mut(at..at + w)
    }

    /// The `w` states of id `id` from column `col`. Panics past the slab (grow first).
    #[inline]
    pub fn states(&self, id: usize, col: usize, w: usize) -> &[Option<State>] {
        let s = self.lines(id, col, w).expect("a record inside the slab");
        // SAFETY: `Line` is `repr(C)` around one `Option<State>` and of the same size
        // (asserted above), so `w` lines are `w` states laid out as a slice.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), w) }
    }

    #[inline]
    pub fn states_mut(&mut self, id: usize, col: usize, w: usize) -> &mut [Option<State>] {
        let s = self.lines_mut(id, col, w).expect("a record inside the slab");
        // SAFETY: as in `states`; the borrow of the lines is the borrow of the states.
        unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), w) }
    }

    /// The address of id `id`'s state at column `col`, if the slab holds it (for prefetching).
    #[inline]
    pub fn addr(&self, id: usize, col: usize) -> Option<*const Option<State>> {
        self.lines(id, col, 1).map(|l| (&l[0].0) as *const Option<State>)
    }

    /// State `col` of id `id`, taken out (None past the slab).
    pub fn take(&mut self, id: usize, col: usize) -> Option<State> {
        self.lines_mut(id, col, 1).and_then(|l| l[0].0.take())
    }

    /// Ids segment `s` holds.
    fn seg_ids(&self, s: usize) -> usize {
        match s {
            0 => 1usize << self.shift,
            _ => (1usize << self.shift) << (s - 1),
        }
    }

    /// Make room for ids up to `id`. A segment's memory is reserved whole when the ids reach
    /// it (asked for in huge pages before its pages are touched: records are visited at
    /// random, an eviction per window per event, and with 4 KiB pages each visit of a large
    /// slab also misses the TLB) but its records are made as the ids come, so the page
    /// faults are spread over the events that bring new keys: making a segment of tens of
    /// MiB at once stalled one event for as many milliseconds.
    #[inline]
    pub fn grow(&mut self, id: usize) {
        if id < self.ready {
            return;
        }
        while self.ready <= id {
            let (s, first) = self.place(self.ready);
            let n = self.seg_ids(s);
            if s == self.segs.len() {
                let v: Vec<Line> = Vec::with_capacity(n * self.stride);
                advise_huge(v.as_ptr().cast(), n * self.stride * std::mem::size_of::<Line>());
                self.segs.push(v);
            }
            let end = (first + n).min(id + 1);
            // Within the capacity reserved: the segment's records do not move.
            self.segs[s].resize_with((end - first) * self.stride, || Line(None));
            self.ready = end;
        }
    }

    /// Every state of the slab.
    pub fn iter(&self) -> impl Iterator<Item = &State> {
        self.segs.iter().flatten().filter_map(|l| l.0.as_ref())
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut State> {
        self.segs.iter_mut().flatten().filter_map(|l| l.0.as_mut())
    }
}

/// Ask the kernel to back the buffer at `p` (`bytes` long) with transparent huge pages (where
/// they are enabled on request: `madvise`). Only a hint: small buffers and failures are
/// ignored.
fn advise_huge(p: *const u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < 2 * HUGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = (p as usize).div_ceil(HUGE) * HUGE;
        let end = (p as usize + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies inside the caller's live allocation; MADV_HUGEPAGE changes
            // no contents, only how the pages are backed.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = p;
}
