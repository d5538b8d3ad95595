//! Event counters, after `/proc/vmstat` (rule 8 of docs/RULES.md).
//!
//! Every event that a benchmark or a test wants to reason about — a wait-table lookup, a
//! wake-up, a tree walk — is counted here. Counting must be cheap enough to leave on the hot
//! paths (a page cache hit counts twice), so each thread owns a slot of counters and adds to it with a plain load and store (it is the
//! only writer), so counting costs no locked instruction; a reader sums every slot. A thread's
//! slot passes to a later thread when it exits, so the sums never lose counts.
//!
//! The counters are global, like the kernel's: a benchmark takes a [`Snapshot`] before and after
//! a run and looks at the difference. A page cache also keeps its own copy of the events it
//! counts off the hot paths ([`CacheStats::vmstat`](crate::filemap::CacheStats::vmstat)).
//!
//! A snapshot reads as a struct with one named field per counter ([`Snapshot::vmstat`] gives a
//! [`VmStat`]), as `(name, value)` pairs in a stable order ([`Snapshot::iter`]), or, printed
//! with `{}`, as `/proc/vmstat` text: one `name value` line per counter.
//!
//! ```
//! use quire::stats::Snapshot;
//!
//! let snap = Snapshot::take();
//! print!("{snap}"); // wait_table_lookups 12\nwakeups 3\n...
//! let hits = snap.vmstat().page_cache_hits;
//! assert_eq!(snap.iter().find(|(n, _)| *n == "page_cache_hits"), Some(("page_cache_hits", hits)));
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

macro_rules! events {
    ($($(#[$doc:meta])* $name:ident => $field:ident,)*) => {
        /// A countable event. The discriminant indexes the counter array.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Event {
            $($(#[$doc])* $name,)*
        }

        impl Event {
            /// Every event, in counter order.
            pub const ALL: &'static [Event] = &[$(Event::$name,)*];

            /// The event's name as reported (snake case, like /proc/vmstat).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Event::$name => stringify!($field),)*
                }
            }
        }

        /// Every counter as a named field: a [`Snapshot`] read as a struct (field names are
        /// the events' [names](Event::name), as `/proc/vmstat` prints them). Printed with
        /// `{}`, it gives one `name value` line per counter, in [`Event::ALL`]'s order.
        ///
        /// ```
        /// use quire::stats::{Snapshot, VmStat};
        ///
        /// let before = Snapshot::take();
        /// // ... work ...
        /// let d: VmStat = Snapshot::take().since(&before).vmstat();
        /// println!("hits {} misses {}", d.page_cache_hits, d.page_cache_misses);
        /// assert!(d.to_string().lines().any(|l| l.starts_with("page_cache_hits ")));
        /// ```
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct VmStat {
            $($(#[$doc])* pub $field: u64,)*
        }

        impl VmStat {
            /// The counter of `event`.
            pub fn get(&self, event: Event) -> u64 {
                match event {
                    $(Event::$name => self.$field,)*
                }
            }
        }

        impl From<&Snapshot> for VmStat {
            fn from(s: &Snapshot) -> VmStat {
                VmStat {
                    $($field: s.get(Event::$name),)*
                }
            }
        }
    };
}

events! {
    /// A lookup of the hashed wait table, to park or to wake (bitwait).
    WaitTableLookups => wait_table_lookups,
    /// A thread was woken by a waker (bitwait).
    Wakeups => wakeups,
    /// A woken thread found its condition still false and went back to wait (bitwait).
    SpuriousWakeups => spurious_wakeups,
    /// A lock was handed to a waiter by the unlocker, after the waiter lost too many races.
    LockHandoffs => lock_handoffs,
    /// A thread went to sleep on the wait table (bitwait).
    Sleeps => sleeps,
    /// A lockref operation gave up on its compare-and-swap loop and took the lock.
    LockrefSlowPaths => lockref_slow_paths,
    /// One walk of an XArray from its head towards an index.
    XaWalks => xa_walks,
    /// An XArray node was allocated.
    XaNodeAllocs => xa_node_allocs,
    /// An XArray node was handed to the epoch to be freed.
    XaNodeFrees => xa_node_frees,
    /// A dentry lookup completed on the lock-free path.
    DcacheFastWalks => dcache_fast_walks,
    /// A dentry lookup fell back to the reference-taking path.
    DcacheSlowWalks => dcache_slow_walks,
    /// A name was resolved by asking the file system (a dcache miss).
    DcacheMisses => dcache_misses,
    /// A lookup found an up-to-date folio in the page cache. The lookup that follows a
    /// miss's read counts here too, so the misses of a workload are `page_cache_misses` and its
    /// hits are its page lookups less those.
    PageCacheHits => page_cache_hits,
    /// A lookup found no folio: it had to be read from the store.
    PageCacheMisses => page_cache_misses,
    /// A folio was read ahead of use.
    Readahead => readahead,
    /// A folio's hardware dirty bit was tested (on unmap, in reclaim's unmap, before
    /// write-back of a mapped folio).
    DirtyTests => dirty_tests,
    /// A folio was written back to its store.
    Writeback => writeback,
    /// A folio's write-back failed (every attempt counts; the folio stays dirty).
    WritebackErrors => writeback_errors,
    /// A folio's write-back failed `filemap::WRITEBACK_MAX_TRIES` times in a row: it was parked
    /// (dirty, no longer tried by background write-back, on the unevictable list) until a write
    /// into it or an explicit `fsync` that succeeds re-arms it.
    WritebackRetriesExhausted => writeback_retries_exhausted,
    /// Pages evicted, leaving a shadow entry.
    Evictions => evictions,
    /// Pages read again after eviction (their shadow entry was found): the kernel's
    /// `workingset_refault_file`.
    WorkingsetRefault => workingset_refault,
    /// Refaulting pages judged part of the working set by their refault distance, and
    /// activated at once.
    WorkingsetActivate => workingset_activate,
    /// Refaulting pages that had been in the working set (active) before they were evicted.
    WorkingsetRestore => workingset_restore,
    /// Shadow nodes (index nodes holding only shadow entries) freed by the shadow shrinker.
    WorkingsetNodereclaim => workingset_nodereclaim,
    /// Pages moved to an active list.
    PgActivate => pgactivate,
    /// Pages moved from an active list to an inactive one.
    PgDeactivate => pgdeactivate,
    /// Pages rotated to the inactive tail when their write-back ended, to be reclaimed next.
    PgRotated => pgrotated,
    /// Pages looked at by reclaim on an inactive list.
    PgScan => pgscan,
    /// Pages reclaimed.
    PgSteal => pgsteal,
    /// Allocations that reclaimed memory themselves (below the min watermark): the kernel's
    /// `allocstall`.
    DirectReclaims => direct_reclaims,
    /// Times the background reclaim thread was woken.
    KswapdWakeups => kswapd_wakeups,
    /// Time spent in rounds of reclaim (direct and background), in nanoseconds of the
    /// monotonic clock: a round does not sleep of its own accord, so this is the reclaiming
    /// threads' CPU time, plus any preemption in a round and any wait for a lock another
    /// thread held meanwhile (the lists', the file table's, a store's `evicted_clean`). With
    /// `evictions`, the cost of reclaim per evicted page.
    ReclaimNs => reclaim_ns,
    /// A per-thread batch of LRU operations (additions, activations, rotations) was drained
    /// under the LRU lock.
    LruBatchDrains => lru_batch_drains,
    /// Folios allocated for the page cache.
    FolioAllocs => folio_allocs,
    /// A folio's hardware dirty bit said it had been written, and the folio was made dirty:
    /// the dirty state moved from the frame to the folio (`mm`).
    DirtyTransfers => dirty_transfers,
    /// A write to a page shared copy-on-write copied it (`do_wp_page`).
    CowCopies => cow_copies,
    /// A write to a read-only mapped anonymous page found the writer its only mapper and made
    /// the page writable in place.
    CowReuses => cow_reuses,
    /// Pages written to swap (`pswpout`).
    Swapouts => pswpout,
    /// Pages read from swap (`pswpin`).
    Swapins => pswpin,
    /// Anonymous pages faulted in: first touch, swap-in or a copy-on-write copy.
    AnonFaults => anon_faults,
    /// A future queued itself on the wait table to wait for a bit (bitwait's async waiters:
    /// the async sibling of `sleeps`).
    AsyncWaits => async_waits,
}

const NR_EVENTS: usize = Event::ALL.len();

/// One thread's counters. Only its owner writes them (a plain load and store: no locked
/// instruction on the hot path); readers sum every slot with relaxed loads.
struct Slot {
    counts: [AtomicU64; NR_EVENTS],
}

/// Every slot ever made (slots are never freed: there are at most as many as threads that ever
/// ran at once), and the slots of threads that have exited, for new threads to take over.
static SLOTS: Mutex<Vec<&'static CachePadded<Slot>>> = Mutex::new(Vec::new());
static FREE: Mutex<Vec<&'static CachePadded<Slot>>> = Mutex::new(Vec::new());

/// Counts made while a thread is being torn down (after its slot was given back).
static LATE: Slot = Slot {
    counts: [const { AtomicU64::new(0) }; NR_EVENTS],
};

/// A thread's ownership of its slot; gives the slot back when the thread exits.
struct Owner(&'static CachePadded<Slot>);

impl Owner {
    fn take() -> Owner {
        if let Some(slot) = FREE.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Owner(slot);
        }
        let slot: &'static CachePadded<Slot> = Box::leak(Box::new(CachePadded::new(Slot {
            counts: [const { AtomicU64::new(0) }; NR_EVENTS],
        })));
        SLOTS.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
        Owner(slot)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // The mutex orders this thread's last counts before the next owner's first ones.
        FREE.lock().unwrap_or_else(|e| e.into_inner()).push(self.0);
    }
}

thread_local! {
    static MINE: Owner = Owner::take();
}

/// Adds one to `event`'s counter.
#[inline]
#[doc(alias = "count_vm_event")]
pub(crate) fn count(event: Event) {
    add(event, 1);
}

/// Adds `n` to `event`'s counter.
#[inline]
#[doc(alias = "count_vm_events")]
pub(crate) fn add(event: Event, n: u64) {
    let done = MINE.try_with(|o| {
        let c = &o.0.counts[event as usize];
        // Single writer: no read-modify-write needed.
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    });
    if done.is_err() {
        LATE.counts[event as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// Reads one counter (the sum over every thread's slot).
pub fn read(event: Event) -> u64 {
    let slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    let e = event as usize;
    slots
        .iter()
        .map(|s| s.counts[e].load(Ordering::Relaxed))
        .fold(LATE.counts[e].load(Ordering::Relaxed), u64::wrapping_add)
}

/// Counters of one object (a page cache), beside the global ones: what a test of that object can
/// count exactly while other tests run. Every [`Counters::add`] also adds to the global counter.
/// Meant for events off the read-hit path (allocations, reclaim, refaults, batch drains), which
/// the allocating threads and background reclaim count at the same time: each thread adds to
/// the shard its number picks (a relaxed `fetch_add` on a line no other thread writes while
/// there are no more threads than shards), so that counting an allocation on one core and an
/// eviction on another does not move a cache line between them every time; a reader sums the
/// shards.
pub(crate) struct Counters {
    shards: Box<[CachePadded<[AtomicU64; NR_EVENTS]>]>,
}

impl Default for Counters {
    /// As many shards as the allocator's caches ([`nr_shards`](crate::mem::buddy::nr_shards)).
    fn default() -> Self {
        Counters {
            shards: (0..crate::mem::buddy::nr_shards())
                .map(|_| CachePadded::new([const { AtomicU64::new(0) }; NR_EVENTS]))
                .collect(),
        }
    }
}

impl Counters {
    /// Adds `n` to `event`, here and globally.
    #[inline]
    #[doc(alias = "count_vm_events")]
    pub(crate) fn add(&self, event: Event, n: u64) {
        let shard = &self.shards[crate::mem::buddy::thread_number() & (self.shards.len() - 1)];
        shard[event as usize].fetch_add(n, Ordering::Relaxed);
        add(event, n);
    }

    /// Adds one to `event`, here and globally.
    #[inline]
    #[doc(alias = "count_vm_event")]
    pub(crate) fn count(&self, event: Event) {
        self.add(event, 1);
    }

    /// One of this object's counters (the sum of the shards).
    pub(crate) fn get(&self, event: Event) -> u64 {
        self.shards
            .iter()
            .map(|s| s[event as usize].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    /// This object's counters now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut counts = [0u64; NR_EVENTS];
        for shard in self.shards.iter() {
            for (c, a) in counts.iter_mut().zip(shard.iter()) {
                *c = c.wrapping_add(a.load(Ordering::Relaxed));
            }
        }
        Snapshot { counts }
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

/// The value of every counter at one moment (each read individually, like /proc/vmstat).
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    counts: [u64; NR_EVENTS],
}

impl Snapshot {
    /// Reads every counter.
    #[doc(alias = "all_vm_events")]
    pub fn take() -> Snapshot {
        let mut counts = [0; NR_EVENTS];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = read(Event::ALL[i]);
        }
        Snapshot { counts }
    }

    /// One counter's value in this snapshot.
    pub fn get(&self, event: Event) -> u64 {
        self.counts[event as usize]
    }

    /// The events counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut counts = [0; NR_EVENTS];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.counts[i].wrapping_sub(earlier.counts[i]);
        }
        Snapshot { counts }
    }
}

impl Snapshot {
    /// Every counter as a named field.
    pub fn vmstat(&self) -> VmStat {
        VmStat::from(self)
    }

    /// Every counter as `(name, value)`, in [`Event::ALL`]'s order (a stable order: new
    /// events are added at the end).
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Event::ALL.iter().map(|e| (e.name(), self.get(*e)))
    }
}

impl From<Snapshot> for VmStat {
    fn from(s: Snapshot) -> VmStat {
        VmStat::from(&s)
    }
}

impl VmStat {
    /// Every counter as `(name, value)`, in [`Event::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Event::ALL.iter().map(|e| (e.name(), self.get(*e)))
    }
}

impl fmt::Display for VmStat {
    /// One `name value` line per counter, as /proc/vmstat prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in self.iter() {
            writeln!(f, "{name} {value}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for e in Event::ALL {
            m.entry(&e.name(), &self.get(*e));
        }
        m.finish()
    }
}

impl fmt::Display for Snapshot {
    /// One `name value` line per counter, as /proc/vmstat prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in self.iter() {
            writeln!(f, "{name} {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let before = Snapshot::take();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        count(Event::PgActivate);
                    }
                    add(Event::PgActivate, 5);
                });
            }
        });
        let d = Snapshot::take().since(&before);
        // Other tests may count too, but never decrement.
        assert!(d.get(Event::PgActivate) >= 4 * 1005);
    }

    #[test]
    fn object_counters_count_here_and_globally() {
        let c = Counters::default();
        let before = Snapshot::take();
        c.add(Event::PgSteal, 3);
        c.count(Event::PgSteal);
        assert_eq!(c.snapshot().get(Event::PgSteal), 4);
        assert_eq!(c.snapshot().get(Event::PgScan), 0);
        assert!(Snapshot::take().since(&before).get(Event::PgSteal) >= 4);
    }

    #[test]
    fn object_counters_sum_every_thread() {
        let c = Counters::default();
        std::thread::scope(|s| {
            for t in 0..5u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(Event::PgScan, t + 1);
                    }
                    c.count(Event::PgSteal);
                });
            }
        });
        assert_eq!(c.get(Event::PgScan), 15_000);
        assert_eq!(c.snapshot().get(Event::PgScan), 15_000);
        assert_eq!(c.get(Event::PgSteal), 5);
        assert_eq!(c.snapshot().get(Event::PgActivate), 0);
    }

    #[test]
    fn vmstat_fields_iter_and_display_agree() {
        let c = Counters::default();
        c.add(Event::PageCacheHits, 7);
        c.add(Event::Swapouts, 3);
        let snap = c.snapshot();
        let v = snap.vmstat();
        assert_eq!((v.page_cache_hits, v.pswpout, v.pgsteal), (7, 3, 0));
        let pairs: Vec<_> = snap.iter().collect();
        assert_eq!(pairs.len(), Event::ALL.len());
        assert_eq!(pairs, v.iter().collect::<Vec<_>>());
        for e in Event::ALL {
            assert_eq!(v.get(*e), snap.get(*e), "{}", e.name());
        }
        let text = v.to_string();
        assert_eq!(text, snap.to_string());
        assert_eq!(text.lines().count(), Event::ALL.len());
        assert!(text.lines().any(|l| l == "page_cache_hits 7"));
        assert!(text.lines().any(|l| l == "pswpout 3"));
        assert_eq!(text.lines().next(), Some("wait_table_lookups 0"));
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Event::ALL.iter().map(|e| e.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Event::ALL.len());
    }
}
