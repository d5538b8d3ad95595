//! Memory: the frame pool, the buddy allocator and folio descriptors (rules 1–3 of docs/RULES.md).
//!
//! - [`pool`]: one anonymous mapping of `capacity` bytes cut into 4 KiB frames, 2 MiB aligned,
//!   with a descriptor ([`Folio`]) per frame — the memmap.
//! - `buddy`: the allocator of naturally aligned blocks of 2^order frames (order 0 to 9), with
//!   sharded caches for order 0.
//! - [`dirtybit`]: which frames were written since last cleared — the MMU's record, read through
//!   userfaultfd's asynchronous write protection and `PAGEMAP_SCAN`, or a software bitmap.
//! - [`folio`]: the descriptor's flag word, reference count and lock/wait operations, the owned
//!   reference [`FolioRef`], the locked guard [`FolioGuard`] and [`FrozenFolio`].
//!
//! ```
//! use quire::mem::FramePool;
//! let pool = FramePool::new(4 << 20).unwrap();
//! let folio = pool.alloc(0).unwrap();
//! let mut guard = folio.lock();
//! guard.bytes_mut().unwrap().copy_from_slice(&[7; 4096]);
//! guard.mark_uptodate();
//! let folio = guard.unlock();
//! assert_eq!(folio.bytes().unwrap()[0], 7);
//! ```

// Public under loom, where the models of tests/loom_borrow.rs and tests/loom_seq.rs drive it;
// the crate's own otherwise, its items still written `pub` for the models.
#[cfg(not(loom))]
#[allow(unreachable_pub)]
pub(crate) mod borrow;
#[cfg(loom)]
#[doc(hidden)]
pub mod borrow;
// The allocator itself is reached only by the tests and the loom models; a library user sees its
// counters through `FramePool::stats`.
#[cfg(any(feature = "bench-internals", loom))]
pub mod buddy;
#[cfg(not(any(feature = "bench-internals", loom)))]
// Its items are written `pub` for the tests and the models; its size accessors are theirs alone.
#[allow(unreachable_pub, dead_code)]
pub(crate) mod buddy;
pub mod dirtybit;
pub mod folio;
pub mod pool;

pub use buddy::BuddyStats;
#[cfg(any(feature = "bench-internals", loom))]
pub use buddy::{Buddy, MAX_ORDER};
pub use dirtybit::{DirtyBitKind, DirtyBitMode, DirtyBits};
pub use folio::{Folio, FolioGuard, FolioRef, FreeTicket, FrozenFolio, FRAME_SHIFT, FRAME_SIZE};
pub use pool::{FramePool, FreeBatch, PoolError};
