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
//! `LockRef` uses the [`RefPolicy`] of the configuration: `Cmpxchg` (lockref, the default) or
//! `Spinlock` (every count change under the entry's lock, the dcache before lockref).
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
mod path;
#[cfg(loom)]
pub mod tree;
#[cfg(not(loom))]
mod tree;

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Statx, StatxFlags, CWD};
use rustix::io::Errno;

pub use crate::sync::lockref::RefPolicy;
pub use entry::{Dentry, DentryRef, FileKind, Identity};
pub use error::DcacheError;

use crate::stats::{self, Event};
use crate::sync::loom::Ordering;
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
    /// default) or [`RefPolicy::Spinlock`] (the count behind the entry's lock, as before lockref:
    /// a "before" policy for `quire bench`).
    #[doc(hidden)]
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
        let core = Core::new(
            config.ref_policy,
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
    pub fn shrink(&self, nr: usize) -> usize {
        self.core.shrink(nr)
    }

    /// Evicts every unused entry; afterwards only entries in use and their ancestors remain.
    /// Returns how many were freed.
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
        self.dir_locks[i % DIR_LOCKS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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

    // ---------------------------------------------------------------------------------------
    // Walks
    // ---------------------------------------------------------------------------------------

    /// Resolves `path` from the root, following symbolic links, and returns a reference to the
    /// entry it names. A missing name is `NotFound` (and is cached as a negative entry).
    pub fn walk(&self, path: impl AsRef<Path>) -> Result<DentryRef<'_>, DcacheError> {
        self.walk_inner(path.as_ref(), true)
    }

    /// As [`walk`](Self::walk), but a symbolic link in the last component is returned itself,
    /// not followed (unless the path ends in `/`).
    pub fn walk_nofollow(&self, path: impl AsRef<Path>) -> Result<DentryRef<'_>, DcacheError> {
        self.walk_inner(path.as_ref(), false)
    }

    fn walk_inner(&self, path: &Path, follow: bool) -> Result<DentryRef<'_>, DcacheError> {
        let bytes = path.as_os_str().as_bytes();
        if bytes.is_empty() {
            return Err(DcacheError::EmptyPath);
        }
        let now = self.now();
        // The lock-free walk gives up on a component with a NUL byte, so it only concludes on
        // paths that have none up to where it stopped; the rest is checked before any error.
        let fast_error = |e: DcacheError| {
            stats::count(Event::DcacheFastWalks);
            check_path(path.as_os_str())?;
            Err(e)
        };
        match self.walk_rcu(bytes, follow, now) {
            Fast::Found(r) => {
                stats::count(Event::DcacheFastWalks);
                Ok(r)
            }
            Fast::NotFound => fast_error(DcacheError::NotFound { path: path.into() }),
            Fast::NotDir => fast_error(DcacheError::NotDir { path: path.into() }),
            Fast::Bail => {
                stats::count(Event::DcacheSlowWalks);
                check_path(path.as_os_str())?;
                self.walk_ref(path, bytes, follow, now)
            }
        }
    }

    /// The lock-free walk; see the module documentation.
    fn walk_rcu(&self, path: &[u8], follow: bool, now: u64) -> Fast<'_> {
        let g = rcu::pin();
        let root = self.core.root();
        let must_dir = has_trailing_slash(path);
        let mut d: &Dentry = root;
        let mut seq = d.seq.raw_begin();
        // A conclusion drawn from `d`'s fields holds only if its count did not move.
        let conclude = |d: &Dentry, seq: u32, outcome: Fast<'static>| {
            if d.seq.retry(seq) {
                Fast::Bail
            } else {
                outcome
            }
        };
        let mut comps = Components::new(path);
        while let Some(c) = comps.next() {
            let k = d.kind_bits();
            if k != KIND_DIR {
                let outcome = if k == KIND_NEGATIVE {
                    Fast::NotFound
                } else {
                    Fast::NotDir
                };
                return conclude(d, seq, outcome);
            }
            if c == b"." {
                continue;
            }
            if c == b".." {
                if !ptr::eq(d, root) {
                    let p = d.parent_ptr();
                    if p.is_null() {
                        return Fast::Bail;
                    }
                    // SAFETY: `p` was `d`'s parent when loaded under the guard, so `d` held a
                    // reference on it then and it was not yet handed to the epoch.
                    let pd = unsafe { &*p };
                    let ps = pd.seq.raw_begin();
                    if d.seq.retry(seq) {
                        return Fast::Bail;
                    }
                    d = pd;
                    seq = ps;
                }
                continue;
            }
            let Some(hash) = hash_component(c) else {
                return Fast::Bail;
            };
            let Some((child, cseq)) = self.core.lookup_rcu(d, c, hash, &g) else {
                return Fast::Bail;
            };
            // The child was found under `d`, and `d` had not changed since we reached it.
            if d.seq.retry(seq) || self.is_stale(child, now) {
                return Fast::Bail;
            }
            let ck = child.kind_bits();
            if ck == KIND_NEGATIVE {
                if child.lockref.is_dead() {
                    return Fast::Bail;
                }
                return conclude(child, cseq, Fast::NotFound);
            }
            if ck == KIND_SYMLINK && (!comps.is_done() || follow || must_dir) {
                return Fast::Bail;
            }
            d = child;
            seq = cseq;
        }
        if must_dir && d.kind_bits() != KIND_DIR {
            return conclude(d, seq, Fast::NotDir);
        }
        if !d.lockref.get_not_dead() {
            return Fast::Bail;
        }
        let r = DentryRef::adopt(&self.core, NonNull::from(d));
        if d.seq.retry(seq) {
            drop(r);
            return Fast::Bail;
        }
        Fast::Found(r)
    }

    /// The reference walk; see the module documentation.
    fn walk_ref(
        &self,
        path: &Path,
        bytes: &[u8],
        follow: bool,
        now: u64,
    ) -> Result<DentryRef<'_>, DcacheError> {
        let not_found = || DcacheError::NotFound { path: path.into() };
        let not_dir = || DcacheError::NotDir { path: path.into() };
        // Components still to resolve, each with whether a `/` followed it.
        let mut todo: VecDeque<(Vec<u8>, bool)> = VecDeque::new();
        push_components(&mut todo, bytes, has_trailing_slash(bytes));
        let mut cur = self.core.root_ref();
        let mut need_dir = false;
        let mut hops = 0;
        while let Some((name, slash_after)) = todo.pop_front() {
            need_dir = slash_after;
            if !cur.is_dir() {
                return Err(if cur.is_negative() {
                    not_found()
                } else {
                    not_dir()
                });
            }
            if name == b"." {
                continue;
            }
            if name == b".." {
                if !cur.is_root() {
                    cur = cur.dget_parent();
                }
                continue;
            }
            let child = self.lookup_child(&cur, &name, now, path)?;
            let k = child.kind_bits();
            if k == KIND_NEGATIVE {
                return Err(not_found());
            }
            if k == KIND_SYMLINK && (!todo.is_empty() || follow || slash_after) {
                hops += 1;
                if hops > MAX_SYMLINKS {
                    return Err(DcacheError::Loop { path: path.into() });
                }
                let target = self.link_target(&cur, &child, &name, path)?;
                if target.is_empty() {
                    return Err(not_found());
                }
                let mut expanded = VecDeque::new();
                push_components(&mut expanded, &target, slash_after);
                expanded.append(&mut todo);
                todo = expanded;
                if target[0] == b'/' {
                    cur = self.core.root_ref();
                }
                need_dir = false;
                continue;
            }
            cur = child;
        }
        if need_dir && !cur.is_dir() {
            return Err(not_dir());
        }
        Ok(cur)
    }

    /// The entry for `name` in the directory `parent`, with a reference: from the cache
    /// (revalidated if due) or from the file system.
    fn lookup_child<'s>(
        &'s self,
        parent: &DentryRef<'s>,
        name: &[u8],
        now: u64,
        path: &Path,
    ) -> Result<DentryRef<'s>, DcacheError> {
        let hash = hash_name(name);
        if let Some(d) = self.core.lookup_ref(parent, name, hash) {
            if !self.is_stale(&d, now) {
                return Ok(d);
            }
            return self.revalidate(parent, d, name, hash, now, path);
        }
        let _ns = self.ns_read();
        let _dl = self.dir_lock(parent);
        if !parent.is_hashed() {
            return Err(DcacheError::NotFound { path: path.into() });
        }
        // Another thread may have resolved the same miss while we waited for the locks.
        if let Some(d) = self.core.lookup_ref(parent, name, hash) {
            return Ok(d);
        }
        stats::count(Event::DcacheMisses);
        let dir = self.open_dir(parent, path)?;
        let ident = self.stat_name(&dir, name, path)?;
        Ok(self.core.d_alloc(parent, name, hash, ident, now))
    }

    /// Checks the cached `d` (for `name` in `parent`) against the file system: keeps it if its
    /// identity (or absence) still holds, else replaces it with an entry for what is there now.
    fn revalidate<'s>(
        &'s self,
        parent: &DentryRef<'s>,
        d: DentryRef<'s>,
        name: &[u8],
        hash: u64,
        now: u64,
        path: &Path,
    ) -> Result<DentryRef<'s>, DcacheError> {
        let _ns = self.ns_read();
        let _dl = self.dir_lock(parent);
        if !parent.is_hashed() {
            return Err(DcacheError::NotFound { path: path.into() });
        }
        let dir = self.open_dir(parent, path)?;
        let ident = self.stat_name(&dir, name, path)?;
        Ok(self.install(parent, name, hash, ident, now, Some(d)))
    }

    /// Makes the cache say that `name` in `parent` is `ident` (`None`: does not exist), reusing
    /// `known` (or the hashed entry for the name) when it already says so. The caller holds the
    /// namespace lock and `parent`'s directory lock, and `parent` is hashed.
    fn install<'s>(
        &'s self,
        parent: &Dentry,
        name: &[u8],
        hash: u64,
        ident: Option<Identity>,
        now: u64,
        known: Option<DentryRef<'s>>,
    ) -> DentryRef<'s> {
        let cur = match known {
            Some(d) if d.is_hashed() => Some(d),
            _ => self.core.lookup_ref(parent, name, hash),
        };
        if let Some(d) = cur {
            if d.identity() == ident {
                d.checked_at.store(now, Ordering::Relaxed);
                return d;
            }
            if d.is_negative() {
                if let Some(i) = ident {
                    self.core.d_instantiate(&d, i, now);
                    return d;
                }
            }
            // Stale: it named another file. Holders keep it, as deleted.
            self.core.d_drop(&d);
        }
        self.core.d_alloc(parent, name, hash, ident, now)
    }

    /// The target of the symlink `link` (named `name` in `dir`), read once and kept.
    fn link_target(
        &self,
        dir: &DentryRef<'_>,
        link: &DentryRef<'_>,
        name: &[u8],
        path: &Path,
    ) -> Result<Vec<u8>, DcacheError> {
        let t = link.link.load(Ordering::Acquire);
        if !t.is_null() {
            // SAFETY: installed once, freed only with the entry, which our reference keeps.
            return Ok(unsafe { (*t).0.to_vec() });
        }
        let _ns = self.ns_read();
        let _dl = self.dir_lock(dir);
        let fd = self.open_dir(dir, path)?;
        let target = rustix::fs::readlinkat(&fd, OsStr::from_bytes(name), Vec::new())
            .map_err(|e| DcacheError::from_errno(e, path))?
            .into_bytes();
        // Keep it only if the name still is the link the entry knows.
        if self.stat_name(&fd, name, path)? == link.identity() {
            let boxed = Box::into_raw(Box::new(LinkTarget(target.clone().into())));
            if link
                .link
                .compare_exchange(ptr::null_mut(), boxed, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: ours, never published.
                drop(unsafe { Box::from_raw(boxed) });
            }
        }
        Ok(target)
    }

    /// Looks up one `name` in the directory `parent` (no symlink is followed).
    pub fn lookup(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<DentryRef<'_>, DcacheError> {
        self.check_mine(parent)?;
        let name = check_name(name.as_ref())?;
        // SAFETY-free re-borrow: `parent` belongs to this cache, so its lifetime can be ours.
        let parent = parent.dget();
        let parent = DentryRef::adopt(&self.core, parent.into_raw());
        let path = join(&self.path_of(&parent), name);
        if !parent.is_dir() {
            return Err(if parent.is_negative() {
                DcacheError::NotFound { path }
            } else {
                DcacheError::NotDir { path }
            });
        }
        let d = self.lookup_child(&parent, name, self.now(), &path)?;
        if d.is_negative() {
            return Err(DcacheError::NotFound { path });
        }
        Ok(d)
    }

    /// Looks up `name` in the directory `parent` and returns its entry with the file's full
    /// `statx` (basic stats, not following a symlink), made now: the entry is checked against
    /// the file system on every call — kept if it still names the same file, replaced if not —
    /// so nothing stale is returned whatever [`DcacheConfig::revalidate_after`] says. A missing
    /// name is `NotFound` and is cached as a negative entry. For a front end (FUSE) that must
    /// answer every lookup with fresh attributes anyway: one system call per lookup.
    pub fn lookup_stat(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<(DentryRef<'_>, Statx), DcacheError> {
        self.check_mine(parent)?;
        let name = name.as_ref();
        let nb = check_name(name)?;
        let parent = DentryRef::adopt(&self.core, parent.dget().into_raw());
        let hash = hash_name(nb);
        let now = self.now();
        let _ns = self.ns_read();
        let _dl = self.dir_lock(&parent);
        // Paths are for errors only: made when one is returned (the hot path makes none).
        let path = || join(&self.path_of(&parent), nb);
        if !parent.is_hashed() {
            return Err(DcacheError::NotFound { path: path() });
        }
        if !parent.is_dir() {
            return Err(DcacheError::NotDir { path: path() });
        }
        let dir = match self.cheap_dir_fd(&parent) {
            Some(fd) => DirFd::Borrowed(fd),
            None => self.open_dir(&parent, &path())?,
        };
        match rustix::fs::statx(
            &dir,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        ) {
            Ok(st) => {
                let d = self.install(&parent, nb, hash, Some(identity_of(&st)), now, None);
                Ok((d, st))
            }
            Err(Errno::NOENT) => {
                drop(self.install(&parent, nb, hash, None, now, None));
                Err(DcacheError::NotFound { path: path() })
            }
            Err(e) => Err(DcacheError::from_errno(e, path())),
        }
    }

    /// The root's descriptor, or the one `dir` keeps: a directory descriptor that needs no
    /// system call.
    fn cheap_dir_fd<'d>(&'d self, dir: &'d Dentry) -> Option<BorrowedFd<'d>> {
        if dir.is_root() {
            Some(self.root_fd.as_fd())
        } else {
            self.held_fd(dir)
        }
    }

    /// Runs `f` with a descriptor of the directory `dir` (the root included; `O_PATH`: use it
    /// as the directory of `*at` calls, or open `"."` from it to read the directory), under the
    /// namespace lock, so that no rename through the cache moves things meanwhile. A deleted
    /// directory (unhashed) still works if its entry keeps a descriptor
    /// ([`DcacheConfig::hold_dir_fds`]); otherwise it is `NotFound`. `f` must not call back
    /// into the cache.
    pub fn with_dir<R>(
        &self,
        dir: &DentryRef<'_>,
        f: impl FnOnce(BorrowedFd<'_>) -> R,
    ) -> Result<R, DcacheError> {
        self.check_mine(dir)?;
        if !dir.is_dir() {
            return Err(DcacheError::NotDir {
                path: self.path_of(dir),
            });
        }
        let _ns = self.ns_read();
        if let Some(fd) = self.held_fd(dir) {
            return Ok(f(fd));
        }
        let path = self.path_of(dir);
        if !dir.is_hashed() {
            return Err(DcacheError::NotFound { path });
        }
        let fd = self.open_dir(dir, &path)?;
        Ok(f(fd.as_fd()))
    }

    /// Runs `f` with a descriptor of the directory holding the entry `d` and `d`'s name in it,
    /// under the namespace lock, so that no rename through the cache moves `d` meanwhile: the
    /// way to make a system call on the file an entry names (`fstatat`, `openat` with
    /// `O_NOFOLLOW`, `fchownat`, `readlinkat`...) without a path and without leaving the root.
    /// `d` must be hashed (a deleted entry is `NotFound`) and not the root (`InvalidName`: use
    /// [`with_dir`](Self::with_dir)). `f` must not call back into the cache.
    pub fn with_name<R>(
        &self,
        d: &DentryRef<'_>,
        f: impl FnOnce(BorrowedFd<'_>, &OsStr) -> R,
    ) -> Result<R, DcacheError> {
        self.check_mine(d)?;
        if d.is_root() {
            return Err(DcacheError::InvalidName { name: "/".into() });
        }
        let _ns = self.ns_read();
        if !d.is_hashed() {
            return Err(DcacheError::NotFound {
                path: self.path_of(d),
            });
        }
        // Stable: the parent changes only by a rename, which holds the namespace lock.
        let parent = d.dget_parent();
        let name = d.name();
        let dir = match self.cheap_dir_fd(&parent) {
            Some(fd) => DirFd::Borrowed(fd),
            None => self.open_dir(&parent, &self.path_of(d))?,
        };
        Ok(f(dir.as_fd(), &name))
    }

    // ---------------------------------------------------------------------------------------
    // Changes
    // ---------------------------------------------------------------------------------------

    /// Resolves the directory part of a path given to a change.
    fn walk_dir(&self, dir: &[u8]) -> Result<DentryRef<'_>, DcacheError> {
        if dir.is_empty() {
            Ok(self.root())
        } else {
            self.walk(OsStr::from_bytes(dir))
        }
    }

    /// Runs a change of `name` in `parent` under the locks, after the common checks; `op` makes
    /// the system call and says what the name is afterwards.
    fn change_at<'s>(
        &'s self,
        parent: &DentryRef<'_>,
        name: &OsStr,
        op: impl FnOnce(&DirFd<'_>, &OsStr, &Path) -> Result<Option<Identity>, DcacheError>,
    ) -> Result<DentryRef<'s>, DcacheError> {
        self.check_mine(parent)?;
        let nb = check_name(name)?;
        let parent = DentryRef::adopt(&self.core, parent.dget().into_raw());
        let hash = hash_name(nb);
        let now = self.now();
        let _ns = self.ns_read();
        let _dl = self.dir_lock(&parent);
        let path = join(&self.path_of(&parent), nb);
        if !parent.is_hashed() {
            return Err(DcacheError::NotFound { path });
        }
        if !parent.is_dir() {
            return Err(DcacheError::NotDir { path });
        }
        let dir = self.open_dir(&parent, &path)?;
        let ident = op(&dir, name, &path)?;
        Ok(self.install(&parent, nb, hash, ident, now, None))
    }

    /// Makes `name` in the directory `parent` with a system call of the caller's — `op` gets
    /// the directory's descriptor and the name, and creates the file, directory, node or link
    /// there (with the mode, flags and owner the caller wants) — then takes its `statx` (basic
    /// stats, not following a symlink) and records the new entry. Runs under the namespace and
    /// directory locks, like every change; `op`'s error is returned as the cache's error for
    /// that `errno`, and leaves the cache as it was. `op` must not call back into the cache.
    pub fn make_at<'s, T>(
        &'s self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
        op: impl FnOnce(BorrowedFd<'_>, &OsStr) -> rustix::io::Result<T>,
    ) -> Result<(DentryRef<'s>, Statx, T), DcacheError> {
        let mut out = None;
        let d = self.change_at(parent, name.as_ref(), |dir, name, path| {
            let t = op(dir.as_fd(), name).map_err(|e| DcacheError::from_errno(e, path))?;
            let st = rustix::fs::statx(
                dir,
                name,
                AtFlags::SYMLINK_NOFOLLOW,
                StatxFlags::BASIC_STATS,
            )
            .map_err(|e| DcacheError::from_errno(e, path))?;
            let ident = identity_of(&st);
            out = Some((st, t));
            Ok(Some(ident))
        })?;
        let (st, t) = out.expect("set by a successful change");
        Ok((d, st, t))
    }

    /// Creates the regular file `name` in `parent` (it must not exist; mode 0644) and returns
    /// its entry.
    pub fn create_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<DentryRef<'_>, DcacheError> {
        self.change_at(parent, name.as_ref(), |dir, name, path| {
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| DcacheError::from_errno(e, path))?;
            let st = rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, STATX_MASK)
                .map_err(|e| DcacheError::from_errno(e, path))?;
            Ok(Some(identity_of(&st)))
        })
    }

    /// Creates the directory `name` in `parent` (mode 0755) and returns its entry.
    pub fn mkdir_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<DentryRef<'_>, DcacheError> {
        self.change_at(parent, name.as_ref(), |dir, name, path| {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))
                .map_err(|e| DcacheError::from_errno(e, path))?;
            self.stat_name(dir, name.as_bytes(), path)
        })
    }

    /// Creates the symbolic link `name` in `parent`, pointing to `target`, and returns its entry.
    pub fn symlink_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
        target: impl AsRef<OsStr>,
    ) -> Result<DentryRef<'_>, DcacheError> {
        let target = target.as_ref();
        if target.is_empty() || target.as_bytes().contains(&0) {
            return Err(DcacheError::InvalidName {
                name: target.to_os_string(),
            });
        }
        self.change_at(parent, name.as_ref(), |dir, name, path| {
            rustix::fs::symlinkat(target, dir, name)
                .map_err(|e| DcacheError::from_errno(e, path))?;
            self.stat_name(dir, name.as_bytes(), path)
        })
    }

    /// Removes the non-directory `name` from `parent`. Its entry becomes unhashed (holders see
    /// it as deleted) and a negative entry takes its place.
    pub fn unlink_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<(), DcacheError> {
        self.change_at(parent, name.as_ref(), |dir, name, path| {
            rustix::fs::unlinkat(dir, name, AtFlags::empty())
                .map_err(|e| DcacheError::from_errno(e, path))?;
            Ok(None)
        })
        .map(drop)
    }

    /// Removes the empty directory `name` from `parent`; as [`unlink_at`](Self::unlink_at)
    /// for the entries. Cached negative entries under it stay until the LRU evicts them.
    pub fn rmdir_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<(), DcacheError> {
        self.change_at(parent, name.as_ref(), |dir, name, path| {
            rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
                .map_err(|e| DcacheError::from_errno(e, path))?;
            Ok(None)
        })
        .map(drop)
    }

    /// Renames `old_name` in `old_parent` to `new_name` in `new_parent`, replacing what had that
    /// name as `rename(2)` does. The renamed entry moves with its cached children; the replaced
    /// entry becomes unhashed.
    pub fn rename_at(
        &self,
        old_parent: &DentryRef<'_>,
        old_name: impl AsRef<OsStr>,
        new_parent: &DentryRef<'_>,
        new_name: impl AsRef<OsStr>,
    ) -> Result<(), DcacheError> {
        self.rename_at2(
            old_parent,
            old_name,
            new_parent,
            new_name,
            RenameMode::Replace,
        )
    }

    /// [`rename_at`](Self::rename_at) with `renameat2(2)`'s modes: `NoReplace` fails with
    /// `EEXIST` (an `Io` error) if the new name exists; `Exchange` swaps the two names, which
    /// must both exist — each entry moves to the other's place, with its cached children, and
    /// references held on either keep following its file.
    pub fn rename_at2(
        &self,
        old_parent: &DentryRef<'_>,
        old_name: impl AsRef<OsStr>,
        new_parent: &DentryRef<'_>,
        new_name: impl AsRef<OsStr>,
        mode: RenameMode,
    ) -> Result<(), DcacheError> {
        self.check_mine(old_parent)?;
        self.check_mine(new_parent)?;
        let (on, nn) = (old_name.as_ref(), new_name.as_ref());
        let (ob, nb) = (check_name(on)?, check_name(nn)?);
        let (oh, nh) = (hash_name(ob), hash_name(nb));
        let op = DentryRef::adopt(&self.core, old_parent.dget().into_raw());
        let np = DentryRef::adopt(&self.core, new_parent.dget().into_raw());
        let _ns = self.ns.write().unwrap_or_else(PoisonError::into_inner);
        let path = join(&self.path_of(&op), ob);
        for p in [&op, &np] {
            if !p.is_hashed() {
                return Err(DcacheError::NotFound { path });
            }
            if !p.is_dir() {
                return Err(DcacheError::NotDir { path });
            }
        }
        let odir = self.open_dir(&op, &path)?;
        let ndir = if DentryRef::ptr_eq(&op, &np) {
            None
        } else {
            Some(self.open_dir(&np, &path)?)
        };
        let flags = match mode {
            RenameMode::Replace => rustix::fs::RenameFlags::empty(),
            RenameMode::NoReplace => rustix::fs::RenameFlags::NOREPLACE,
            RenameMode::Exchange => rustix::fs::RenameFlags::EXCHANGE,
        };
        rustix::fs::renameat_with(&odir, on, ndir.as_ref().unwrap_or(&odir), nn, flags)
            .map_err(|e| DcacheError::from_errno(e, &path))?;
        let src = self.core.lookup_ref(&op, ob, oh);
        let dst = self.core.lookup_ref(&np, nb, nh);
        let w = self.core.rename_begin();
        if let (Some(s), Some(t)) = (&src, &dst) {
            if DentryRef::ptr_eq(s, t) {
                return Ok(());
            }
        }
        if mode == RenameMode::Exchange {
            match (&src, &dst) {
                (Some(s), Some(t)) => {
                    // Entries that disagree with what the file system just did (negative, or
                    // one inside the other, which it refuses to exchange) are stale: forget
                    // them rather than loop the tree.
                    if s.is_negative()
                        || t.is_negative()
                        || is_ancestor(s, &np)
                        || is_ancestor(t, &op)
                    {
                        self.core.d_drop(s);
                        self.core.d_drop(t);
                    } else {
                        self.core.d_exchange(&w, s, t);
                    }
                }
                (Some(s), None) => self.move_entry(&w, s, &np, nb, nh),
                (None, Some(t)) => self.move_entry(&w, t, &op, ob, oh),
                (None, None) => {}
            }
            return Ok(());
        }
        if let Some(t) = &dst {
            self.core.d_drop(t);
        }
        if let Some(s) = &src {
            self.move_entry(&w, s, &np, nb, nh);
        }
        drop(w);
        Ok(())
    }

    /// Moves the cached entry `s` to `name` in `np` after the file system did, or forgets it
    /// where the cache disagrees with what the file system did (a negative entry, or a
    /// directory that would land under itself). The caller holds the namespace lock
    /// exclusively and `w`, and has unhashed whatever had the new name.
    fn move_entry(
        &self,
        w: &tree::RenameGuard<'_>,
        s: &DentryRef<'_>,
        np: &DentryRef<'_>,
        name: &[u8],
        hash: u64,
    ) {
        if s.is_negative() || is_ancestor(s, np) {
            self.core.d_drop(s);
        } else {
            self.core.d_move(w, s, np, name, hash);
        }
    }

    /// Creates the regular file at `path` (see [`create_at`](Self::create_at)).
    pub fn create(&self, path: impl AsRef<Path>) -> Result<DentryRef<'_>, DcacheError> {
        let (dir, name) = split_last(path.as_ref().as_os_str())?;
        self.create_at(&self.walk_dir(dir)?, name)
    }

    /// Creates the directory at `path` (see [`mkdir_at`](Self::mkdir_at)).
    pub fn mkdir(&self, path: impl AsRef<Path>) -> Result<DentryRef<'_>, DcacheError> {
        let (dir, name) = split_last(path.as_ref().as_os_str())?;
        self.mkdir_at(&self.walk_dir(dir)?, name)
    }

    /// Creates a symbolic link at `path` pointing to `target` (see
    /// [`symlink_at`](Self::symlink_at)).
    pub fn symlink(
        &self,
        target: impl AsRef<OsStr>,
        path: impl AsRef<Path>,
    ) -> Result<DentryRef<'_>, DcacheError> {
        let (dir, name) = split_last(path.as_ref().as_os_str())?;
        self.symlink_at(&self.walk_dir(dir)?, name, target)
    }

    /// Removes the non-directory at `path` (see [`unlink_at`](Self::unlink_at)).
    pub fn unlink(&self, path: impl AsRef<Path>) -> Result<(), DcacheError> {
        let (dir, name) = split_last(path.as_ref().as_os_str())?;
        self.unlink_at(&self.walk_dir(dir)?, name)
    }

    /// Removes the empty directory at `path` (see [`rmdir_at`](Self::rmdir_at)).
    pub fn rmdir(&self, path: impl AsRef<Path>) -> Result<(), DcacheError> {
        let (dir, name) = split_last(path.as_ref().as_os_str())?;
        self.rmdir_at(&self.walk_dir(dir)?, name)
    }

    /// Renames `from` to `to` (see [`rename_at`](Self::rename_at)).
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<(), DcacheError> {
        let (fdir, fname) = split_last(from.as_ref().as_os_str())?;
        let (tdir, tname) = split_last(to.as_ref().as_os_str())?;
        let fp = self.walk_dir(fdir)?;
        let tp = self.walk_dir(tdir)?;
        self.rename_at(&fp, fname, &tp, tname)
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

/// Whether `a` is `d` or one of its ancestors. The caller holds the namespace lock exclusively
/// (no entry changes parent) and a reference on `d`.
fn is_ancestor(a: &Dentry, d: &Dentry) -> bool {
    let mut cur: &Dentry = d;
    loop {
        if ptr::eq(cur, a) {
            return true;
        }
        let p = cur.parent_ptr();
        if p.is_null() {
            return false;
        }
        // SAFETY: with the namespace lock held exclusively no entry changes parent, and each
        // ancestor of `d` (referenced) holds a reference on its own parent.
        cur = unsafe { &*p };
    }
}

/// Appends the components of `path` to `todo`, the last one marked with `last_slash`.
fn push_components(todo: &mut VecDeque<(Vec<u8>, bool)>, path: &[u8], last_slash: bool) {
    let start = todo.len();
    for c in Components::new(path) {
        todo.push_back((c.to_vec(), true));
    }
    if todo.len() > start {
        todo.back_mut().expect("non-empty").1 = last_slash;
    }
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
