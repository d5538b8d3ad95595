//! Readahead: spotting sequential streams and reading ahead of them, after the kernel's
//! on-demand readahead (`mm/readahead.c`).
//!
//! Each open handle keeps a [`RaState`]: the window last read ahead and the index it last read.
//! The page cache asks it two questions:
//!
//! - on a **miss** ([`RaState::on_miss`]): is this access part of a stream? A read at index 0 or
//!   right after the previous one starts a window, sized from the request (a few times larger,
//!   never more than the maximum); a read anywhere else is random and gets exactly what it asked
//!   for, no readahead.
//! - on reaching the **marker** ([`RaState::on_marker`]): the folio covering
//!   `start + size - async_size` of the current window was flagged when it was read. Touching it means the stream is
//!   consuming the window, so the next window — larger, up to the maximum — is read
//!   asynchronously, before the reader needs it.
//!
//! Windows are cut into naturally aligned pieces as large as possible ([`folio_orders`]) so that
//! sequential data lands in large folios, as `page_cache_ra_order` does.
//!
//! | field | meaning |
//! |---|---|
//! | `start` | first index of the current window |
//! | `size` | pages in the current window |
//! | `async_size` | the last `async_size` pages of the window; the first of them carries the marker |
//! | `prev` | the last index this handle read, for spotting sequential access |

/// A window of pages to read: `[start, start + size)`, with the readahead marker on
/// `marker` (if any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RaWindow {
    /// First index to read.
    pub start: u64,
    /// Number of pages.
    pub size: u64,
    /// The index whose folio gets the readahead marker, inside the window.
    pub marker: Option<u64>,
}

/// One handle's readahead state; see the [module documentation](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RaState {
    start: u64,
    size: u64,
    async_size: u64,
    prev: Option<u64>,
    max: u64,
}

fn initial_size(req: u64, max: u64) -> u64 {
    let want = req.max(1).next_power_of_two();
    let size = if want <= max / 32 {
        want * 4
    } else if want <= max / 4 {
        want * 2
    } else {
        max
    };
    size.clamp(1, max.max(1))
}

fn next_size(cur: u64, max: u64) -> u64 {
    let size = if cur < max / 16 {
        cur * 4
    } else if cur <= max / 2 {
        cur * 2
    } else {
        max
    };
    size.clamp(1, max.max(1))
}

impl RaState {
    /// A fresh state reading ahead at most `max_pages` pages at a time (0 disables readahead).
    pub(crate) fn new(max_pages: u64) -> RaState {
        RaState {
            start: 0,
            size: 0,
            async_size: 0,
            prev: None,
            max: max_pages,
        }
    }

    /// The largest window, in pages.
    #[allow(dead_code)] // the window's bound, read by the unit tests
    pub(crate) fn max_pages(&self) -> u64 {
        self.max
    }

    /// Notes that the handle read up to and including `last`.
    #[allow(dead_code)] // the unit tests' way to position the state
    pub(crate) fn note_read(&mut self, last: u64) {
        self.prev = Some(last);
    }

    fn sequential(&self, index: u64) -> bool {
        match self.prev {
            None => index == 0,
            Some(p) => index == p || index == p.wrapping_add(1),
        }
    }

    /// A read of `req` pages at `index` missed the cache. Returns what to read now: the request
    /// itself if the access is random, or a readahead window that covers it.
    #[doc(alias = "page_cache_sync_ra")]
    pub(crate) fn on_miss(&mut self, index: u64, req: u64) -> RaWindow {
        let req = req.max(1);
        if self.max == 0 || !self.sequential(index) {
            // Random access: no readahead, and forget any window.
            self.size = 0;
            self.async_size = 0;
            return RaWindow {
                start: index,
                size: req,
                marker: None,
            };
        }
        let size = initial_size(req, self.max).max(req);
        let async_size = if size > req { size - req } else { size / 2 };
        self.start = index;
        self.size = size;
        self.async_size = async_size;
        self.window()
    }

    /// A reader reached the folio covering `first ..= last`, which carries the readahead marker.
    /// Returns the next window to read asynchronously, or `None` if the marker is stale (not
    /// this stream's).
    #[doc(alias = "page_cache_async_ra")]
    pub(crate) fn on_marker(&mut self, first: u64, last: u64) -> Option<RaWindow> {
        if self.max == 0 {
            return None;
        }
        let expected = self.start + self.size - self.async_size;
        if self.size == 0 || expected < first || expected > last {
            // Another handle's marker, or an interleaved stream: start a window after this
            // folio, as the kernel does when it finds a marker it did not expect.
            if !self.sequential(first) && !(first..=last).any(|i| self.sequential(i)) {
                return None;
            }
            self.start = last + 1;
            self.size = 0;
        }
        let next_start = self.start + self.size;
        let size = next_size(self.size.max(1), self.max);
        self.start = next_start;
        self.size = size;
        self.async_size = size;
        Some(self.window())
    }

    fn window(&self) -> RaWindow {
        RaWindow {
            start: self.start,
            size: self.size,
            marker: (self.async_size > 0).then(|| self.start + self.size - self.async_size),
        }
    }
}

/// A handle's readahead state as shared by the threads that use the handle: the window behind a
/// mutex, taken only on misses and markers, and the last index read in an atomic, written on
/// every read (and only when it changes), so that hits never take a lock.
#[derive(Debug)]
pub(crate) struct Readahead {
    state: Mutex<RaState>,
    /// The last index read, `u64::MAX` for none.
    prev: CachePadded<AtomicU64>,
    /// This handle's key in the threads' read-end tables: drawn from a process-wide counter
    /// and never reused, so a handle opened where a dropped one lived inherits nothing.
    id: u64,
}

/// The source of [`Readahead`] ids (0 marks an empty read-end slot).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Readahead {
    /// A fresh state reading ahead at most `max_pages` pages at a time.
    pub(crate) fn new(max_pages: u64) -> Readahead {
        Readahead {
            state: Mutex::new(RaState::new(max_pages)),
            prev: CachePadded::new(AtomicU64::new(u64::MAX)),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Notes that the handle read pages `first ..= last`. Only a read that continues the
    /// previous one (or follows a miss, see [`Readahead::on_miss`]) moves the position: random
    /// hits leave it alone, so threads sharing a handle for random reads never write this line.
    #[inline]
    #[allow(dead_code)] // the unit tests' way to position the state
    pub(crate) fn note_read(&self, first: u64, last: u64) {
        let prev = self.prev.load(Ordering::Relaxed);
        if (first == prev || first == prev.wrapping_add(1)) && prev != last {
            self.prev.store(last, Ordering::Relaxed);
        }
    }

    /// The last index the handle read, if any (moved only by sequential reads and misses).
    #[inline]
    #[allow(dead_code)] // the sequential position, for the unit tests
    pub(crate) fn last_read(&self) -> Option<u64> {
        let prev = self.prev.load(Ordering::Relaxed);
        (prev != u64::MAX).then_some(prev)
    }

    /// Records that this thread's read through this handle ended at byte `end` (exclusive) and
    /// returns where its previous one ended, if this thread remembers it.
    ///
    /// The kernel keeps this position (`file_ra_state::prev_pos`) in the shared `struct file`
    /// and writes it on every read; here it lives in a few thread-local slots keyed by the
    /// handle, so that threads sharing a handle for random hits never write a shared line, and
    /// random hits in between cannot leave a stale position behind (the sequential position
    /// [`Readahead::last_read`] does not move on random hits, so it cannot serve here).
    #[inline]
    pub(crate) fn swap_read_end(&self, end: u64) -> Option<u64> {
        let key = self.id;
        // Only the table's address comes out of `with`: a closure that small is inlined, and
        // the thread-local is then reached by an offset from the thread pointer, not by a call
        // through the key (a quarter of a 64-byte hit's time at 256 MiB, `docs/journal/`).
        let s: &ReadEnds = READ_ENDS.with(|s| {
            // SAFETY: a const-initialised thread-local without a destructor lives as long as
            // its thread; the table is `!Sync` (cells), so the reference stays on this thread,
            // and it is used only within this call.
            unsafe { &*(s as *const ReadEnds) }
        });
        // Cell by cell: copying the whole table in and out cost a store-forwarding stall per
        // read (`docs/journal/`).
        let found = s.ends.iter().position(|e| e.get().0 == key);
        let (slot, prev) = match found {
            Some(i) => (i, Some(s.ends[i].get().1)),
            None => {
                let next = s.next.get();
                s.next.set(next.wrapping_add(1));
                (next as usize % READ_END_SLOTS, None)
            }
        };
        s.ends[slot].set((key, end));
        prev
    }

    fn locked(&self) -> MutexGuard<'_, RaState> {
        let mut st = self.state.lock();
        let prev = self.prev.load(Ordering::Relaxed);
        st.prev = (prev != u64::MAX).then_some(prev);
        st
    }

    /// [`RaState::on_miss`].
    #[doc(alias = "page_cache_sync_ra")]
    pub(crate) fn on_miss(&self, index: u64, req: u64) -> RaWindow {
        let w = self.locked().on_miss(index, req);
        // A miss starts a new position, random or not: a read that continues it is sequential.
        self.prev
            .store(index.saturating_add(req.max(1) - 1), Ordering::Relaxed);
        w
    }

    /// [`RaState::on_marker`].
    #[doc(alias = "page_cache_async_ra")]
    pub(crate) fn on_marker(&self, first: u64, last: u64) -> Option<RaWindow> {
        self.locked().on_marker(first, last)
    }
}

/// Handles per thread whose last read end [`Readahead::swap_read_end`] remembers.
const READ_END_SLOTS: usize = 4;

/// A thread's last read ends: `(handle id, end byte)` pairs, replaced round robin. Keyed by
/// [`Readahead`]'s never-reused id rather than its address: a handle opened at a dropped one's
/// address would inherit its end and skip an access marking (the exact-count test
/// `vmscan_workingset::a_refault_of_a_working_set_folio_is_a_restore` sees that in release
/// builds).
struct ReadEnds {
    ends: [Cell<(u64, u64)>; READ_END_SLOTS],
    next: Cell<u8>,
}

thread_local! {
    static READ_ENDS: ReadEnds = const {
        ReadEnds { ends: [const { Cell::new((0, 0)) }; READ_END_SLOTS], next: Cell::new(0) }
    };
}

/// Cuts `[start, start + nr)` into naturally aligned pieces of order at most `max_order`,
/// largest first where alignment allows: `(index, order)` pairs in index order, computed as
/// they are taken (a miss of one page allocates nothing for its cut).
#[doc(alias = "page_cache_ra_order")]
pub(crate) fn folio_orders(start: u64, nr: u64, max_order: u32) -> FolioOrders {
    FolioOrders {
        next: start,
        end: start.saturating_add(nr),
        max_order,
    }
}

/// The pieces of [`folio_orders`], in index order.
#[derive(Clone, Debug)]
pub(crate) struct FolioOrders {
    next: u64,
    end: u64,
    max_order: u32,
}

impl Iterator for FolioOrders {
    type Item = (u64, u32);

    fn next(&mut self) -> Option<(u64, u32)> {
        let i = self.next;
        if i >= self.end {
            return None;
        }
        let mut order = if i == 0 {
            self.max_order
        } else {
            i.trailing_zeros().min(self.max_order)
        };
        while order > 0 && i + (1u64 << order) > self.end {
            order -= 1;
        }
        self.next = i + (1u64 << order);
        Some((i, order))
    }
}

/// The pieces of a range still to insert, in index order: [`folio_orders`]' cut, taken as it
/// goes, with pieces put back in front of it (a piece the allocator cut short, or one to look
/// at again).
#[derive(Debug)]
pub(crate) struct Pieces {
    ahead: FolioOrders,
    /// Put back, to come before `ahead`: a stack, the next piece last.
    front: Vec<(u64, u32)>,
}

impl Pieces {
    pub(crate) fn new(start: u64, nr: u64, max_order: u32) -> Pieces {
        Pieces {
            ahead: folio_orders(start, nr, max_order),
            front: Vec::new(),
        }
    }

    /// The next piece, in index order.
    pub(crate) fn pop(&mut self) -> Option<(u64, u32)> {
        self.front.pop().or_else(|| self.ahead.next())
    }

    /// Puts `piece` back, to come next.
    pub(crate) fn push_front(&mut self, piece: (u64, u32)) {
        self.front.push(piece);
    }

    /// Puts `[start, start + nr)`, cut at most `max_order`, back in front, to come next in
    /// index order.
    pub(crate) fn push_front_range(&mut self, start: u64, nr: u64, max_order: u32) {
        let at = self.front.len();
        self.front.extend(folio_orders(start, nr, max_order));
        self.front[at..].reverse();
    }
}

use std::cell::Cell;

use crate::sync::loom::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn random_access_reads_only_the_request() {
        let mut ra = RaState::new(512);
        ra.note_read(10);
        let w = ra.on_miss(500, 1);
        assert_eq!(
            w,
            RaWindow {
                start: 500,
                size: 1,
                marker: None
            }
        );
    }

    #[test]
    fn a_stream_grows_its_window_to_the_maximum() {
        let mut ra = RaState::new(512);
        let w = ra.on_miss(0, 1);
        assert_eq!(w.start, 0);
        assert_eq!(w.size, 4);
        let mut marker = w.marker.expect("first window carries a marker");
        assert!(marker > 0 && marker < 4);
        let mut sizes = vec![w.size];
        let mut end = w.start + w.size;
        for _ in 0..8 {
            ra.note_read(marker);
            let w = ra.on_marker(marker, marker).expect("stream continues");
            assert_eq!(w.start, end, "windows are contiguous");
            end = w.start + w.size;
            sizes.push(w.size);
            marker = w.marker.unwrap();
            assert_eq!(marker, w.start, "the whole next window is asynchronous");
        }
        assert!(sizes.windows(2).all(|p| p[1] >= p[0]));
        assert_eq!(*sizes.last().unwrap(), 512);
    }

    #[test]
    fn large_requests_start_large() {
        let mut ra = RaState::new(512);
        let w = ra.on_miss(0, 256);
        assert_eq!(w.size, 512);
        let w2 = RaState::new(512).on_miss(0, 1000);
        assert_eq!(w2.size, 1000, "never less than the request");
    }

    #[test]
    fn stale_marker_from_a_random_reader_is_ignored() {
        let mut ra = RaState::new(512);
        ra.note_read(3);
        assert_eq!(ra.on_marker(100, 100), None);
    }

    #[test]
    fn shared_position_moves_only_on_misses_and_continuations() {
        let ra = Readahead::new(512);
        // A random miss sets the position to the end of its request ...
        assert_eq!(ra.on_miss(100, 2).size, 2);
        // ... a random hit elsewhere leaves it ...
        ra.note_read(7, 7);
        // ... so a miss right after the first request is still seen as sequential.
        assert!(ra.on_miss(102, 1).size > 1, "continuation starts a window");
        // A read continuing the position moves it along.
        let ra = Readahead::new(512);
        ra.note_read(0, 3);
        ra.note_read(4, 9);
        assert!(ra.on_miss(10, 1).size > 1);
    }

    #[test]
    fn zero_max_disables_readahead() {
        let mut ra = RaState::new(0);
        assert_eq!(ra.on_miss(0, 2).size, 2);
        assert_eq!(ra.on_marker(1, 1), None);
    }

    #[test]
    fn pieces_are_aligned_and_cover_the_range() {
        for (start, nr) in [(0u64, 512u64), (3, 100), (512, 1024), (7, 1), (1000, 3000)] {
            let pieces: Vec<_> = folio_orders(start, nr, 9).collect();
            let mut i = start;
            for &(idx, order) in &pieces {
                assert_eq!(idx, i);
                assert_eq!(idx % (1 << order), 0, "aligned");
                assert!(order <= 9);
                i += 1 << order;
            }
            assert_eq!(i, start + nr);
        }
        assert_eq!(folio_orders(0, 512, 9).collect::<Vec<_>>(), vec![(0, 9)]);
    }

    #[test]
    fn pieces_put_back_come_first_in_index_order() {
        let mut p = Pieces::new(0, 16, 2);
        assert_eq!(p.pop(), Some((0, 2)));
        // The allocator gave one page of the first piece: the other three come next.
        p.push_front_range(1, 3, 2);
        assert_eq!(p.pop(), Some((1, 0)));
        p.push_front((1, 0));
        let rest: Vec<_> = std::iter::from_fn(|| p.pop()).collect();
        assert_eq!(rest, [(1, 0), (2, 1), (4, 2), (8, 2), (12, 2)]);
    }
}
