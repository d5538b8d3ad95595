//! Event counters, after `/proc/vmstat` (DESIGN.md rule 8).
//!
//! Every event that a benchmark or a test wants to reason about — a wait-table lookup, a
//! wake-up, a tree walk — is counted here. Counting must be cheap enough to leave on, so each
//! counter is sharded: a thread adds to the shard it was given when it first counted (one relaxed
//! `fetch_add` on a cache line that other threads rarely touch), and a reader sums the shards.
//!
//! The counters are global, like the kernel's: a benchmark takes a [`Snapshot`] before and after
//! a run and looks at the difference.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

macro_rules! events {
    ($($(#[$doc:meta])* $name:ident => $text:literal,)*) => {
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
                    $(Event::$name => $text,)*
                }
            }
        }
    };
}

events! {
    /// A lookup of the hashed wait table, to park or to wake (bitwait).
    WaitTableLookups => "wait_table_lookups",
    /// A thread was woken by a waker (bitwait).
    Wakeups => "wakeups",
    /// A woken thread found its condition still false and went back to wait (bitwait).
    SpuriousWakeups => "spurious_wakeups",
    /// A lock was handed to a waiter by the unlocker, after the waiter lost too many races.
    LockHandoffs => "lock_handoffs",
    /// A thread went to sleep on the wait table (bitwait).
    Sleeps => "sleeps",
    /// A lockref operation gave up on its compare-and-swap loop and took the lock.
    LockrefSlowPaths => "lockref_slow_paths",
    /// One walk of an XArray from its head towards an index.
    XaWalks => "xa_walks",
    /// An XArray node was allocated.
    XaNodeAllocs => "xa_node_allocs",
    /// An XArray node was handed to the epoch to be freed.
    XaNodeFrees => "xa_node_frees",
    /// A dentry lookup completed on the lock-free path.
    DcacheFastWalks => "dcache_fast_walks",
    /// A dentry lookup fell back to the reference-taking path.
    DcacheSlowWalks => "dcache_slow_walks",
    /// A name was resolved by asking the file system (a dcache miss).
    DcacheMisses => "dcache_misses",
    /// A folio was found in the page cache.
    PageCacheHits => "page_cache_hits",
    /// A folio had to be read from the store.
    PageCacheMisses => "page_cache_misses",
    /// A folio was read ahead of use.
    Readahead => "readahead",
    /// A folio's dirty state was tested on unmap or reclaim.
    DirtyTests => "dirty_tests",
    /// A folio was written back to its store.
    Writeback => "writeback",
    /// A folio was evicted, leaving a shadow entry.
    Evictions => "evictions",
    /// A folio was read again after eviction (its shadow entry was found).
    Refaults => "refaults",
    /// A folio was moved to the active list.
    Activations => "activations",
}

const NR_EVENTS: usize = Event::ALL.len();
const SHARDS: usize = 16;

struct Shard {
    counts: [AtomicU64; NR_EVENTS],
}

static COUNTERS: [CachePadded<Shard>; SHARDS] = {
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: AtomicU64 = AtomicU64::new(0);
    #[allow(clippy::declare_interior_mutable_const)]
    const SHARD: CachePadded<Shard> = CachePadded::new(Shard {
        counts: [ZERO; NR_EVENTS],
    });
    [SHARD; SHARDS]
};

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn my_shard() -> usize {
    MY_SHARD.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
        s.set(v);
        v
    })
}

/// Adds one to `event`'s counter.
#[inline]
pub fn count(event: Event) {
    add(event, 1);
}

/// Adds `n` to `event`'s counter.
#[inline]
pub fn add(event: Event, n: u64) {
    COUNTERS[my_shard()].counts[event as usize].fetch_add(n, Ordering::Relaxed);
}

/// Reads one counter (the sum of its shards).
pub fn read(event: Event) -> u64 {
    COUNTERS
        .iter()
        .map(|s| s.counts[event as usize].load(Ordering::Relaxed))
        .sum()
}

/// The value of every counter at one moment (each read individually, like /proc/vmstat).
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    counts: [u64; NR_EVENTS],
}

impl Snapshot {
    /// Reads every counter.
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
        for e in Event::ALL {
            writeln!(f, "{} {}", e.name(), self.get(*e))?;
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
                        count(Event::Activations);
                    }
                    add(Event::Activations, 5);
                });
            }
        });
        let d = Snapshot::take().since(&before);
        // Other tests may count too, but never decrement.
        assert!(d.get(Event::Activations) >= 4 * 1005);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Event::ALL.iter().map(|e| e.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Event::ALL.len());
    }
}
