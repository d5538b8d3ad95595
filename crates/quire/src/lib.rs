//! quire — the Linux page cache, rebuilt as a Rust library.
//!
//! The crate is organised the way `mm/` and `fs/` are in the kernel, one module per mechanism
//! (see `docs/ARCHITECTURE.md`):
//!
//! | module | kernel counterpart | what it holds |
//! |---|---|---|
//! | [`sync::bitwait`] | `folio_lock`, `folio_wait_bit_common`, `PG_waiters` | waits on bits of a flag word |
//! | [`sync::lockref`] | `lib/lockref.c` | a lock and a reference count in one word |
//! | [`sync::rcu`] | RCU read side | epoch guards for lock-free readers |
//! | [`xarray`] | `lib/xarray.c` | the multi-order radix tree indexing every cached file |
//! | [`dcache`] | `fs/dcache.c`, `fs/namei.c` | the dentry cache over a real directory tree |
//! | [`filemap`] | `mm/filemap.c`, `mm/readahead.c`, `lib/errseq.c` | cached files: read, write, readahead, write-back |
//! | [`vmscan`] | `mm/vmscan.c`, `mm/swap.c`, `mm/workingset.c` | LRU lists, reclaim, kswapd, refault detection |
//! | [`mem`] | page allocator, `struct folio` | the frame pool, buddy allocator and folios |
//! | [`store`] | the block layer below a file system | backing stores |
//! | [`stats`] | `/proc/vmstat` | event counters |
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

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
