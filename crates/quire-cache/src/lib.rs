//! quire — the Linux page cache, rebuilt as a Rust library.
//!
//! A [`PageCache`] caches the bytes of any number of files within one fixed memory budget,
//! the way the kernel's page cache does: folios (runs of 4 KiB frames) indexed per file in a
//! radix tree, lock-free lookups, readahead, LRU reclaim that knows the working set, dirty
//! tracking with write-back you can `fsync`, and write-back errors reported to every handle.
//! It is for storage engines, user-space file systems and anyone who wants the kernel's
//! caching under their own control: the budget, the I/O (`O_DIRECT` [stores](store)), the
//! counters.
//!
//! # Quick start
//!
//! ```
//! use quire::{CacheConfig, FileStore, IoMode, PageCache};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("data.db");
//! // One cache, one memory budget, shared by every file opened in it.
//! let cache = PageCache::new(CacheConfig::new(64 << 20))?;
//! // A file on disk, read and written with O_DIRECT where the file system allows it.
//! let file = cache.open(FileStore::create(&path, IoMode::PreferDirect)?)?;
//!
//! file.write_all_at(0, b"hello, quire")?; // into the cache; written back later
//! let mut buf = [0u8; 5];
//! file.read_exact_at(0, &mut buf)?; // served from the cache
//! assert_eq!(&buf, b"hello");
//!
//! let folio = file.read_folio(0)?; // zero copy: the cached bytes themselves
//! assert_eq!(&folio.bytes().unwrap()[..12], b"hello, quire");
//! drop(folio);
//!
//! file.fsync()?; // durable; reports a failed write-back once to each handle
//! println!("{}", cache.stats()); // what the cache holds and did, /proc/vmstat style
//! # Ok(())
//! # }
//! ```
//!
//! # The API in brief
//!
//! - Open files: [`PageCache::open`] takes any [`Store`] — [`FileStore`] (a real file,
//!   buffered or `O_DIRECT`), [`MemStore`] (memory, for tests), [`FaultyStore`] (injects
//!   errors), or your own — and returns a [`CachedFile`]. [`CachedFile::reopen`] gives another
//!   handle with its own readahead state and error reporting.
//! - Read and write by position, like `pread`/`pwrite`: [`CachedFile::read_at`],
//!   [`read_exact_at`](CachedFile::read_exact_at), [`write_at`](CachedFile::write_at) (short
//!   only after an error), [`write_all_at`](CachedFile::write_all_at),
//!   [`set_len`](CachedFile::set_len). For `std::io` code, `CachedFile` implements
//!   `std::os::unix::fs::FileExt`, [`CachedFile::cursor`] gives a [`FileCursor`] with `Read`,
//!   `Write` and `Seek`, and a [`FilemapError`] converts into an `io::Error`.
//! - Zero copy: [`CachedFile::read_folio`] lends a cached folio's bytes,
//!   [`CachedFile::read_folio_owned`] returns an [`OwnedFolio`] that borrows nothing (with the
//!   `bytes` feature, a `bytes::Bytes`), and [`CachedFile::reader`] gives a per-thread
//!   [`FileReader`] whose hits stay inside one read-side critical section.
//! - Asynchronous: [`CachedFile::read_at_async`], [`read_exact_at_async`](CachedFile::read_exact_at_async),
//!   [`read_folio_async`](CachedFile::read_folio_async) and [`write_at_async`](CachedFile::write_at_async)
//!   await misses instead of blocking (std futures, any runtime; [`filemap::block_on`] for
//!   the rest); [`CachedFile::prefetch`] puts many misses in flight from blocking code. The
//!   I/O under them is the [`bio`] engine's: io_uring, or blocking threads where it is refused.
//! - Durability: [`CachedFile::fsync`] / [`sync_range`](CachedFile::sync_range) write back and
//!   sync; [`CachedFile::flush`] writes back without syncing; [`CachedFile::close`] reports the
//!   last error. Dirty data is written back by a flusher thread after
//!   [`CacheConfig::dirty_expire`] or above [`CacheConfig::dirty_background`], and writers are
//!   throttled at [`CacheConfig::dirty_limit`].
//! - Observability: [`PageCache::stats`] returns [`CacheStats`] (frames free, cached, dirty,
//!   per LRU list, and this cache's reclaim counters); [`stats::Snapshot`] reads the global
//!   event counters, as a struct ([`stats::VmStat`]), as `(name, value)` pairs, or printed like
//!   `/proc/vmstat`.
//!
//! # Examples
//!
//! In `crates/quire-cache/examples/`, each runnable with no arguments
//! (`cargo run --release -p quire-cache --example NAME`):
//!
//! - `read_through`: a 64 MiB file read at random through an 8 MiB cache, with the hit ratio
//!   and the counters of the run.
//! - `kv_store`: a key-value store (an append-only log and an index) that syncs, survives a
//!   torn append, and rebuilds its index from the log in a new cache.
//! - `range_server`: a tokio server answering byte-range requests over TCP with
//!   [`CachedFile::read_at_async`], 64 clients checking every byte.
//!
//! # Feature flags
//!
//! | feature | what it adds |
//! |---|---|
//! | `bytes` | `OwnedFolio::into_bytes` and `From<OwnedFolio> for bytes::Bytes`: cached folios as zero-copy `Bytes` |
//! | `tracing` | [`tracing`](https://docs.rs/tracing) events at the slow paths: direct reclaim, write-back errors, dirty throttling (nothing is compiled in without it) |
//!
//! # Where each mechanism lives
//!
//! The crate is organised the way `mm/` and `fs/` are in the kernel, one module per mechanism
//! (see `docs/ARCHITECTURE.md` in the repository):
//!
//! | module | kernel counterpart | what it holds |
//! |---|---|---|
//! | [`filemap`] | `mm/filemap.c`, `mm/readahead.c`, `lib/errseq.c` | cached files: read, write, readahead, write-back |
//! | [`store`] | the block layer below a file system | backing stores |
//! | [`bio`] | `struct bio`, `blk_plug`, io_uring | the I/O engine under the stores: batches of requests in flight |
//! | [`vmscan`] | `mm/vmscan.c`, `mm/swap.c`, `mm/workingset.c` | LRU lists, reclaim, kswapd, refault detection |
//! | [`mem`] | page allocator, `struct folio` | the frame pool, buddy allocator and folios |
//! | [`mm`] | `mm/memory.c`, `mm/rmap.c`, `mm/swap_state.c` | anonymous memory and file mappings on the cache's budget: spaces, faults, fork, swap, the reverse map |
//! | [`xarray`] | `lib/xarray.c` | the multi-order radix tree indexing every cached file |
//! | [`dcache`] | `fs/dcache.c`, `fs/namei.c` | the dentry cache over a real directory tree |
//! | [`sync::bitwait`] | `folio_lock`, `folio_wait_bit_common`, `PG_waiters` | waits on bits of a flag word |
//! | [`sync::lockref`] | `lib/lockref.c` | a lock and a reference count in one word |
//! | [`sync::rcu`] | RCU read side | epoch guards for lock-free readers |
//! | [`stats`] | `/proc/vmstat` | event counters |
//!
//! Each mechanism keeps a runtime switch back to the behaviour it replaced, for `quire bench`
//! to measure both. Those switches, and the consistency checks that stop the world, come with
//! the feature `bench-internals` (which `quire bench` and the crate's own tests turn on); they
//! are not part of the stable API.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod bio;
pub mod dcache;
pub mod filemap;
pub mod mem;
pub mod mm;
pub mod stats;
pub mod store;
pub mod sync;
mod trace;
pub mod vmscan;
pub mod xarray;

pub use filemap::{
    CacheConfig, CacheStats, CachedFile, FileCursor, FileReader, FilemapError, OwnedFolio,
    PageCache,
};
pub use store::{FaultyStore, FileStore, IoMode, MemStore, OpenOptions, Store, StoreError};

/// The README's Rust blocks, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
