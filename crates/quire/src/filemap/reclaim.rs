//! Reclaim: freeing memory when an allocation fails, with a clock over the memmap (a later
//! issue brings active/inactive lists and workingset detection).
//!
//! The hand walks the descriptors of the pool in frame order, a folio at a time. A folio that
//! is not in a page cache index (`LRU` clear), locked or under write-back is passed over. One
//! that was used since the hand last passed (`REFERENCED`) has the bit cleared and gets a second
//! chance. Otherwise its mapping is found through the cache's file table, the folio is locked
//! (`try_lock`: reclaim never waits for a folio lock, so it cannot deadlock with a lock holder
//! that is itself allocating), a dirty one is written back (it is evicted on a later pass once
//! clean; the clock mutex is released during that I/O), and a clean one is evicted if nobody but
//! the index holds a reference, leaving a shadow entry.

use std::time::{Duration, Instant};

use super::{Cache, FilemapError, Result};
use crate::mem::folio::{FolioRef, HEAD, LOCKED, LRU, ORDER_MASK, ORDER_SHIFT, WRITEBACK};

/// The clock hand.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    hand: usize,
}

/// Allocates a folio of order `order` — or smaller, if reclaim frees memory but no block that
/// large — reclaiming as needed. With `must` false, gives up (`None`) after one round of
/// reclaim; with `must` true, keeps trying until [`super::CacheConfig::alloc_timeout`] passes.
pub(crate) fn alloc(cache: &Cache, order: u32, must: bool) -> Result<Option<FolioRef<'_>>> {
    let pool = &cache.pool;
    if let Some(f) = pool.alloc(order) {
        return Ok(Some(f));
    }
    let start = Instant::now();
    let mut idle_rounds = 0u32;
    loop {
        let want = (2usize << order).max(64);
        let freed = reclaim(cache, want);
        for o in (0..=order).rev() {
            if let Some(f) = pool.alloc(o) {
                return Ok(Some(f));
            }
        }
        if !must {
            return Ok(None);
        }
        if start.elapsed() > cache.config.alloc_timeout {
            return Err(FilemapError::NoMemory {
                frames: pool.nr_frames(),
            });
        }
        if freed == 0 {
            // Everything is pinned or locked right now: let the holders run.
            idle_rounds += 1;
            if idle_rounds < 16 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Sweeps the clock until `want` frames are freed or every frame was looked at twice; returns
/// the frames freed.
pub(crate) fn reclaim(cache: &Cache, want: usize) -> usize {
    let pool = &cache.pool;
    let n = pool.nr_frames();
    let mut clock = cache.reclaim.lock().unwrap();
    let mut freed = 0;
    let mut scanned = 0;
    while freed < want && scanned < 2 * n {
        let pfn = clock.hand % n;
        let Some(folio) = pool.folio(pfn) else {
            clock.hand = 0;
            continue;
        };
        let flags = folio.flags();
        let step = if flags & HEAD != 0 {
            1usize << ((flags & ORDER_MASK) >> ORDER_SHIFT)
        } else {
            1
        };
        clock.hand = (pfn + step) % n;
        scanned += step;
        if flags & (HEAD | LRU) != (HEAD | LRU) || flags & (LOCKED | WRITEBACK) != 0 {
            continue;
        }
        if folio.clear_referenced() {
            continue;
        }
        let Some(f) = pool.try_get(folio) else {
            continue;
        };
        let Some(m) = cache.mapping(f.mapping()) else {
            continue;
        };
        let index = f.index();
        let Ok(g) = f.try_lock_with(m.policy()) else {
            continue;
        };
        if !m.still_mapped(&g, index) {
            continue;
        }
        if g.is_dirty() {
            // Written back now, evicted on a later pass once clean. The hand is released for the
            // I/O so that other allocating threads can sweep meanwhile.
            drop(clock);
            let _ = m.write_folio(g);
            drop(m);
            clock = cache.reclaim.lock().unwrap();
            continue;
        }
        freed += m.evict(g);
    }
    freed
}
