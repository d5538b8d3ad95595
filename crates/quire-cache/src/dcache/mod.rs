//! The dentry cache (`fs/dcache.c`, `fs/namei.c`): path lookup over a real directory tree,
//! with lockref references and a lock-free path walk.
//!
//! A [`Dcache`] caches the names under one directory of the machine's file system (its *root*;
//! paths are resolved inside it, `/` being the root itself). Each cached name is a [`Dentry`]:
//! its name, its parent, the [`Identity`] of the file it names (device, inode number, type) or
//! nothing for a *negative* entry (the name is known not to exist), and a
//! [`LockRef`](crate::sync::lockref::LockRef) — a lock and a reference count in one word.
//! References are [`DentryRef`]s. Lookups that find everything cached make no system call.
//!
//! # Pieces
//!
//! - `entry`: the [`Dentry`] layout (two cache lines: what walkers read, then the count and what
//!   only lock holders touch), its flags word, and the per-entry sequence count `seq`.
//! - `tree`: the core without the file system — the hash table of `(parent, name)` → entry with
//!   lock-free chains, the LRU, the rename sequence lock, and the reference protocol (`dput`,
//!   `dget_parent`, kill, `d_move`, `path_of`). The loom model runs this code.
//! - this file: the file-system side — walks, misses (`statx`), symlinks (`readlinkat`),
//!   revalidation, and `create`/`mkdir`/`symlink`/`unlink`/`rmdir`/`rename`.
//!
//! # The walk
//!
//! [`Dcache::walk`] first tries the *lock-free walk* (the kernel's RCU walk): under one epoch
//! guard, from the root, each component is looked up in the hash table without a lock or a
//! reference; each entry passed is validated with its sequence count, hand over hand — the child
//! is found (parent and name compared under the child's count), then the parent's count is
//! checked unchanged, so the step was valid at one moment. Only the final entry gets a
//! reference (`get_not_dead`: an unused entry on the LRU has count zero and may be taken), after
//! which its sequence count is checked once more. `.` and empty components are skipped, `..`
//! moves to the parent and never above the root. Any doubt — a miss, a changed count, a symlink
//! to follow, an entry due for revalidation — abandons it (nothing to undo: no references were
//! taken) for the *reference walk*, which takes a reference at each step, looks names up in the
//! table under each candidate's lock, goes to the file system on a miss, follows symlinks, and
//! revalidates. Counters: `dcache_fast_walks`, `dcache_slow_walks`, `dcache_misses`.
//!
//! # References
//!
//! `DentryRef::dget` is a lock-free increment. `dput` is a lock-free `put_return` while the
//! count stays positive; at zero the entry is kept (left hashed, put on the LRU, marked
//! referenced) if it is hashed — with no lock at all when it already is all of that — and
//! otherwise killed: marked dead, unhashed, handed to the epoch, and its parent's reference put,
//! iteratively up the tree. `dget_parent` reads the parent under the guard, takes
//! `get_not_zero` on it and checks the child's sequence count unchanged (a rename bumps it);
//! otherwise it takes the parent's lock and re-checks that it is still the parent. Each entry's
//! `LockRef` uses the [`RefPolicy`] of the configuration: `Cmpxchg` (lockref, the default) or,
//! with the feature `bench-internals`, `Spinlock` (every count change under the entry's lock,
//! the dcache before lockref).
//!
//! # Paths and renames
//!
//! [`Dcache::path_of`] rebuilds an entry's path by following parents without references, under
//! a global rename sequence count that every rename holds odd while it moves entries; a read
//! that overlapped a rename is retried, and the third try takes the rename mutex. An entry
//! that is no longer hashed (its name was unlinked or renamed over, or it was found stale) — or
//! has such an ancestor — gets the suffix ` (deleted)`, as `/proc/*/cwd` shows it, rather than
//! an error: `path_of` stays infallible for logging and display, and [`Dentry::is_hashed`] or
//! [`Dcache::fs_path_of`] tell callers who must know.
//!
//! # Keeping the cache true
//!
//! Changes made through the cache hold the cache's namespace lock (shared; exclusive for
//! `rename`) and the directory's lock, act on the real directory first, and then update the
//! entries: a created name turns its negative entry positive in place, a removed name's entry is
//! unhashed (holders keep it, as "deleted") and a negative entry takes its place, a renamed entry
//! moves — with its cached children, which point to it — and whatever had the new name is
//! unhashed. Misses are resolved under the same locks, so one name never gets two live entries.
//!
//! Changes made behind the cache's back are caught by *revalidation by age*: an entry whose last
//! check against the file system is older than [`DcacheConfig::revalidate_after`] is checked
//! again (`statx` of its name in its parent) when a lookup reaches it; if the identity (device,
//! inode, type) differs, or a negative entry's name now exists, or a positive entry's name is
//! gone, the entry is unhashed and a new one made from what the file system says. `Some(ZERO)`
//! checks on every lookup (nothing stale is ever returned, at the price of a system call per
//! component); `None` trusts the cache until it changes through it. Permissions are checked by
//! the file system when an entry is looked up or revalidated, not on cached walks. System calls
//! on cached directories go through `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the
//! root, so a directory swapped for a symlink behind the cache's back cannot lead outside the
//! root.
//!
//! # Front ends
//!
//! A file system that serves the directory through the cache (FUSE) needs more than paths:
//! [`DcacheConfig::hold_dir_fds`] keeps a descriptor per cached directory, [`Dcache::lookup_stat`]
//! answers a lookup with fresh attributes, [`Dcache::with_dir`] and [`Dcache::with_name`] run the
//! front end's own system calls relative to a directory descriptor (never by path), and
//! [`Dcache::make_at`] and [`Dcache::rename_at2`] cover creation with any mode or node type,
//! hard links, and `RENAME_NOREPLACE`/`RENAME_EXCHANGE`.
//!
//! # Symbolic links
//!
//! Followed by the reference walk (in the middle of a path always, at its end unless
//! [`Dcache::walk_nofollow`]), up to [`MAX_SYMLINKS`] in one walk, `ELOOP` past that. A target
//! is read once and kept with the entry. An absolute target starts again from the cache's root,
//! and `..` stops at the root, so a link can never lead outside it.

mod entry;
mod error;
mod namei;
mod path;
#[cfg(loom)]
pub mod tree;
// The crate's own except under loom, where tests/loom_dcache.rs models it: its items are
// written `pub` for the model.
#[cfg(not(loom))]
#[allow(unreachable_pub)]
mod tree;

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Statx, StatxFlags, CWD};
use rustix::io::Errno;

pub use crate::sync::lockref::RefPolicy;
pub use entry::{Dentry, DentryRef, FileKind, Identity};
pub use error::DcacheError;

use crate::stats::{self, Event};
use crate::sync::loom::{Mutex, MutexGuard, Ordering};
use crate::sync::rcu;
use entry::{LinkTarget, KIND_DIR, KIND_NEGATIVE, KIND_SYMLINK};
use path::{
    check_name, check_path, has_trailing_slash, hash_component, hash_name, split_last, Components,
};
use tree::Core;

/// How many symbolic links one walk follows before it fails with `ELOOP` (Linux's limit).
pub const MAX_SYMLINKS: u32 = 40;

/// Directory locks are striped over this many mutexes, by the directory entry's address.
const DIR_LOCKS: usize = 64;

/// How a [`Dcache`] behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcacheConfig {
    /// The policy of every entry's reference count: [`RefPolicy::Cmpxchg`] (lockref, the
    /// default) or `RefPolicy::Spinlock` (the count behind the entry's lock, as before lockref:
    /// a "before" policy for `quire bench`).
    #[cfg(feature = "bench-internals")]
    pub ref_policy: RefPolicy,
    /// How many unused entries (negative ones included) are kept, at most about; past that the
    /// LRU evicts the coldest. Zero keeps none: every entry dies with its last reference.
    pub max_unused: usize,
    /// Buckets of the hash table (rounded up to a power of two).
    pub hash_buckets: usize,
    /// How old an entry's last check against the file system may be before a lookup checks it
    /// again; `None` never re-checks. See the module documentation.
    pub revalidate_after: Option<Duration>,
    /// Whether directory entries keep a descriptor of their directory (`O_PATH`), opened the
    /// first time a system call needs it (after checking that it is the directory the entry
    /// names) and closed when the entry is freed. System calls in a cached directory then need
    /// no path walk from the root, and a directory renamed or removed behind the cache's back
    /// is still the one its entry's holders act on. Costs one descriptor per cached directory
    /// (raise `RLIMIT_NOFILE` accordingly). Default `false`.
    pub hold_dir_fds: bool,
}

impl Default for DcacheConfig {
    fn default() -> Self {
        DcacheConfig {
            #[cfg(feature = "bench-internals")]
            ref_policy: RefPolicy::Cmpxchg,
            max_unused: 1 << 16,
            hash_buckets: 1 << 16,
            revalidate_after: Some(Duration::from_secs(1)),
            hold_dir_fds: false,
        }
    }
}

/// A dentry cache over one directory tree; see the [module documentation](self).
pub struct Dcache {
    core: Core,
    root_dir: PathBuf,
    root_fd: OwnedFd,
    config: DcacheConfig,
    revalidate_ms: Option<u64>,
    start: Instant,
    /// The namespace lock: shared by every change and miss, exclusive for renames, so that a
    /// path rebuilt for a system call stays true while the call runs.
    ns: RwLock<()>,
    /// Serialise misses and changes in one directory (striped by its entry's address).
    dir_locks: Box<[Mutex<()>]>,
}

/// What the lock-free walk concluded.
enum Fast<'a> {
    Found(DentryRef<'a>),
    NotFound,
    NotDir,
    /// Not sure: take the reference walk.
    Bail,
}

/// A directory to make system calls in: a descriptor the cache holds (the root's, or one a
/// directory entry keeps), or one opened for the call.
enum DirFd<'a> {
    Borrowed(BorrowedFd<'a>),
    Owned(OwnedFd),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Borrowed(fd) => *fd,
            DirFd::Owned(fd) => fd.as_fd(),
        }
    }
}

impl Identity {
    /// The identity of the file `st` describes (from `statx` with at least `STATX_TYPE` and
    /// `STATX_INO`).
    pub fn from_statx(st: &Statx) -> Identity {
        identity_of(st)
    }
}

fn identity_of(st: &Statx) -> Identity {
    let kind = match FileType::from_raw_mode(u32::from(st.stx_mode)) {
        FileType::Directory => FileKind::Dir,
        FileType::RegularFile => FileKind::File,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    };
    Identity {
        dev: (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
        ino: st.stx_ino,
        kind,
    }
}

const STATX_MASK: StatxFlags = StatxFlags::TYPE.union(StatxFlags::INO);

fn join(dir: &Path, name: &[u8]) -> PathBuf {
    dir.join(OsStr::from_bytes(name))
}

impl Dcache {
    /// A cache over the directory `root_dir` (opened now; the cache keeps it open).
    pub fn new(root_dir: impl AsRef<Path>, config: DcacheConfig) -> Result<Dcache, DcacheError> {
        let root_dir = root_dir.as_ref().to_path_buf();
        if root_dir.as_os_str().is_empty() {
            return Err(DcacheError::EmptyPath);
        }
        let root_fd = rustix::fs::openat(
            CWD,
            &root_dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| DcacheError::from_errno(e, &root_dir))?;
        let st = rustix::fs::statx(&root_fd, "", AtFlags::EMPTY_PATH, STATX_MASK)
            .map_err(|e| DcacheError::from_errno(e, &root_dir))?;
        #[cfg(feature = "bench-internals")]
        let policy = config.ref_policy;
        #[cfg(not(feature = "bench-internals"))]
        let policy = RefPolicy::default();
        let core = Core::new(
            policy,
            config.max_unused,
            config.hash_buckets,
            identity_of(&st),
        );
        Ok(Dcache {
            core,
            root_dir,
            root_fd,
            revalidate_ms: config
                .revalidate_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            config,
            start: Instant::now(),
            ns: RwLock::new(()),
            dir_locks: (0..DIR_LOCKS).map(|_| Mutex::new(())).collect(),
        })
    }

    /// The directory the cache is over.
    pub fn root_dir(&self) -> &Path {
        &self.root_dir
    }

    /// The configuration the cache was made with.
    pub fn config(&self) -> &DcacheConfig {
        &self.config
    }

    /// A reference to the root entry.
    pub fn root(&self) -> DentryRef<'_> {
        self.core.root_ref()
    }

    /// Entries allocated and not yet freed, the root included.
    pub fn nr_dentry(&self) -> usize {
        self.core.nr_dentry()
    }

    /// Entries on the LRU (unused ones, and some used since they were put there).
    pub fn nr_unused(&self) -> usize {
        self.core.nr_unused()
    }

    /// Evicts up to `nr` unused entries (coldest first, with a second chance for recently used
    /// ones); returns how many were freed.
    #[doc(alias = "prune_dcache_sb")]
    pub fn shrink(&self, nr: usize) -> usize {
        self.core.shrink(nr)
    }

    /// Evicts every unused entry; afterwards only entries in use and their ancestors remain.
    /// Returns how many were freed.
    #[doc(alias = "shrink_dcache_sb")]
    pub fn shrink_all(&self) -> usize {
        self.core.shrink_all()
    }

    /// References to every hashed entry (the root excepted). Exact when nothing changes the
    /// cache concurrently.
    pub fn cached(&self) -> Vec<DentryRef<'_>> {
        self.core.cached()
    }

    /// Takes back a reference given up by [`DentryRef::into_raw`].
    ///
    /// # Safety
    ///
    /// `d` comes from `into_raw` on a reference of this cache, and is taken back once.
    pub unsafe fn ref_from_raw(&self, d: NonNull<Dentry>) -> DentryRef<'_> {
        // SAFETY: forwarded from the caller.
        unsafe { self.core.ref_from_raw(d) }
    }

    /// The path of `d` inside the cache, starting with `/`, without taking references; with the
    /// suffix ` (deleted)` if `d` (or an ancestor) is no longer hashed. `d` should belong to this
    /// cache: for an entry of another cache the result is that cache's path, but not protected
    /// against that cache's concurrent renames.
    #[doc(alias = "dentry_path_raw")]
    pub fn path_of(&self, d: &Dentry) -> PathBuf {
        let (mut p, deleted) = self.core.path_of(d);
        if deleted {
            p.extend_from_slice(b" (deleted)");
        }
        PathBuf::from(OsString::from_vec(p))
    }

    /// The path of `d` on the machine's file system (under [`root_dir`](Self::root_dir)), or
    /// `None` if it is deleted.
    pub fn fs_path_of(&self, d: &Dentry) -> Option<PathBuf> {
        let (p, deleted) = self.core.path_of(d);
        (!deleted).then(|| join(&self.root_dir, &p[1..]))
    }

    #[inline]
    fn now(&self) -> u64 {
        if self.revalidate_ms.is_some() {
            u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
        } else {
            0
        }
    }

    /// Whether `d` is due for revalidation at time `now`.
    #[inline]
    fn is_stale(&self, d: &Dentry, now: u64) -> bool {
        match self.revalidate_ms {
            None => false,
            Some(age) => {
                !d.is_root() && now.saturating_sub(d.checked_at.load(Ordering::Relaxed)) >= age
            }
        }
    }

    fn ns_read(&self) -> RwLockReadGuard<'_, ()> {
        self.ns.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn dir_lock(&self, dir: &Dentry) -> MutexGuard<'_, ()> {
        let a = ptr::from_ref(dir) as usize;
        let i = (a >> 6).wrapping_mul(0x9E37_79B9) >> 7;
        self.dir_locks[i % DIR_LOCKS].lock()
    }

    fn check_mine(&self, r: &DentryRef<'_>) -> Result<(), DcacheError> {
        if ptr::eq(r.core, &self.core) {
            Ok(())
        } else {
            Err(DcacheError::ForeignEntry)
        }
    }

    /// The descriptor `dir` keeps, if any.
    fn held_fd<'d>(&self, dir: &'d Dentry) -> Option<BorrowedFd<'d>> {
        if !self.config.hold_dir_fds {
            return None;
        }
        let fd = dir.dir_fd.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: a held descriptor is closed only when its entry is freed, and `'d` borrows an
        // entry the caller holds a reference on.
        (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Opens the directory of the hashed entry `dir` for system calls (or lends the descriptor
    /// it keeps). The caller holds the namespace lock, so the path stays true, and a reference
    /// on `dir`.
    fn open_dir<'d>(&'d self, dir: &'d Dentry, err_path: &Path) -> Result<DirFd<'d>, DcacheError> {
        if dir.is_root() {
            return Ok(DirFd::Borrowed(self.root_fd.as_fd()));
        }
        if let Some(fd) = self.held_fd(dir) {
            return Ok(DirFd::Borrowed(fd));
        }
        let opened = self.open_dir_path(dir, err_path)?;
        if !self.config.hold_dir_fds {
            return Ok(opened);
        }
        // Keep it, if it is the directory the entry names (not one swapped in behind the
        // cache's back).
        let DirFd::Owned(fd) = opened else {
            return Ok(opened);
        };
        let st = rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, STATX_MASK)
            .map_err(|e| DcacheError::from_errno(e, err_path))?;
        if Some(identity_of(&st)) != dir.identity() {
            return Err(DcacheError::NotFound {
                path: err_path.into(),
            });
        }
        use std::os::fd::IntoRawFd;
        let raw = fd.into_raw_fd();
        if let Err(winner) = dir.dir_fd.compare_exchange(
            -1,
            raw,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        ) {
            use std::os::fd::FromRawFd;
            // SAFETY: `raw` came from `into_raw_fd` just above and was not installed.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
            // SAFETY: as in `held_fd`.
            return Ok(DirFd::Borrowed(unsafe { BorrowedFd::borrow_raw(winner) }));
        }
        // SAFETY: as in `held_fd`: installed in the entry, which the caller holds.
        Ok(DirFd::Borrowed(unsafe { BorrowedFd::borrow_raw(raw) }))
    }

    /// Opens `dir` by its path from the root (no symlink followed, never leaving the root).
    fn open_dir_path(&self, dir: &Dentry, err_path: &Path) -> Result<DirFd<'static>, DcacheError> {
        let (p, deleted) = self.core.path_of(dir);
        if deleted {
            return Err(DcacheError::NotFound {
                path: err_path.into(),
            });
        }
        let rel = OsStr::from_bytes(&p[1..]);
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let r = match rustix::fs::openat2(
            &self.root_fd,
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::NOSYS) => rustix::fs::openat(&self.root_fd, rel, flags, Mode::empty()),
            r => r,
        };
        r.map(DirFd::Owned)
            .map_err(|e| DcacheError::from_errno(e, err_path))
    }

    /// `statx` of `name` in `dir`, not following a symlink: `None` if it does not exist.
    fn stat_name(
        &self,
        dir: &DirFd<'_>,
        name: &[u8],
        err_path: &Path,
    ) -> Result<Option<Identity>, DcacheError> {
        match rustix::fs::statx(
            dir,
            OsStr::from_bytes(name),
            AtFlags::SYMLINK_NOFOLLOW,
            STATX_MASK,
        ) {
            Ok(st) => Ok(Some(identity_of(&st))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(DcacheError::from_errno(e, err_path)),
        }
    }
}

/// How [`Dcache::rename_at2`] treats an existing new name (`renameat2(2)`'s flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameMode {
    /// Replace it, as `rename(2)` does.
    Replace,
    /// Fail with `EEXIST` if it exists (`RENAME_NOREPLACE`).
    NoReplace,
    /// Swap the two names, which must both exist (`RENAME_EXCHANGE`).
    Exchange,
}

impl std::fmt::Debug for Dcache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dcache")
            .field("root_dir", &self.root_dir)
            .field("config", &self.config)
            .field("nr_dentry", &self.nr_dentry())
            .field("nr_unused", &self.nr_unused())
            .finish()
    }
}
