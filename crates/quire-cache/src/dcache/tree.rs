//! The core of the dentry cache, without the file system: the hash table of `(parent, name)` →
//! entry, the LRU of unused entries, the rename sequence lock, and the reference protocol
//! (`dget`, `dput`, `dget_parent`, kill). [`super::Dcache`] puts the file system on top.
//!
//! Keeping this part free of system calls is what lets `tests/loom_dcache.rs` model-check the
//! real `dput`/`dget_parent`/`d_move` code: under `--cfg loom` this module is public.
//!
//! # The hash table
//!
//! A fixed array of buckets (a power of two), indexed by a mix of the parent's address and the
//! name's hash. Each bucket is one word: the head of a singly linked chain through
//! `Dentry::hash_next`, with bit 0 of the word as the bucket's lock (the kernel's `hlist_bl`):
//!
//! | bucket word bits | meaning                                                        |
//! |------------------|----------------------------------------------------------------|
//! | 0                | locked: a writer is inserting into or unlinking from the chain |
//! | 1..=63           | the first entry of the chain (entries are 64-byte aligned), or 0 |
//!
//! Writers (insert at the head, unlink) take the bucket lock; nothing else is ever taken while
//! it is held. Readers take no lock: they load the head and follow `hash_next` under an epoch
//! guard. Unlinking sets the predecessor's `hash_next` past the entry but leaves the entry's own
//! `hash_next` alone, so a reader standing on it walks on; the entry is freed only a grace
//! period after it was unlinked. A rename moves an entry to another bucket, and a reader
//! standing on it at that moment continues in the wrong chain: lookups can miss (never find a
//! wrong entry, since parent and name are compared under the entry's sequence count). A miss is
//! therefore only believed when the global rename sequence count did not move during the scan
//! (the kernel's `rename_lock` retry in `d_lookup`), and the lock-free walk treats any miss as a
//! reason to fall back. A new entry for a name is always inserted at the head of its chain, ahead
//! of any dying entry for the same name.
//!
//! # References and death
//!
//! Each entry's [`LockRef`](crate::sync::lockref::LockRef) counts the `DentryRef`s to it plus
//! one per cached child (a child holds a reference on its parent). An entry whose count falls to
//! zero is *retained* — left in the table and put on the LRU — if it is hashed (and the cache
//! keeps unused entries at all); otherwise it is *killed*: marked dead under its lock (count
//! negative, so every conditional get refuses it), unhashed, taken off the LRU, handed to the
//! epoch, and the reference it held on its parent is put, which may kill the parent in turn.
//! That chain runs as a loop, never as recursion. The LRU evicts from its cold end, giving a
//! second chance to entries used since it last looked (`REFERENCED`), and kills what it evicts.

use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

use crate::sync::lockref::{LockRefGuard, RefPolicy};
use crate::sync::loom::{AtomicUsize, Mutex, MutexGuard, Ordering, SpinWait};
use crate::sync::rcu;

use super::entry::{
    Dentry, DentryRef, Identity, Name, SeqCount, HASHED, KIND_MASK, ON_LRU, REFERENCED, ROOT,
};
use super::path::hash_name;

/// A lock-free chain walk gives up (and its caller falls back) after this many entries: a reader
/// carried from chain to chain by concurrent renames could otherwise walk for long.
const MAX_CHAIN: usize = 1 << 16;
/// `path_of` treats a parent chain longer than this as a torn read (Linux paths have at most
/// `PATH_MAX / 2` components).
const MAX_DEPTH: usize = 1 << 16;
/// Bucket-lock spins before each further spin yields the time slice.
const BUCKET_SPINS: u32 = 64;

const BUCKET_LOCKED: usize = 1;

/// One hash bucket; see the module documentation.
struct Bucket {
    head: AtomicUsize,
}

impl Bucket {
    /// The first entry of the chain, for a lock-free reader.
    #[inline]
    fn first(&self) -> *mut Dentry {
        (self.head.load(Ordering::Acquire) & !BUCKET_LOCKED) as *mut Dentry
    }

    /// Takes the bucket lock and returns the head.
    fn lock(&self) -> *mut Dentry {
        let mut wait = SpinWait::new(BUCKET_SPINS);
        loop {
            let v = self.head.load(Ordering::Relaxed);
            if v & BUCKET_LOCKED == 0
                && self
                    .head
                    .compare_exchange_weak(
                        v,
                        v | BUCKET_LOCKED,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                return v as *mut Dentry;
            }
            wait.wait();
        }
    }

    /// Sets the head and releases the lock in one store (publishing whatever was written to the
    /// chain under the lock).
    fn unlock(&self, head: *mut Dentry) {
        self.head.store(head as usize, Ordering::Release);
    }
}

/// The LRU list of unused entries: an intrusive doubly linked list through
/// `Dentry::lru_prev/lru_next`, touched only under the LRU mutex. Lock order: an entry's lock,
/// then the LRU mutex; the shrinker, which holds the mutex first, only *tries* entry locks.
struct Lru {
    head: *mut Dentry,
    tail: *mut Dentry,
    len: usize,
}

// SAFETY: the raw pointers are only followed by the holder of the mutex around the list, and
// every entry on the list is alive (it is taken off the list, under the mutex, before it dies).
unsafe impl Send for Lru {}

impl Lru {
    /// # Safety
    ///
    /// `d` is alive and not on the list; the caller holds the mutex.
    unsafe fn push_back(&mut self, d: &Dentry) {
        let dp = ptr::from_ref(d).cast_mut();
        d.lru_next.store(ptr::null_mut(), Ordering::Relaxed);
        d.lru_prev.store(self.tail, Ordering::Relaxed);
        if self.tail.is_null() {
            self.head = dp;
        } else {
            // SAFETY: the tail is on the list, hence alive.
            unsafe { (*self.tail).lru_next.store(dp, Ordering::Relaxed) };
        }
        self.tail = dp;
        self.len += 1;
    }

    /// # Safety
    ///
    /// `d` is on the list; the caller holds the mutex.
    unsafe fn remove(&mut self, d: &Dentry) {
        let prev = d.lru_prev.load(Ordering::Relaxed);
        let next = d.lru_next.load(Ordering::Relaxed);
        if prev.is_null() {
            self.head = next;
        } else {
            // SAFETY: neighbours on the list are alive.
            unsafe { (*prev).lru_next.store(next, Ordering::Relaxed) };
        }
        if next.is_null() {
            self.tail = prev;
        } else {
            // SAFETY: as above.
            unsafe { (*next).lru_prev.store(prev, Ordering::Relaxed) };
        }
        d.lru_prev.store(ptr::null_mut(), Ordering::Relaxed);
        d.lru_next.store(ptr::null_mut(), Ordering::Relaxed);
        self.len -= 1;
    }
}

/// The core of a dentry cache; see the module documentation. Public (and constructible without
/// a file system) only under `--cfg loom`, for the model checker.
pub struct Core {
    policy: RefPolicy,
    max_unused: usize,
    buckets: Box<[Bucket]>,
    mask: usize,
    lru: Mutex<Lru>,
    /// `lru.len`, readable without the mutex.
    nr_unused: StdAtomicUsize,
    /// Entries allocated and not yet killed, the root included.
    nr_dentry: StdAtomicUsize,
    /// The rename sequence count: odd while a rename moves entries (the kernel's `rename_lock`).
    rename_seq: SeqCount,
    /// Serialises renames (the writers of `rename_seq`); readers that keep losing to renames take
    /// it to read a stable tree.
    rename_mutex: Mutex<()>,
    root: NonNull<Dentry>,
}

// SAFETY: all state shared between threads is atomics or behind locks; entries are reached
// through raw pointers whose lifetime the reference counts and the epoch guarantee.
unsafe impl Send for Core {}
// SAFETY: as for `Send`.
unsafe impl Sync for Core {}

/// A rename in progress: holds the rename mutex with the rename sequence count odd. Dropping it
/// ends the rename.
pub struct RenameGuard<'a> {
    core: &'a Core,
    _mutex: MutexGuard<'a, ()>,
}

impl Drop for RenameGuard<'_> {
    fn drop(&mut self) {
        // Runs before the mutex guard (a field) is dropped.
        self.core.rename_seq.write_end();
    }
}

/// What one pass of a reader of the rename sequence found ([`Core::rename_read`]).
enum Pass<R> {
    /// A result that holds whatever renames did meanwhile (checked under an entry's lock).
    Sure(R),
    /// A result that holds only if no rename ran during the pass; `complete` is false for a pass
    /// cut short (a chain or a path longer than any the cache can hold).
    Seen { result: R, complete: bool },
}

impl Core {
    /// A core with an empty table of `buckets` buckets (rounded up to a power of two), keeping at
    /// most about `max_unused` unused entries, whose entries' counts use `policy`, and whose root
    /// has identity `root`.
    pub fn new(policy: RefPolicy, max_unused: usize, buckets: usize, root: Identity) -> Core {
        let n = buckets.clamp(1, 1 << 30).next_power_of_two();
        let mut core = Core {
            policy,
            max_unused,
            buckets: (0..n)
                .map(|_| Bucket {
                    head: AtomicUsize::new(0),
                })
                .collect(),
            mask: n - 1,
            lru: Mutex::new(Lru {
                head: ptr::null_mut(),
                tail: ptr::null_mut(),
                len: 0,
            }),
            nr_unused: StdAtomicUsize::new(0),
            nr_dentry: StdAtomicUsize::new(1),
            rename_seq: SeqCount::new(),
            rename_mutex: Mutex::new(()),
            root: NonNull::dangling(),
        };
        // The root holds one reference for the core itself, dropped when the core is.
        core.root = Dentry::alloc(
            &core,
            ptr::null_mut(),
            b"/",
            hash_name(b"/"),
            Some(root),
            HASHED | ROOT,
            0,
        );
        core
    }

    /// The policy of the entries' reference counts.
    #[inline]
    pub fn policy(&self) -> RefPolicy {
        self.policy
    }

    /// The root entry (alive as long as the core).
    #[inline]
    pub fn root(&self) -> &Dentry {
        // SAFETY: the core holds a reference on its root until it is dropped.
        unsafe { self.root.as_ref() }
    }

    /// A new reference to the root.
    pub fn root_ref(&self) -> DentryRef<'_> {
        self.root().lockref.get();
        DentryRef::adopt(self, self.root)
    }

    /// Entries allocated and not yet killed, the root included.
    pub fn nr_dentry(&self) -> usize {
        self.nr_dentry.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Entries on the LRU list (unused, or used since they were put there).
    pub fn nr_unused(&self) -> usize {
        self.nr_unused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes back a reference given up by [`DentryRef::into_raw`].
    ///
    /// # Safety
    ///
    /// `d` comes from `into_raw` on a reference of this core, and is taken back once.
    pub unsafe fn ref_from_raw(&self, d: NonNull<Dentry>) -> DentryRef<'_> {
        // SAFETY: forwarded from the caller.
        unsafe { DentryRef::from_raw(self, d) }
    }

    #[inline]
    fn bucket(&self, parent: *const Dentry, hash: u64) -> &Bucket {
        let h = (hash ^ (parent as u64).rotate_left(26)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.buckets[(h >> 32) as usize & self.mask]
    }

    /// Links `d` at the head of its chain.
    ///
    /// # Safety
    ///
    /// `d` is alive and in no chain; its parent and name are set.
    unsafe fn hash_insert(&self, d: &Dentry, g: &rcu::Guard) {
        let b = self.bucket(d.parent.load(Ordering::Relaxed), d.name_in(g).hash);
        let head = b.lock();
        d.hash_next.store(head, Ordering::Relaxed);
        b.unlock(ptr::from_ref(d).cast_mut());
    }

    /// Unlinks `d` from its chain (which its current parent and name pick), leaving its own
    /// `hash_next` for readers standing on it.
    ///
    /// # Safety
    ///
    /// `d` is in that chain.
    unsafe fn hash_remove(&self, d: &Dentry, g: &rcu::Guard) {
        let b = self.bucket(d.parent.load(Ordering::Relaxed), d.name_in(g).hash);
        let head = b.lock();
        let dp = ptr::from_ref(d).cast_mut();
        let next = d.hash_next.load(Ordering::Relaxed);
        if head == dp {
            b.unlock(next);
            return;
        }
        let mut p = head;
        while !p.is_null() {
            // SAFETY: entries in a chain are alive while we hold its lock: an entry is freed
            // only a grace period after it was unlinked, which takes this lock.
            let pr = unsafe { &*p };
            let pn = pr.hash_next.load(Ordering::Relaxed);
            if pn == dp {
                pr.hash_next.store(next, Ordering::Release);
                break;
            }
            p = pn;
        }
        debug_assert!(!p.is_null(), "hashed entry not in its chain");
        b.unlock(head);
    }

    /// Finds the hashed entry for `(parent, name)` without taking any lock or reference (the
    /// kernel's `__d_lookup_rcu`), returning it with a snapshot of its sequence count under which
    /// its parent and name matched. `None` may be a false miss (see the module documentation).
    #[inline]
    #[doc(alias = "__d_lookup_rcu")]
    pub(crate) fn lookup_rcu<'g>(
        &self,
        parent: &Dentry,
        name: &[u8],
        hash: u64,
        g: &'g rcu::Guard,
    ) -> Option<(&'g Dentry, u32)> {
        let mut p = self.bucket(parent, hash).first();
        let mut steps = 0;
        while !p.is_null() {
            // SAFETY: reached from a bucket under the guard `g`: entries are freed only a grace
            // period after they were unlinked, and `hash_next` of an unlinked entry still points
            // to entries that were live when it was unlinked.
            let d: &'g Dentry = unsafe { &*p };
            let s = d.seq.raw_begin();
            if ptr::eq(d.parent.load(Ordering::Relaxed), parent) {
                let n = d.name_in(g);
                if n.hash == hash && *n.bytes == *name {
                    if d.seq.retry(s) {
                        return None;
                    }
                    return Some((d, s));
                }
            }
            steps += 1;
            if steps > MAX_CHAIN {
                return None;
            }
            p = d.hash_next.load(Ordering::Acquire);
        }
        None
    }

    /// Finds the hashed, live entry for `(parent, name)` and takes a reference on it (the
    /// kernel's `d_lookup`). A miss is exact: it is retried when a rename ran during the scan,
    /// and the third try holds the rename mutex.
    #[doc(alias = "__d_lookup")]
    pub fn lookup_ref(&self, parent: &Dentry, name: &[u8], hash: u64) -> Option<DentryRef<'_>> {
        self.rename_read(|locked| {
            let mut complete = true;
            let g = rcu::pin();
            let mut p = self.bucket(parent, hash).first();
            let mut steps = 0;
            while !p.is_null() {
                // SAFETY: as in `lookup_rcu`.
                let d = unsafe { &*p };
                if ptr::eq(d.parent.load(Ordering::Relaxed), parent) && d.name_in(&g).hash == hash {
                    let mut lk = d.lockref.lock();
                    // Under the entry's lock its parent, name and flags are stable.
                    if !lk.is_dead()
                        && d.flags.load(Ordering::Relaxed) & HASHED != 0
                        && ptr::eq(d.parent.load(Ordering::Relaxed), parent)
                        && *d.name_in(&g).bytes == *name
                    {
                        lk.inc();
                        drop(lk);
                        return Pass::Sure(Some(DentryRef::adopt(self, NonNull::from(d))));
                    }
                }
                steps += 1;
                if !locked && steps > MAX_CHAIN {
                    complete = false;
                    break;
                }
                p = d.hash_next.load(Ordering::Acquire);
            }
            Pass::Seen {
                result: None,
                complete,
            }
        })
    }

    /// Allocates a hashed entry for `(parent, name)` with one reference, for the caller (the
    /// kernel's `d_alloc` + `d_add`). `ident` is `None` for a negative entry; `now` is the time
    /// stamp of its last check against the file system.
    ///
    /// The caller holds a reference on `parent` and makes sure no other live entry for
    /// `(parent, name)` is hashed (the file-system side holds the directory's lock).
    pub fn d_alloc(
        &self,
        parent: &Dentry,
        name: &[u8],
        hash: u64,
        ident: Option<Identity>,
        now: u64,
    ) -> DentryRef<'_> {
        // The child's reference on its parent.
        parent.lockref.get();
        let d = Dentry::alloc(
            self,
            ptr::from_ref(parent).cast_mut(),
            name,
            hash,
            ident,
            HASHED,
            now,
        );
        self.nr_dentry
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let g = rcu::pin();
        // SAFETY: `d` is new, alive, in no chain, with its parent and name set.
        unsafe { self.hash_insert(d.as_ref(), &g) };
        DentryRef::adopt(self, d)
    }

    /// Turns `d` into an entry for `ident` in place (a negative entry whose name was created,
    /// the kernel's `d_instantiate`). The caller holds a reference on `d`.
    pub(crate) fn d_instantiate(&self, d: &Dentry, ident: Identity, now: u64) {
        let _lk = d.lockref.lock();
        d.seq.write_begin();
        d.dev.store(ident.dev, Ordering::Relaxed);
        d.ino.store(ident.ino, Ordering::Relaxed);
        let f = d.flags.load(Ordering::Relaxed);
        d.flags.store(
            (f & !KIND_MASK) | super::entry::kind_bits(Some(ident)),
            Ordering::Relaxed,
        );
        d.checked_at.store(now, Ordering::Relaxed);
        d.seq.write_end();
    }

    /// Takes `d` out of the hash table (the kernel's `d_drop`): lookups stop finding it, those
    /// holding references keep a valid, unhashed entry that dies with their last reference.
    /// The caller holds a reference on `d`.
    pub fn d_drop(&self, d: &Dentry) {
        let _lk = d.lockref.lock();
        self.unhash_locked(d);
    }

    /// `d_drop` with `d`'s lock held.
    fn unhash_locked(&self, d: &Dentry) {
        let f = d.flags.load(Ordering::Relaxed);
        if f & HASHED == 0 || f & ROOT != 0 {
            return;
        }
        d.seq.invalidate();
        d.flags.fetch_and(!HASHED, Ordering::Release);
        let g = rcu::pin();
        // SAFETY: `d` was hashed, so it is in the chain its parent and name pick (they change
        // only under its lock, which we hold).
        unsafe { self.hash_remove(d, &g) };
    }

    /// Starts a rename: the rename mutex is held and the rename sequence count is odd until the
    /// guard is dropped.
    pub fn rename_begin(&self) -> RenameGuard<'_> {
        let m = self.rename_mutex.lock();
        self.rename_seq.write_begin();
        RenameGuard {
            core: self,
            _mutex: m,
        }
    }

    /// Moves the hashed entry `d` to the name `name` in `new_parent` (the kernel's `d_move`).
    /// Its children move with it, since they point to it. The caller holds references on `d` and
    /// `new_parent`, holds `_rename`, and has unhashed any entry that had the new name.
    pub fn d_move(
        &self,
        _rename: &RenameGuard<'_>,
        d: &Dentry,
        new_parent: &Dentry,
        name: &[u8],
        hash: u64,
    ) {
        let g = rcu::pin();
        let old_parent = d.parent.load(Ordering::Relaxed);
        let new_parent_ptr = ptr::from_ref(new_parent).cast_mut();
        let moving = old_parent != new_parent_ptr;
        if moving {
            // d's reference on its new parent, taken before d points there.
            new_parent.lockref.get();
        }
        {
            let _lk = d.lockref.lock();
            let hashed = d.flags.load(Ordering::Relaxed) & HASHED != 0;
            d.seq.write_begin();
            if hashed {
                // SAFETY: hashed, so in the chain of its current parent and name.
                unsafe { self.hash_remove(d, &g) };
            }
            if moving {
                d.parent.store(new_parent_ptr, Ordering::Release);
            }
            let new_name = Box::into_raw(Box::new(Name {
                hash,
                bytes: name.into(),
            }));
            let old_name = d.name.swap(new_name, Ordering::AcqRel);
            // SAFETY: `d` is alive and now in no chain; parent and name are set.
            unsafe { self.hash_insert(d, &g) };
            d.flags.fetch_or(HASHED, Ordering::Release);
            d.seq.write_end();
            // SAFETY: the old name came from `Box::into_raw`, is no longer reachable from `d`,
            // and readers that loaded it are inside guards.
            unsafe { g.defer_destroy(old_name) };
        }
        if moving {
            // SAFETY: the reference `d` held on its old parent, given up now; it kept the old
            // parent alive until here.
            unsafe { self.dput(NonNull::new_unchecked(old_parent)) };
        }
    }

    /// Swaps the places of the hashed entries `a` and `b` (the kernel's `d_exchange`, for
    /// `RENAME_EXCHANGE`): each takes the other's parent and name, and its cached children move
    /// with it. No reference count changes: each parent loses one child and gains the other.
    /// The caller holds references on both, holds `_rename`, and has made sure that neither is
    /// the other's ancestor.
    pub fn d_exchange(&self, _rename: &RenameGuard<'_>, a: &Dentry, b: &Dentry) {
        let g = rcu::pin();
        // Two entry locks at once, in address order; nothing else takes two unrelated entry
        // locks (kill goes from a child to its parent, and neither is the other's ancestor).
        let (first, second) = if ptr::from_ref(a) < ptr::from_ref(b) {
            (a, b)
        } else {
            (b, a)
        };
        let _l1 = first.lockref.lock();
        let _l2 = second.lockref.lock();
        a.seq.write_begin();
        b.seq.write_begin();
        for d in [a, b] {
            if d.flags.load(Ordering::Relaxed) & HASHED != 0 {
                // SAFETY: hashed, so in the chain of its current parent and name.
                unsafe { self.hash_remove(d, &g) };
            }
        }
        let (pa, pb) = (
            a.parent.load(Ordering::Relaxed),
            b.parent.load(Ordering::Relaxed),
        );
        a.parent.store(pb, Ordering::Release);
        b.parent.store(pa, Ordering::Release);
        // The names swap owners; both stay allocated, so readers holding either are fine.
        let (na, nb) = (
            a.name.load(Ordering::Relaxed),
            b.name.load(Ordering::Relaxed),
        );
        a.name.store(nb, Ordering::Release);
        b.name.store(na, Ordering::Release);
        for d in [a, b] {
            // SAFETY: alive and now in no chain; parent and name are set.
            unsafe { self.hash_insert(d, &g) };
            d.flags.fetch_or(HASHED, Ordering::Release);
        }
        b.seq.write_end();
        a.seq.write_end();
    }

    /// A reference to `d`'s parent (the root's parent is the root); the kernel's `dget_parent`.
    /// The caller holds a reference on `d`.
    pub(crate) fn dget_parent<'a>(&'a self, d: &Dentry) -> DentryRef<'a> {
        {
            let _g = rcu::pin();
            let s = d.seq.raw_begin();
            let p = d.parent.load(Ordering::Acquire);
            if p.is_null() {
                d.lockref.get();
                return DentryRef::adopt(self, NonNull::from(d));
            }
            // SAFETY: `p` was `d`'s parent when we loaded it under the guard, so `d` held a
            // reference on it then and it had not been handed to the epoch; the guard keeps it
            // allocated even if a rename moved `d` away and it died since.
            let pr = unsafe { &*p };
            if pr.lockref.get_not_zero() {
                if !d.seq.retry(s) {
                    // SAFETY: non-null, and we hold the reference just taken.
                    return DentryRef::adopt(self, unsafe { NonNull::new_unchecked(p) });
                }
                // `d` was moved meanwhile: put back the reference on its old parent (possibly
                // its last one) and do it the safe way.
                // SAFETY: the reference taken just above, given up once.
                unsafe { self.dput(NonNull::new_unchecked(p)) };
            }
        }
        loop {
            let _g = rcu::pin();
            let p = d.parent.load(Ordering::Acquire);
            if p.is_null() {
                d.lockref.get();
                return DentryRef::adopt(self, NonNull::from(d));
            }
            // SAFETY: as above.
            let pr = unsafe { &*p };
            let mut lk = pr.lockref.lock();
            // If `d` still points to `pr` with `pr`'s lock held, the reference `d` holds on it
            // cannot have been put: `d_move` stores the new parent before it puts the old one,
            // and the put is a Release decrement (or a locked one) that our Acquire lock would
            // have ordered before this load.
            if ptr::eq(d.parent.load(Ordering::Acquire), p) {
                debug_assert!(lk.count() > 0, "parent of a live child unreferenced");
                lk.inc();
                drop(lk);
                return DentryRef::adopt(self, NonNull::from(pr));
            }
        }
    }

    /// Whether an unused entry is kept (retained on the LRU) rather than killed.
    #[inline]
    fn retain(&self, d: &Dentry) -> bool {
        self.max_unused > 0 && d.flags.load(Ordering::Relaxed) & HASHED != 0
    }

    /// Gives up one reference on `d` (the kernel's `dput`).
    ///
    /// Lock-free (`put_return`) while the count stays positive. When it reaches zero and the
    /// entry is already hashed, on the LRU and marked referenced, nothing else is needed and no
    /// lock is taken; otherwise the decision — keep it on the LRU, or kill it — is made under the
    /// entry's lock, where a reference taken meanwhile by a lookup wins.
    ///
    /// # Safety
    ///
    /// The caller owns one reference on `d` and gives it up.
    pub(crate) unsafe fn dput(&self, d: NonNull<Dentry>) {
        // The guard keeps `d` allocated after our reference is gone, until we are done with it.
        let _g = rcu::pin();
        // SAFETY: our reference keeps `d` alive up to the put; the guard after it.
        let d = unsafe { d.as_ref() };
        match d.lockref.put_return() {
            Some(n) if n > 0 => {}
            Some(_) => {
                const KEPT: u32 = HASHED | ON_LRU | REFERENCED;
                // Acquire (with put_return's AcqRel): sees flag changes made under the lock by
                // whoever held it before our decrement succeeded.
                if d.flags.load(Ordering::Acquire) & KEPT == KEPT {
                    return;
                }
                let lk = d.lockref.lock();
                // Someone took a reference since (they will put it), or killed the entry.
                if lk.count() != 0 {
                    return;
                }
                self.finish_dput(d, lk);
            }
            None => {
                // Locked, or lost too many races: do it under the lock.
                if let Some(mut lk) = d.lockref.put_or_lock() {
                    debug_assert_eq!(lk.count(), 1, "dput of an entry without references");
                    lk.dec();
                    self.finish_dput(d, lk);
                }
            }
        }
    }

    /// The last reference on `d` is gone: `lk` holds its lock with the count at zero. Keep it on
    /// the LRU or kill it; then trim the LRU if it grew past its bound.
    fn finish_dput<'d>(&self, d: &'d Dentry, mut lk: LockRefGuard<'d>) {
        let grew = if self.retain(d) {
            let grew = self.keep_locked(d, &mut lk);
            drop(lk);
            grew
        } else {
            self.kill(d, lk)
        };
        if grew {
            let n = self.nr_unused();
            if n > self.max_unused {
                self.shrink(n - self.max_unused);
            }
        }
    }

    /// Marks the unused, locked `d` referenced and puts it on the LRU if it is not there yet.
    /// Returns whether the LRU grew.
    fn keep_locked(&self, d: &Dentry, _lk: &mut LockRefGuard<'_>) -> bool {
        let f = d.flags.load(Ordering::Relaxed);
        if f & REFERENCED == 0 {
            d.flags.fetch_or(REFERENCED, Ordering::Release);
        }
        if f & ON_LRU != 0 {
            return false;
        }
        let mut lru = self.lru.lock();
        // SAFETY: `d` is alive (we hold its lock, it is not dead) and not on the list (ON_LRU
        // is clear and changes only under both its lock and the LRU mutex).
        unsafe { lru.push_back(d) };
        d.flags.fetch_or(ON_LRU, Ordering::Release);
        self.nr_unused
            .store(lru.len, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// Kills `d`, whose lock the caller holds with the count at zero (or already marked dead by
    /// the caller, who owns its death), then puts the reference it held on its parent, killing
    /// the parent too if that was its last reference and it is not to be kept, and so on up the
    /// tree, as a loop. Returns whether the LRU grew (a parent was kept).
    fn kill<'d>(&self, mut d: &'d Dentry, mut lk: LockRefGuard<'d>) -> bool {
        let g = rcu::pin();
        loop {
            debug_assert!(lk.count() <= 0, "killing a referenced entry");
            lk.mark_dead();
            let f = d.flags.load(Ordering::Relaxed);
            if f & HASHED != 0 {
                self.unhash_locked(d);
            } else {
                d.seq.invalidate();
            }
            if f & ON_LRU != 0 {
                let mut lru = self.lru.lock();
                // SAFETY: ON_LRU is set, so `d` is on the list.
                unsafe { lru.remove(d) };
                d.flags.fetch_and(!ON_LRU, Ordering::Release);
                self.nr_unused
                    .store(lru.len, std::sync::atomic::Ordering::Relaxed);
            }
            let parent = d.parent.load(Ordering::Relaxed);
            drop(lk);
            self.nr_dentry
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: `d` is dead, unhashed and off the LRU, and has no children (each would
            // hold a reference): no path reaches it any more, and those that reached it earlier
            // are inside guards. It came from `Box::leak` in `Dentry::alloc`, and only its
            // killer (us: whoever marked it dead) frees it.
            unsafe { g.defer_destroy(ptr::from_ref(d).cast_mut()) };
            if parent.is_null() {
                return false;
            }
            // SAFETY: `d`'s reference kept the parent alive until the put below; the guard
            // keeps it allocated after.
            let p: &'d Dentry = unsafe { &*parent };
            match p.lockref.put_or_lock() {
                None => return false,
                Some(mut plk) => {
                    debug_assert_eq!(plk.count(), 1, "parent count below its children");
                    plk.dec();
                    if self.retain(p) {
                        return self.keep_locked(p, &mut plk);
                    }
                    d = p;
                    lk = plk;
                }
            }
        }
    }

    /// Evicts up to `nr` unused entries from the cold end of the LRU; returns how many it
    /// killed. Entries used since the last pass get a second chance; entries found in use are
    /// taken off the list (their last `dput` puts them back).
    #[doc(alias = "prune_dcache_sb")]
    pub fn shrink(&self, nr: usize) -> usize {
        self.shrink_inner(nr, false)
    }

    /// Evicts every unused entry, repeating while evictions leave parents unused; returns how
    /// many it killed. Afterwards (if nothing runs concurrently) the cache holds only entries in
    /// use and their ancestors. Stops when a pass makes no progress.
    #[doc(alias = "shrink_dcache_sb")]
    pub fn shrink_all(&self) -> usize {
        let mut total = 0;
        loop {
            let before = self.nr_unused();
            let n = self.shrink_inner(usize::MAX, true);
            total += n;
            let after = self.nr_unused();
            if after == 0 || (n == 0 && after >= before) {
                return total;
            }
        }
    }

    fn shrink_inner(&self, nr: usize, ignore_referenced: bool) -> usize {
        let mut dispose: Vec<NonNull<Dentry>> = Vec::new();
        {
            let mut lru = self.lru.lock();
            let mut budget = lru.len.saturating_mul(2);
            while dispose.len() < nr && budget > 0 && !lru.head.is_null() {
                budget -= 1;
                // SAFETY: entries on the list are alive (see `Lru`).
                let d = unsafe { &*lru.head };
                let Some(mut lk) = d.lockref.try_lock() else {
                    // Busy: look again later.
                    // SAFETY: on the list; we hold the mutex.
                    unsafe {
                        lru.remove(d);
                        lru.push_back(d);
                    }
                    continue;
                };
                let f = d.flags.load(Ordering::Relaxed);
                if lk.count() == 0 && !ignore_referenced && f & REFERENCED != 0 {
                    d.flags.fetch_and(!REFERENCED, Ordering::Release);
                    // SAFETY: as above.
                    unsafe {
                        lru.remove(d);
                        lru.push_back(d);
                    }
                    continue;
                }
                // SAFETY: as above.
                unsafe { lru.remove(d) };
                d.flags.fetch_and(!ON_LRU, Ordering::Release);
                if lk.count() == 0 {
                    // Claim it: from here on no lookup can take it, and we own its death.
                    lk.mark_dead();
                    d.seq.invalidate();
                    dispose.push(NonNull::from(d));
                }
                drop(lk);
            }
            self.nr_unused
                .store(lru.len, std::sync::atomic::Ordering::Relaxed);
        }
        let n = dispose.len();
        for d in dispose {
            // SAFETY: a claimed entry is dead but not freed: only its claimer (us) kills it.
            let d = unsafe { d.as_ref() };
            let lk = d.lockref.lock();
            // A parent kept on the LRU by this kill is left for the next pass.
            self.kill(d, lk);
        }
        n
    }

    /// The path of `d` from the root, as bytes starting with `/`, and whether `d` or one of its
    /// ancestors is unhashed (deleted). Reads without references, retrying when a rename ran
    /// meanwhile; the third try holds the rename mutex.
    pub fn path_of(&self, d: &Dentry) -> (Vec<u8>, bool) {
        self.rename_read(|_| {
            let g = rcu::pin();
            let mut names: Vec<&[u8]> = Vec::new();
            let mut deleted = false;
            let mut complete = true;
            let mut cur = d;
            loop {
                let f = cur.flags.load(Ordering::Acquire);
                if f & ROOT != 0 {
                    break;
                }
                if f & HASHED == 0 {
                    deleted = true;
                }
                names.push(&cur.name_in(&g).bytes);
                let p = cur.parent.load(Ordering::Acquire);
                if p.is_null() || names.len() > MAX_DEPTH {
                    complete = false;
                    break;
                }
                // SAFETY: `p` was `cur`'s parent when loaded, under the guard: `cur` held a
                // reference on it then, so it was not yet handed to the epoch.
                cur = unsafe { &*p };
            }
            let mut out = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum::<usize>() + 1);
            for n in names.iter().rev() {
                out.push(b'/');
                out.extend_from_slice(n);
            }
            if out.is_empty() {
                out.push(b'/');
            }
            Pass::Seen {
                result: (out, deleted),
                complete,
            }
        })
    }

    /// Runs `read` as a reader of the rename sequence until a pass saw no rename, or its result
    /// holds anyway; the third try holds the rename mutex, so the loop always ends (the kernel's
    /// `read_seqbegin_or_lock` / `need_seqretry`). `read` learns whether it runs under the mutex.
    #[doc(alias("read_seqbegin_or_lock", "need_seqretry"))]
    fn rename_read<R>(&self, mut read: impl FnMut(bool) -> Pass<R>) -> R {
        let mut tries = 0;
        loop {
            let locked = (tries >= 2).then(|| self.rename_mutex.lock());
            let s = if locked.is_some() {
                0
            } else {
                self.rename_seq.begin()
            };
            match read(locked.is_some()) {
                Pass::Sure(result) => return result,
                Pass::Seen { result, complete } => {
                    if locked.is_some() || (complete && !self.rename_seq.retry(s)) {
                        return result;
                    }
                }
            }
            tries += 1;
        }
    }

    /// References to every hashed entry (not the root). Exact when no change runs concurrently;
    /// otherwise an entry moved during the scan may be missed or listed twice.
    pub fn cached(&self) -> Vec<DentryRef<'_>> {
        let g = rcu::pin();
        let mut out = Vec::new();
        for b in self.buckets.iter() {
            let mut p = b.first();
            while !p.is_null() {
                // SAFETY: as in `lookup_rcu`.
                let d = unsafe { &*p };
                if d.is_hashed() && d.lockref.get_not_dead() {
                    out.push(DentryRef::adopt(self, NonNull::from(d)));
                }
                p = d.hash_next.load(Ordering::Acquire);
            }
        }
        drop(g);
        out
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // No `DentryRef` borrows the core any more. Evict everything unused, leaves first; then
        // drop the core's own reference on the root. Entries kept alive by references leaked
        // with `into_raw` (and their ancestors) are leaked with them.
        self.shrink_all();
        let root = self.root();
        if let Some(mut lk) = root.lockref.put_or_lock() {
            lk.dec();
            self.kill(root, lk);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
