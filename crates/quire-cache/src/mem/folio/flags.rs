//! The flag word's bits and the frame size; the state table is in the [parent module](super).

pub use crate::sync::bitwait::{LOCKED, WAITERS};

/// The bytes hold valid data; see the [module documentation](super).
pub const UPTODATE: u64 = 1 << 2;
/// The bytes differ from the backing store.
pub const DIRTY: u64 = 1 << 3;
/// A write of the folio to the store is in flight.
pub const WRITEBACK: u64 = 1 << 4;
/// The last I/O on the folio failed.
pub const ERROR: u64 = 1 << 5;
/// Accessed since reclaim last looked at it.
pub const REFERENCED: u64 = 1 << 6;
/// On the active LRU list.
pub const ACTIVE: u64 = 1 << 7;
/// Refaulted while part of the working set.
pub const WORKINGSET: u64 = 1 << 8;
/// On an LRU list.
pub const LRU: u64 = 1 << 9;
/// Anonymous memory rather than file data.
pub const ANON: u64 = 1 << 10;
/// In the swap cache.
pub const SWAPCACHE: u64 = 1 << 11;
/// Reaching this folio triggers the next asynchronous readahead.
pub const READAHEAD: u64 = 1 << 12;
/// This descriptor heads an allocated folio.
pub const HEAD: u64 = 1 << 13;
/// Reclaim found the folio dirty or under write-back at the inactive tail: when its write-back
/// ends it is rotated to the tail, to be reclaimed next (the kernel's `PG_reclaim`).
pub const RECLAIM: u64 = 1 << 14;
/// The folio may not be reclaimed (mlocked); it lives on the unevictable list.
pub const UNEVICTABLE: u64 = 1 << 15;
/// The folio waits in a batch to be added to an LRU list (see [`crate::vmscan`]).
pub const LRU_PENDING: u64 = 1 << 20;
/// Where the multi-generational LRU keeps a folio's generation (plus one; 0 for none).
pub const GEN_SHIFT: u32 = 21;
/// The generation's bits in the flag word.
pub const GEN_MASK: u64 = 0x7 << GEN_SHIFT;
/// Where the access count beyond the first (the tier's source) is kept.
pub const REFS_SHIFT: u32 = 24;
/// The refs' bits in the flag word.
pub const REFS_MASK: u64 = 0x3 << REFS_SHIFT;
/// The largest refs value.
pub const MAX_REFS: u64 = 3;
/// A recent refault the loop protection tests when it is added; on a probation list, the folio
/// had its one extra turn (see `vmscan::lru_gen`).
pub const PROBATION: u64 = 1 << 26;
/// Read in over a shadow entry that still tells something — a refault within reach, or one with
/// a reuse on record — so not to be added as a first read (see `vmscan::lru_gen`).
pub const REFAULTED: u64 = 1 << 27;
/// Write-back of this dirty folio failed too many times in a row: background write-back no
/// longer offers it to the store and reclaim keeps it on the unevictable list, until a write
/// into it or a successful write-back (an `fsync`'s retry) re-arms it (see `filemap`'s
/// write-back).
pub const WB_FAILED: u64 = 1 << 28;
/// Where the order is stored in the flag word.
pub const ORDER_SHIFT: u32 = 16;
/// The order's bits in the flag word.
pub const ORDER_MASK: u64 = 0xf << ORDER_SHIFT;
/// The bits upper layers may use (with read-modify-write operations on the word).
pub const OWNER_BITS: u64 = 0xffff_ffff << 32;

/// The owner bits that `mm` keeps a folio's mapcount in (how many page-table entries of spaces
/// map it); zero for a folio no space maps. Read by the layers below `mm` (reclaim,
/// write-back, truncation), which must unmap a mapped folio before they free or change it.
pub(crate) const MAPCOUNT_BITS: u64 = 0xffff << 32;

/// Size of one frame in bytes.
pub const FRAME_SIZE: usize = 4096;
/// log2 of [`FRAME_SIZE`].
pub const FRAME_SHIFT: u32 = 12;
