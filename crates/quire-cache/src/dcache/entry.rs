//! One cached name: [`Dentry`], the counted reference [`DentryRef`], and the per-entry sequence
//! count that lock-free walkers validate against.
//!
//! # Layout
//!
//! A dentry is two cache lines (`#[repr(C, align(64))]`). The first holds what a lock-free walk
//! reads on every component; the second holds the reference count and what only the lock
//! holders touch, so that reference traffic on a busy directory does not keep invalidating the
//! line that walkers passing through it are reading (the kernel orders `struct dentry` the same
//! way).
//!
//! | line | field        | written by                         | read lock-free by            |
//! |------|--------------|------------------------------------|------------------------------|
//! | 1    | `seq`        | lock holder (rename, drop, kill, instantiate) | walks, `dget_parent` |
//! | 1    | `flags`      | lock holder                        | walks, `dput`, `path_of`     |
//! | 1    | `parent`     | lock holder (rename)               | walks, `dget_parent`, `path_of` |
//! | 1    | `name`       | lock holder (rename)               | hash lookups, `path_of`      |
//! | 1    | `hash_next`  | bucket-lock holder                 | hash lookups                 |
//! | 1    | `checked_at` | revalidation (under the directory lock) | walks (age check)       |
//! | 1    | `dir_fd`     | once, by compare-and-swap          | system calls in the directory |
//! | 2    | `lockref`    | lock-free gets/puts, lock holder   | —                            |
//! | 2    | `dev`, `ino` | lock holder (instantiate)          | `identity` (under `seq`)     |
//! | 2    | `link`       | once, under the directory lock     | symlink walks                |
//! | 2    | `lru_prev/next` | LRU-lock holder                 | —                            |
//!
//! Line 1 is padded to 64 bytes, so the count starts line 2; a compile-time assertion checks
//! both offsets.
//!
//! "Lock holder" is the holder of the entry's [`LockRef`] lock (the kernel's `d_lock`): every
//! change of `flags`, `parent`, `name` or the identity is made under it, inside a write section
//! of `seq` when a lock-free reader could be misled by a half-made change.
//!
//! # The flags word
//!
//! | bits | name         | meaning                                                          |
//! |------|--------------|------------------------------------------------------------------|
//! | 0..=2| kind         | 0 negative (the name does not exist), 1 directory, 2 regular file, 3 symlink, 4 other |
//! | 3    | `HASHED`     | in the hash table: lookups can find it; cleared by unlink, rename-over, invalidation and kill |
//! | 4    | `ON_LRU`     | on the LRU list of unused entries (the list may lag: an entry in use may still be on it) |
//! | 5    | `REFERENCED` | used since the LRU last looked at it: it gets a second chance     |
//! | 6    | `ROOT`       | the cache's root: no parent, never hashed in a bucket, never killed while the cache lives |

use std::ffi::OsString;
use std::fmt;
use std::ops::Deref;
use std::os::unix::ffi::OsStringExt;
use std::ptr::NonNull;

use crate::sync::lockref::LockRef;
use crate::sync::loom::{fence, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use crate::sync::rcu;

use super::tree::Core;

/// What kind of file a positive entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// Anything else (device, FIFO, socket).
    Other,
}

/// Which file an entry names: the file system's identity of its inode, as `statx` reports it.
/// Two entries with equal identities name the same file (hard links); an entry whose identity no
/// longer matches the file system is stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The device (`major << 32 | minor`).
    pub dev: u64,
    /// The inode number.
    pub ino: u64,
    /// The file type.
    pub kind: FileKind,
}

pub(crate) const KIND_MASK: u32 = 0b111;
pub(crate) const KIND_NEGATIVE: u32 = 0;
pub(crate) const KIND_DIR: u32 = 1;
pub(crate) const KIND_FILE: u32 = 2;
pub(crate) const KIND_SYMLINK: u32 = 3;
pub(crate) const KIND_OTHER: u32 = 4;
pub(crate) const HASHED: u32 = 1 << 3;
pub(crate) const ON_LRU: u32 = 1 << 4;
pub(crate) const REFERENCED: u32 = 1 << 5;
pub(crate) const ROOT: u32 = 1 << 6;

pub(crate) fn kind_bits(ident: Option<Identity>) -> u32 {
    match ident.map(|i| i.kind) {
        None => KIND_NEGATIVE,
        Some(FileKind::Dir) => KIND_DIR,
        Some(FileKind::File) => KIND_FILE,
        Some(FileKind::Symlink) => KIND_SYMLINK,
        Some(FileKind::Other) => KIND_OTHER,
    }
}

fn kind_of_bits(bits: u32) -> Option<FileKind> {
    match bits & KIND_MASK {
        KIND_DIR => Some(FileKind::Dir),
        KIND_FILE => Some(FileKind::File),
        KIND_SYMLINK => Some(FileKind::Symlink),
        KIND_OTHER => Some(FileKind::Other),
        _ => None,
    }
}

/// A sequence count (the kernel's `seqcount_t`): even while the protected fields are stable, odd
/// while a writer changes them. Writers are serialised by a lock the caller holds.
///
/// The reader's protocol is `s = raw_begin()`, read the fields with `Relaxed` atomics, then
/// `retry(s)`: `false` means the fields read were a consistent snapshot. `raw_begin` does not
/// wait for an odd count; it clears the low bit so that a read that overlapped a writer fails its
/// `retry`. `invalidate` bumps the count by two without an odd phase: it makes every snapshot
/// taken before it fail, for changes (unhashing, killing) after which a reader must simply look
/// again.
pub(crate) struct SeqCount(AtomicU32);

impl SeqCount {
    pub(crate) fn new() -> Self {
        SeqCount(AtomicU32::new(0))
    }

    /// Starts a read; see the type's documentation.
    #[inline]
    pub(crate) fn raw_begin(&self) -> u32 {
        self.0.load(Ordering::Acquire) & !1
    }

    /// Starts a read, spinning while a writer is active.
    #[inline]
    pub(crate) fn begin(&self) -> u32 {
        loop {
            let s = self.0.load(Ordering::Acquire);
            if s & 1 == 0 {
                return s;
            }
            crate::sync::loom::spin_loop();
        }
    }

    /// Whether the fields read since `begin` may be inconsistent (a writer came between).
    #[inline]
    pub(crate) fn retry(&self, s: u32) -> bool {
        // The Acquire fence keeps the Relaxed reads of the fields before this load.
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) != s
    }

    /// Opens a write section. The caller holds the lock that serialises writers.
    #[inline]
    pub(crate) fn write_begin(&self) {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Relaxed);
        // The Release fence keeps the odd count before the field writes that follow.
        fence(Ordering::Release);
    }

    /// Closes a write section.
    #[inline]
    pub(crate) fn write_end(&self) {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(1), Ordering::Release);
    }

    /// Makes every earlier snapshot fail its `retry`. The caller holds the writers' lock.
    #[inline]
    pub(crate) fn invalidate(&self) {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s.wrapping_add(2), Ordering::Release);
    }
}

/// A name with its hash. Immutable once published; a rename installs a new one and hands the old
/// one to the epoch.
pub(crate) struct Name {
    pub(crate) hash: u64,
    pub(crate) bytes: Box<[u8]>,
}

/// The target of a symbolic link, read once and kept (a symlink's target never changes: a
/// different target means a different inode, hence a different entry).
pub(crate) struct LinkTarget(pub(crate) Box<[u8]>);

/// The walk line's fields as laid out at the start of [`Dentry`], to size the padding that puts
/// the reference count on the second line.
#[repr(C)]
struct Line1 {
    _seq: SeqCount,
    _flags: AtomicU32,
    _parent: AtomicPtr<Dentry>,
    _name: AtomicPtr<Name>,
    _hash_next: AtomicPtr<Dentry>,
    _checked_at: AtomicU64,
    _dir_fd: std::sync::atomic::AtomicI32,
}

/// Padding after the walk line's fields, up to the next 64-byte boundary.
const LINE1_PAD: usize = (64 - std::mem::size_of::<Line1>() % 64) % 64;

// The count starts the second line, and an entry is two lines (loom's atomics are larger).
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::offset_of!(Dentry, lockref) == 64);
    assert!(std::mem::size_of::<Dentry>() == 128);
};

/// One entry of the dentry cache: a name in a directory, positive (naming a file whose
/// [`Identity`] it records) or negative (recording that the name does not exist).
///
/// A `Dentry` is only ever seen through a [`DentryRef`] (which keeps it alive) or inside the
/// cache. See the module documentation of `dcache` for the whole design and this file's header
/// for the field table.
#[repr(C, align(64))]
pub struct Dentry {
    // ---- line 1: what lock-free walks read ----
    pub(crate) seq: SeqCount,
    pub(crate) flags: AtomicU32,
    pub(crate) parent: AtomicPtr<Dentry>,
    pub(crate) name: AtomicPtr<Name>,
    pub(crate) hash_next: AtomicPtr<Dentry>,
    /// When the entry was last confirmed against the file system (ms since the cache started).
    pub(crate) checked_at: AtomicU64,
    /// A directory entry's own `O_PATH` descriptor, or -1: set once (compare-and-swap from
    /// -1) when the cache holds directory descriptors, closed when the entry is freed. Not part
    /// of any lock-free protocol, hence a plain `std` atomic. Written once, read often: it may
    /// share the walkers' line.
    pub(crate) dir_fd: std::sync::atomic::AtomicI32,
    _line1_pad: [u8; LINE1_PAD],
    // ---- line 2: the count and what only lock holders touch ----
    pub(crate) lockref: LockRef,
    pub(crate) dev: AtomicU64,
    pub(crate) ino: AtomicU64,
    pub(crate) link: AtomicPtr<LinkTarget>,
    pub(crate) lru_prev: AtomicPtr<Dentry>,
    pub(crate) lru_next: AtomicPtr<Dentry>,
}

impl Dentry {
    /// A new entry with one reference (the caller's), not yet in the hash table.
    pub(crate) fn alloc(
        core: &Core,
        parent: *mut Dentry,
        name: &[u8],
        hash: u64,
        ident: Option<Identity>,
        extra_flags: u32,
        now: u64,
    ) -> NonNull<Dentry> {
        let name = Box::into_raw(Box::new(Name {
            hash,
            bytes: name.into(),
        }));
        let (dev, ino) = ident.map_or((0, 0), |i| (i.dev, i.ino));
        let d = Box::new(Dentry {
            seq: SeqCount::new(),
            flags: AtomicU32::new(kind_bits(ident) | extra_flags),
            parent: AtomicPtr::new(parent),
            name: AtomicPtr::new(name),
            hash_next: AtomicPtr::new(std::ptr::null_mut()),
            checked_at: AtomicU64::new(now),
            _line1_pad: [0; LINE1_PAD],
            lockref: LockRef::with_policy(1, core.policy()),
            dev: AtomicU64::new(dev),
            ino: AtomicU64::new(ino),
            link: AtomicPtr::new(std::ptr::null_mut()),
            lru_prev: AtomicPtr::new(std::ptr::null_mut()),
            lru_next: AtomicPtr::new(std::ptr::null_mut()),
            dir_fd: std::sync::atomic::AtomicI32::new(-1),
        });
        NonNull::from(Box::leak(d))
    }

    /// The name, read under the epoch guard the caller holds.
    #[inline]
    pub(crate) fn name_in<'g>(&self, _guard: &'g rcu::Guard) -> &'g Name {
        // SAFETY: `name` always points to a live `Name`; a rename that replaces it hands the old
        // one to the epoch, so it stays allocated while `_guard` (pinned before this load) lives.
        unsafe { &*self.name.load(Ordering::Acquire) }
    }

    /// The parent, or null for the root.
    #[inline]
    pub(crate) fn parent_ptr(&self) -> *mut Dentry {
        self.parent.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn kind_bits(&self) -> u32 {
        self.flags.load(Ordering::Acquire) & KIND_MASK
    }

    /// The entry's name (the root's is `/`).
    pub fn name(&self) -> OsString {
        let g = rcu::pin();
        OsString::from_vec(self.name_in(&g).bytes.to_vec())
    }

    /// The file the entry names, or `None` for a negative entry.
    pub fn identity(&self) -> Option<Identity> {
        loop {
            let s = self.seq.begin();
            let kind = kind_of_bits(self.flags.load(Ordering::Relaxed));
            let dev = self.dev.load(Ordering::Relaxed);
            let ino = self.ino.load(Ordering::Relaxed);
            if !self.seq.retry(s) {
                return kind.map(|kind| Identity { dev, ino, kind });
            }
        }
    }

    /// The kind of file, or `None` for a negative entry.
    pub fn kind(&self) -> Option<FileKind> {
        kind_of_bits(self.kind_bits())
    }

    /// Whether the entry records that its name does not exist.
    pub fn is_negative(&self) -> bool {
        self.kind_bits() == KIND_NEGATIVE
    }

    /// Whether the entry names a directory.
    pub fn is_dir(&self) -> bool {
        self.kind_bits() == KIND_DIR
    }

    /// Whether the entry is still reachable by lookups. `false` once its name was unlinked,
    /// renamed over, or found stale; such an entry stays valid for those who hold references,
    /// and [`Dcache::path_of`](super::Dcache::path_of) marks its path ` (deleted)`.
    pub fn is_hashed(&self) -> bool {
        self.flags.load(Ordering::Acquire) & HASHED != 0
    }

    /// Whether this is the cache's root.
    pub fn is_root(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & ROOT != 0
    }

    /// The reference count at some recent moment (racy; cached children hold one reference on
    /// their parent each).
    pub fn ref_count(&self) -> i32 {
        self.lockref.count()
    }
}

impl Drop for Dentry {
    fn drop(&mut self) {
        let name = self.name.load(Ordering::Relaxed);
        // SAFETY: the entry owns its current name (from `Box::into_raw`), and is being dropped
        // after its grace period, so nobody reads it any more.
        drop(unsafe { Box::from_raw(name) });
        let link = self.link.load(Ordering::Relaxed);
        if !link.is_null() {
            // SAFETY: as for the name: the link target was installed once with `Box::into_raw`
            // and belongs to this entry.
            drop(unsafe { Box::from_raw(link) });
        }
        let fd = *self.dir_fd.get_mut();
        if fd >= 0 {
            use std::os::fd::FromRawFd;
            // SAFETY: the entry owns the descriptor (installed once from `into_raw_fd`), and
            // lenders only lend it while they hold a reference, which a freed entry has not.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        }
    }
}

impl fmt::Debug for Dentry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dentry")
            .field("name", &self.name())
            .field("identity", &self.identity())
            .field("hashed", &self.is_hashed())
            .field("count", &self.ref_count())
            .finish()
    }
}

/// A counted reference to a [`Dentry`] (the kernel's `dget`/`dput` pair as an owned value):
/// while it lives, the entry is not freed. `Clone` takes another reference (lock-free),
/// `Drop` puts it (the kernel's `dput`; see the [module documentation](super)).
#[doc(alias("dget", "dput"))]
pub struct DentryRef<'a> {
    pub(crate) core: &'a Core,
    pub(crate) d: NonNull<Dentry>,
}

// SAFETY: a `DentryRef` is a counted pointer to a `Dentry`, whose shared state is all atomics and
// locks, and a shared reference to the `Core`, which is `Sync`; the count is changed only with
// atomic operations, so references may be moved and shared between threads.
unsafe impl Send for DentryRef<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for DentryRef<'_> {}

impl<'a> DentryRef<'a> {
    /// Wraps a pointer whose reference the caller hands over.
    #[inline]
    pub(crate) fn adopt(core: &'a Core, d: NonNull<Dentry>) -> Self {
        DentryRef { core, d }
    }

    /// Takes another reference (the kernel's `dget`; lock-free under `RefPolicy::Cmpxchg`).
    #[inline]
    pub fn dget(&self) -> DentryRef<'a> {
        self.lockref.get();
        DentryRef {
            core: self.core,
            d: self.d,
        }
    }

    /// A reference to the entry's parent (the kernel's `dget_parent`). The root's parent is
    /// itself. Lock-free unless a rename moved the entry while the parent was being read.
    #[inline]
    pub fn dget_parent(&self) -> DentryRef<'a> {
        self.core.dget_parent(self)
    }

    /// Gives up the reference without putting it, returning the pointer; the entry stays alive
    /// until [`Dcache::ref_from_raw`](super::Dcache::ref_from_raw) turns it back into a `DentryRef`
    /// that is dropped.
    /// (For front ends that hand out entries by address, as FUSE does with node ids.)
    pub fn into_raw(self) -> NonNull<Dentry> {
        let d = self.d;
        std::mem::forget(self);
        d
    }

    /// Takes back a reference given up by [`into_raw`](Self::into_raw).
    ///
    /// # Safety
    ///
    /// `d` must come from `into_raw` on a reference of the cache that `core` belongs to, and each
    /// such pointer may be taken back once.
    pub(crate) unsafe fn from_raw(core: &'a Core, d: NonNull<Dentry>) -> Self {
        DentryRef { core, d }
    }

    /// Whether two references point to the same entry.
    pub fn ptr_eq(a: &DentryRef<'_>, b: &DentryRef<'_>) -> bool {
        a.d == b.d
    }
}

impl Deref for DentryRef<'_> {
    type Target = Dentry;

    #[inline]
    fn deref(&self) -> &Dentry {
        // SAFETY: the reference we hold keeps the entry from being killed, so it is not freed.
        unsafe { self.d.as_ref() }
    }
}

impl Clone for DentryRef<'_> {
    #[inline]
    fn clone(&self) -> Self {
        self.dget()
    }
}

impl Drop for DentryRef<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we hold one reference on the entry and give it up here, once.
        unsafe { self.core.dput(self.d) }
    }
}

impl fmt::Debug for DentryRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
