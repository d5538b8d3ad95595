//! The page cache proper, after `mm/filemap.c`: cached files with a fixed memory budget.
//!
//! A [`PageCache`] owns one [`FramePool`](crate::mem::pool::FramePool) (the whole memory budget)
//! and the background threads
//! (the flusher and the readahead I/O workers). [`PageCache::open`] wraps a
//! [`Store`](crate::store::Store) in a
//! mapping — the `address_space`: an [`XArray`](crate::xarray::XArray) of folios and shadow
//! entries, the file's length
//! and its write-back error sequence — and returns a [`CachedFile`], one open handle with its
//! own readahead state and its own position in the error sequence. [`CachedFile::reopen`] gives
//! another handle on the same mapping. Many files share one cache and one budget.
//!
//! # The index and its references
//!
//! Every folio in a mapping's index holds one counted reference owned by the index (a raw
//! reference: [`FolioRef::into_raw`](crate::mem::folio::FolioRef::into_raw)); its flag word has
//! [`LRU`](crate::mem::folio::LRU) set
//! while it is there, and its `mapping` field holds the mapping's id. The index's marks:
//!
//! | mark | meaning |
//! |---|---|
//! | `DIRTY_MARK` | the folio is DIRTY |
//! | `WRITEBACK_MARK` | the folio is under write-back |
//! | `FAILED_MARK` | the folio is DIRTY and parked (`WB_FAILED`): its write-back failed [`WRITEBACK_MAX_TRIES`] times in a row (it has no `DIRTY_MARK` then) |
//!
//! # Lookups (rule 5 of docs/RULES.md)
//!
//! A lookup pins an epoch guard, loads the slot, takes a speculative reference with
//! [`Folio::try_get`](crate::mem::folio::Folio::try_get) (which fails on a free or frozen
//! descriptor) and loads the slot again: if
//! it still holds the same folio, the reference is good; otherwise it is put back and the lookup
//! starts over. Descriptors are never freed (rule 1 of docs/RULES.md), so the speculative reference is always
//! safe to attempt.
//!
//! # Changing bytes
//!
//! A reader holding a reference may be reading an up-to-date folio's bytes without a lock, so
//! bytes change only (a) before the folio is up to date, under its lock, (b) with the count
//! frozen (no reference but the index's and the writer's), or (c) in a copy that replaces the
//! folio in the index (copy on write) when readers hold references. Writers also wait for
//! write-back to finish, so the bytes being written to the store are stable.
//!
//! # Write-back (rule 6 of docs/RULES.md)
//!
//! Writes mark folios DIRTY (and `DIRTY_MARK` in the index) and count dirty frames
//! cache-wide. A background flusher writes back when dirty memory passes
//! [`CacheConfig::dirty_background`] or data has been dirty longer than
//! [`CacheConfig::dirty_expire`]; writers wait when it passes [`CacheConfig::dirty_limit`].
//! A failed write-back leaves the folio dirty (the data is not dropped), sets ERROR on it and
//! records the error in the mapping's `ErrSeq`, which every handle's `fsync` reports once.
//! Failures in a row are counted in the folio's `private` word (which the page cache does not
//! otherwise use for file folios; written only when a write-back fails, and reset only when
//! one succeeds on a folio with ERROR set, so the success path reads the flag word it already
//! touches and nothing else). After [`WRITEBACK_MAX_TRIES`] the folio is *parked*: `WB_FAILED`
//! set, `FAILED_MARK` instead of `DIRTY_MARK` in the index, on the unevictable list — out of
//! the flusher's and reclaim's way — until a write into it re-arms it or an explicit
//! write-back retries it (see the constant).
//!
//! # The budget
//!
//! Frames never exceed the pool. Reclaim is [`crate::vmscan`]'s: every folio in an index is on
//! one of the cache's LRU lists; background reclaim keeps some frames free, and an evicted
//! folio's slot keeps a shadow entry, so that a later insert over it is a *refault* whose
//! distance tells whether the folio belongs to the working set. The cache is reclaim's
//! [`Owners`](crate::vmscan): it evicts folios for it, deletes shadow nodes and wakes the
//! flusher when reclaim meets dirty folios.
//!
//! # Mapped folios
//!
//! Spaces of [`crate::mm`] may map a file's folios (`Space::map_file`); the file's reverse map
//! (`immap.rs`) lists those mappings. A folio some space maps has a mapcount (owner bits of its
//! flag word) and one reference per pte, so the page cache unmaps it before it changes it
//! (`write_at`), drops it (truncation, close) or reclaim evicts it, and write-protects it
//! before writing it back (`folio_mkclean`) or lending a zero-copy reader its bytes (the next
//! write through a mapping then gets a copy; see `mm/file.rs`).
//!
//! A folio leaves its index in one place, `Mapping::remove_folio`: its slot gets the
//! replacement (nothing, a shadow, or a copy), the index's reference is put, the counts are
//! fixed, its `mapping` is set to 0 and it is taken off its LRU list, in that order (see
//! `vmscan/swap.rs` for why).

mod block_on;
mod cache;
mod config;
mod error;
pub(crate) mod errseq;
mod file;
pub(crate) mod immap;
pub(crate) mod mapping;
mod owned;
pub(crate) mod readahead;
mod reader;
mod stats;
mod std_io;
mod workers;
mod writeback;

use crate::mem::folio::FRAME_SHIFT;
use crate::xarray::Mark;

pub use block_on::block_on;
pub use cache::PageCache;
pub(crate) use cache::{Cache, FolioPtr};
pub use config::{CacheConfig, BACKGROUND_RECLAIM_MIN};
use error::{check_range, errno_of, short_read};
pub use error::{FilemapError, Result};
pub(crate) use errseq::ErrSeqSince;
use file::lend;
pub use file::CachedFile;
pub use owned::OwnedFolio;
pub(crate) use readahead::Readahead;
pub use reader::FileReader;
#[cfg(feature = "bench-internals")]
pub use reader::REPIN_EVERY;
pub use stats::CacheStats;
pub use std_io::FileCursor;

/// The index mark of dirty folios.
pub(crate) const DIRTY_MARK: Mark = Mark::M0;
/// The index mark of folios under write-back.
pub(crate) const WRITEBACK_MARK: Mark = Mark::M1;
/// The index mark of dirty folios parked after [`WRITEBACK_MAX_TRIES`] failed write-backs
/// (`WB_FAILED`): they carry this instead of `DIRTY_MARK`, so background write-back never
/// finds them and a data-integrity write-back (`fsync`) looks for both.
pub(crate) const FAILED_MARK: Mark = Mark::M2;

/// How many write-backs of a folio may fail in a row before it is parked: it stays dirty and
/// cached (rule 6), but background write-back (the flusher, reclaim's requests, the clock's
/// sweep) no longer writes it and reclaim keeps it on the unevictable list, so that a range the
/// store always refuses (a bad sector, a full disk) costs neither I/O nor reclaim's time. A
/// write into the folio re-arms it (the count starts over); an explicit write-back (`fsync`,
/// `flush`, `sync_range`, `sync_all`, `invalidate`, the last `close`) tries it again whatever
/// the count, and one that succeeds makes it clean and evictable again. Three tries ride out a
/// transient error on the first and a retry racing it, without a fourth pass of futile I/O.
pub const WRITEBACK_MAX_TRIES: u32 = 3;

/// Bytes in a page (a base frame).
pub const PAGE_SIZE: u64 = 1 << FRAME_SHIFT;

/// The largest length a cached file may have: the store's limit rounded down to a whole page,
/// so that write-back, which writes whole pages to stores that need aligned requests, never
/// goes past the store's limit with a page the cache accepted.
pub const MAX_FILE_SIZE: u64 = crate::store::MAX_OFFSET & !(PAGE_SIZE - 1);
