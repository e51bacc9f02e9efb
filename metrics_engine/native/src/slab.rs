//! A key space's record slab (keyed.rs `KeySpace`): `stride` states per key id, one record
//! after another in one anonymous memory mapping. The mapping grows by `mremap` (the kernel
//! moves page tables: the records are not copied), and a record is made when its id first
//! needs it, so a growing slab faults its pages in over the events that bring new keys. (A
//! vector doubling copied the whole slab within one event: with W1's 120 misaligned windows
//! a record is 15 KiB, and a few thousand keys made a copy of tens of MiB, a stall of tens
//! of milliseconds, every fresh page faulted in twice.) One base address keeps a record's
//! place a multiplication away, as in a vector.
//!
//! A record is made (its states written) when its id first needs one, not every record below
//! it: with lazy eviction (lazy.rs) most ids are raw keys that never touch their record, so
//! the pages of theirs are never touched either. Such a slab is not backed by huge pages
//! (`set_sparse`): one eager key's record would fault in, and zero, 2 MiB around it.
//!
//! Callers index by (id, column, width) and must `grow` to an id before touching it; a
//! record's address may change when the slab grows (nothing holds one across a `grow`).

use crate::aggregations::State;

/// A slab state on a cache line of its own: a state is 64 bytes, and aligned it spans one
/// line, not two (a record's window is then two lines for SUM and COUNT, not three).
#[repr(C, align(64))]
pub struct Line(pub Option<State>);

// A slice of `Line`s is read as a slice of states (`Slab::states`): same size, no gaps.
const _: () = assert!(std::mem::size_of::<Line>() == std::mem::size_of::<Option<State>>());

const LINE: usize = std::mem::size_of::<Line>();
/// The first mapping's size; each growth at least doubles it.
const FIRST_BYTES: usize = 64 << 10;

pub struct Slab {
    ptr: *mut Line,
    bytes: usize, // mapped
    stride: usize,
    made: Vec<u64>, // bit `id`: its record is made (its lines initialised)
    count: usize,   // records made
    grows: usize,
    sparse: bool,   // no huge pages (`set_sparse`)
}

// SAFETY: the slab owns its mapping and the states in it, as a `Vec<Line>` would, and
// gives them out only through `&self` / `&mut self` borrows: it is Send and Sync when
// `Vec<Line>` is.
unsafe impl Send for Slab {}
unsafe impl Sync for Slab {}

impl Default for Slab {
    fn default() -> Slab {
        Slab::new(0)
    }
}

impl Slab {
    pub fn new(stride: usize) -> Slab {
        Slab { ptr: std::ptr::NonNull::dangling().as_ptr(), bytes: 0, stride, made: vec![],
               count: 0, grows: 0, sparse: false }
    }

    /// Ids the mapping has room for (ids `0..capacity()`).
    pub fn capacity(&self) -> usize {
        self.bytes / (self.stride.max(1) * LINE)
    }

    /// Times the mapping was made or grown (a debug counter for tests).
    pub fn grows(&self) -> usize {
        self.grows
    }

    /// Ids whose records are made (a debug counter for tests).
    pub fn ready(&self) -> usize {
        self.count
    }

    /// Whether id `id`'s record is made.
    #[inline]
    fn is_made(&self, id: usize) -> bool {
        self.made.get(id / 64).is_some_and(|w| w >> (id % 64) & 1 == 1)
    }

    /// The lines of id `id`'s record. Panics if it is not made (grow first).
    #[inline]
    fn record(&self, id: usize) -> &[Line] {
        assert!(self.is_made(id), "slab record {id} not made");
        // SAFETY: a made record's `stride` lines are initialised (`make`) and owned here.
        unsafe { std::slice::from_raw_parts(self.ptr.add(id * self.stride), self.stride) }
    }

    #[inline]
    fn record_mut(&mut self, id: usize) -> &mut [Line] {
        assert!(self.is_made(id), "slab record {id} not made");
        // SAFETY: as in `record`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(id * self.stride), self.stride) }
    }

    /// The `w` states of id `id` from column `col`. Panics if its record is not made.
    #[inline]
    pub fn states(&self, id: usize, col: usize, w: usize) -> &[Option<State>] {
        let s = &self.record(id)[col..col + w];
        // SAFETY: `Line` is `repr(C)` around one `Option<State>` and of the same size
        // (asserted above), so `w` lines are `w` states laid out as a slice.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), w) }
    }

    #[inline]
    pub fn states_mut(&mut self, id: usize, col: usize, w: usize) -> &mut [Option<State>] {
        let s = &mut self.record_mut(id)[col..col + w];
        // SAFETY: as in `states`; the borrow of the lines is the borrow of the states.
        unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), w) }
    }

    /// The address of id `id`'s state at column `col`, if its record is made (for
    /// prefetching).
    #[inline]
    pub fn addr(&self, id: usize, col: usize) -> Option<*const Option<State>> {
        if !self.is_made(id) || col >= self.stride {
            return None;
        }
        Some((&self.record(id)[col].0) as *const Option<State>)
    }

    /// State `col` of id `id`, taken out (None if its record is not made).
    pub fn take(&mut self, id: usize, col: usize) -> Option<State> {
        if !self.is_made(id) {
            return None;
        }
        self.record_mut(id).get_mut(col).and_then(|l| l.0.take())
    }

    /// No huge pages for this slab (most of its ids make no record: lazy.rs): the mapping is
    /// advised so now, and not advised huge when it grows.
    pub fn set_sparse(&mut self) {
        self.sparse = true;
        if self.bytes > 0 {
            #[cfg(target_os = "linux")]
            // SAFETY: the slab's whole live mapping; the advice changes no contents.
            unsafe {
                libc::madvise(self.ptr.cast(), self.bytes, libc::MADV_NOHUGEPAGE);
            }
        }
    }

    /// Make the records of ids up to `id`, growing the mapping (at least doubling it) when
    /// they do not fit. The mapping is asked for in huge pages (records are visited at
    /// random, an eviction per window per event, and with 4 KiB pages each visit of a large
    /// slab also misses the TLB).
    #[inline]
    pub fn grow(&mut self, id: usize) {
        if self.is_made(id) {
            return;
        }
        self.make(id);
    }

    fn make(&mut self, id: usize) {
        let need = (id + 1) * self.stride * LINE;
        if need > self.bytes {
            let want = need.max(2 * self.bytes).max(FIRST_BYTES).next_multiple_of(4096);
            self.ptr = remap(self.ptr, self.bytes, want);
            self.bytes = want;
            self.grows += 1;
            if !self.sparse {
                advise_huge(self.ptr.cast(), want);
            }
        }
        for at in id * self.stride..(id + 1) * self.stride {
            // SAFETY: inside the mapping (checked above), and not initialised yet.
            unsafe { self.ptr.add(at).write(Line(None)) };
        }
        if self.made.len() <= id / 64 {
            self.made.resize(id / 64 + 1, 0);
        }
        self.made[id / 64] |= 1 << (id % 64);
        self.count += 1;
    }

    /// The ids whose records are made.
    fn made_ids(&self) -> Vec<usize> {
        (0..self.made.len() * 64).filter(|&i| self.is_made(i)).collect()
    }

    /// Every state of the slab.
    pub fn iter(&self) -> impl Iterator<Item = &State> + '_ {
        self.made_ids().into_iter().flat_map(move |i| self.record(i).iter().filter_map(|l| l.0.as_ref()))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut State> + '_ {
        let (ptr, stride) = (self.ptr, self.stride);
        self.made_ids().into_iter().flat_map(move |i| {
            // SAFETY: each made record once, its lines initialised; the records are disjoint,
            // and the iterator borrows the slab mutably for as long as it lives.
            let lines = unsafe { std::slice::from_raw_parts_mut(ptr.add(i * stride), stride) };
            lines.iter_mut().filter_map(|l| l.0.as_mut())
        })
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        // SAFETY: the made records' lines are initialised and dropped once here; then the
        // mapping, which this slab made (`remap`), goes.
        unsafe {
            for i in self.made_ids() {
                std::ptr::drop_in_place(self.record_mut(i) as *mut [Line]);
            }
            libc::munmap(self.ptr.cast(), self.bytes);
        }
    }
}

/// A private anonymous mapping of `new` bytes holding the `old` bytes at `p` (none if `old`
/// is 0), moved rather than copied where the kernel can (Linux `mremap`).
fn remap(p: *mut Line, old: usize, new: usize) -> *mut Line {
    let fail = || -> ! {
        std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(new, LINE).unwrap())
    };
    // SAFETY: `p`/`old` describe a mapping this module made (or nothing, when `old` is 0);
    // the result is checked before use. Page-aligned memory is aligned for `Line`.
    unsafe {
        if old > 0 {
            #[cfg(target_os = "linux")]
            {
                let q = libc::mremap(p.cast(), old, new, libc::MREMAP_MAYMOVE);
                if q != libc::MAP_FAILED {
                    return q.cast();
                }
                // Refused (e.g. the range no longer one area): copy, as below.
            }
        }
        let q = libc::mmap(std::ptr::null_mut(), new, libc::PROT_READ | libc::PROT_WRITE,
                           libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if q == libc::MAP_FAILED {
            fail();
        }
        if old > 0 {
            // Without mremap: copy the bytes (the lines move as a vector's would).
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), old);
            libc::munmap(p.cast(), old);
        }
        q.cast()
    }
}

/// Ask the kernel to back the mapping at `p` (`bytes` long, page-aligned) with transparent
/// huge pages (where they are enabled on request: `madvise`). Only a hint: small mappings and
/// failures are ignored. The whole mapping is advised, never a 2 MiB-aligned part of it: a
/// part would split the mapping into areas of different kinds, and `mremap` refuses to grow
/// a range that spans such areas (EFAULT).
fn advise_huge(p: *const u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < 2 * HUGE {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: the range is the caller's whole live mapping; MADV_HUGEPAGE changes no
    // contents, only how the pages are backed.
    unsafe {
        libc::madvise(p as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = p;
}
