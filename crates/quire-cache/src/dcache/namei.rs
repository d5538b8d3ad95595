//! Name resolution and the changes made by name (the kernel's `fs/namei.c`): the lock-free walk
//! and its reference-taking fallback, lookups that ask the file system on a miss, and create,
//! mkdir, symlink, unlink, rmdir and rename through the cache.

use super::*;

impl Dcache {
    // ---------------------------------------------------------------------------------------
    // Walks
    // ---------------------------------------------------------------------------------------

    /// Resolves `path` from the root, following symbolic links, and returns a reference to the
    /// entry it names. A missing name is `NotFound` (and is cached as a negative entry).
    #[doc(alias("kern_path", "path_lookupat"))]
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
    #[doc(alias("link_path_walk", "lookup_fast"))]
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
    #[doc(alias = "walk_component")]
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
    #[doc(alias = "d_revalidate")]
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
    #[doc(alias = "lookup_one")]
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
    /// `statx` (basic stats and birth time, not following a symlink), made now: the entry is
    /// checked against the file system on every call — kept if it still names the same file,
    /// replaced if not — so nothing stale is returned whatever
    /// [`DcacheConfig::revalidate_after`] says. A missing name is `NotFound` and is cached as a
    /// negative entry. For a front end (FUSE) that must
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
            StatxFlags::BASIC_STATS | StatxFlags::BTIME,
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
    /// stats and birth time, not following a symlink) and records the new entry. Runs under the namespace and
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
                StatxFlags::BASIC_STATS | StatxFlags::BTIME,
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
    #[doc(alias = "vfs_create")]
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
    #[doc(alias = "vfs_mkdir")]
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
    #[doc(alias = "vfs_symlink")]
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
    #[doc(alias = "vfs_unlink")]
    pub fn unlink_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<(), DcacheError> {
        self.remove_at(parent, name.as_ref(), AtFlags::empty())
    }

    /// Removes the empty directory `name` from `parent`; as [`unlink_at`](Self::unlink_at)
    /// for the entries. Cached negative entries under it stay until the LRU evicts them.
    #[doc(alias = "vfs_rmdir")]
    pub fn rmdir_at(
        &self,
        parent: &DentryRef<'_>,
        name: impl AsRef<OsStr>,
    ) -> Result<(), DcacheError> {
        self.remove_at(parent, name.as_ref(), AtFlags::REMOVEDIR)
    }

    /// `unlinkat(2)` of `name` in `parent` with `flags` (`REMOVEDIR` for a directory); the entry
    /// becomes unhashed and a negative entry takes its place.
    fn remove_at(
        &self,
        parent: &DentryRef<'_>,
        name: &OsStr,
        flags: AtFlags,
    ) -> Result<(), DcacheError> {
        self.change_at(parent, name, |dir, name, path| {
            rustix::fs::unlinkat(dir, name, flags).map_err(|e| DcacheError::from_errno(e, path))?;
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
    #[doc(alias("vfs_rename", "renameat2"))]
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
