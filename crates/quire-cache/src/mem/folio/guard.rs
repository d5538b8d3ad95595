//! The locked and frozen states of a folio: [`FolioGuard`] (the folio lock held, with one
//! reference: `folio_lock` … `folio_unlock`) and [`FrozenFolio`] (the count frozen at zero under
//! the lock: `folio_ref_freeze` … `folio_ref_unfreeze`). See the rules for the bytes in the
//! [parent module](super).

use super::*;

/// A reference to a folio whose lock this guard holds. Dropping it unlocks and then puts the
/// reference; [`FolioGuard::unlock`] unlocks and keeps the reference.
pub struct FolioGuard<'p> {
    folio: &'p Folio,
    pool: &'p FramePool,
    policy: WaitPolicy,
}

// `FolioGuard` is `Send` (bitwait allows unlocking from another thread, e.g. when an I/O
// completes there) and `Sync` (a shared guard only lends `&[u8]`).

impl<'p> FolioGuard<'p> {
    #[inline]
    pub(super) fn from_ref(r: FolioRef<'p>, policy: WaitPolicy) -> FolioGuard<'p> {
        let (folio, pool) = (r.folio, r.pool);
        std::mem::forget(r);
        FolioGuard {
            folio,
            pool,
            policy,
        }
    }

    /// The descriptor.
    #[inline]
    pub fn folio(&self) -> &'p Folio {
        self.folio
    }

    /// The pool the folio belongs to.
    #[inline]
    pub fn pool(&self) -> &'p FramePool {
        self.pool
    }

    /// The folio's first frame number.
    #[inline]
    #[doc(alias = "folio_pfn")]
    pub fn pfn(&self) -> usize {
        self.pool.pfn_of_desc(self.folio)
    }

    /// The folio's bytes, up to date or not (the lock holder may look at what it is filling).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the frames belong to the folio while we hold its reference. If UPTODATE is set,
        // only shared borrows exist. If it is clear, no `FolioRef` can lend bytes and no other
        // guard exists (we hold the lock); the only `&mut` would come from `bytes_mut` on this
        // guard, which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.pool.frame_ptr(self.pfn()), self.folio.size()) }
    }

    /// The folio's bytes for writing, if it is not up to date (`None` if it is: see
    /// [`FolioGuard::freeze`]). This is where a read from the store lands.
    #[inline]
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if self.folio.is_uptodate() {
            return None;
        }
        // SAFETY: we hold the lock and a reference, and UPTODATE is clear: no other thread can
        // hold a borrow of these bytes (module documentation, "Access to the bytes"), and this
        // guard's own borrows are excluded by `&mut self`.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.pool.frame_ptr(self.pfn()), self.folio.size())
        })
    }

    /// Sets [`UPTODATE`] (release): from now on references lend the bytes. Returns whether it was
    /// already set.
    #[inline]
    #[doc(alias = "folio_mark_uptodate")]
    pub fn mark_uptodate(&mut self) -> bool {
        self.folio.flags.fetch_or(UPTODATE, Ordering::Release) & UPTODATE != 0
    }

    /// Freezes the reference count for exclusive access to an up-to-date folio: succeeds when the
    /// count is exactly this guard's reference plus `raw_refs`, and then no other reference can be
    /// taken until the [`FrozenFolio`] is dropped (which restores the count). `None` when other
    /// references exist, or a borrower names the folio in its borrow slot (`mem/borrow.rs`).
    ///
    /// # Safety
    ///
    /// `raw_refs` raw references (see the [module documentation](super)) must exist and be owned
    /// by the caller for the duration of the freeze: nobody may turn them into a [`FolioRef`],
    /// drop or clone them, or read the folio's bytes through them until the freeze ends. (A wrong
    /// count could otherwise succeed while another thread reads the bytes.)
    #[inline]
    #[doc(alias = "folio_ref_freeze")]
    pub unsafe fn freeze(&mut self, raw_refs: u32) -> Option<FrozenFolio<'_, 'p>> {
        let expected = raw_refs.checked_add(1)?;
        // SAFETY: the guard's own reference and, by the caller's promise, `raw_refs` raw ones are
        // owned by this freeze; `FrozenFolio` unfreezes on drop.
        if unsafe { self.folio.try_freeze(expected) } {
            Some(FrozenFolio {
                guard: self,
                restore: expected,
            })
        } else {
            None
        }
    }

    /// Gives up the guard without unlocking or putting: the lock and the reference become raw,
    /// to be taken back with [`FramePool::guard_from_raw`] — e.g. by the thread that completes an
    /// asynchronous read and then unlocks.
    #[inline]
    pub fn into_raw(self) -> (NonNull<Folio>, WaitPolicy) {
        let r = (NonNull::from(self.folio), self.policy);
        std::mem::forget(self);
        r
    }

    /// Wraps a lock and a reference the caller owns.
    #[inline]
    pub(crate) fn from_parts(
        folio: &'p Folio,
        pool: &'p FramePool,
        policy: WaitPolicy,
    ) -> FolioGuard<'p> {
        FolioGuard {
            folio,
            pool,
            policy,
        }
    }

    /// Frees the folio `ticket` says this guard's freeze left at a count of zero: unlocks it
    /// and gives its frames to `batch`, which frees them with the batch's others. Neither an
    /// unfreeze nor the free's look for borrowers ([`FramePool`]'s free path) is needed: no
    /// reference could be taken while the count was zero, and the freeze's own scan of the
    /// borrow slots found none, so every borrow begun after it fails its check (the sequence
    /// moved at the freeze and only moves on from there: `mem/borrow.rs`).
    ///
    /// # Panics
    ///
    /// If `ticket` is another folio's, or `batch` another pool's.
    #[inline]
    #[doc(alias = "free_unref_folios")]
    pub fn free_frozen(self, ticket: FreeTicket<'p>, batch: &mut FreeBatch<'p>) {
        assert!(
            std::ptr::eq(ticket.folio, self.folio),
            "a free ticket handed to another folio's guard"
        );
        assert!(
            batch.is_of(self.pool),
            "a folio freed into another pool's batch"
        );
        let (folio, policy) = (self.folio, self.policy);
        std::mem::forget(self);
        policy.unlock(&folio.flags);
        batch.push(folio);
    }

    /// Unlocks and returns the reference.
    #[inline]
    #[doc(alias = "folio_unlock")]
    pub fn unlock(self) -> FolioRef<'p> {
        let (folio, pool, policy) = (self.folio, self.pool, self.policy);
        std::mem::forget(self);
        policy.unlock(&folio.flags);
        FolioRef { folio, pool }
    }
}

impl Drop for FolioGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.policy.unlock(&self.folio.flags);
        if self.folio.put() {
            self.pool.free_folio(self.folio);
        }
    }
}

impl std::ops::Deref for FolioGuard<'_> {
    type Target = Folio;
    #[inline]
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl fmt::Debug for FolioGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FolioGuard")
            .field("pfn", &self.pfn())
            .field("folio", self.folio)
            .finish()
    }
}

/// A locked folio with its reference count frozen at zero: the only access to it is through this
/// value. Dropping it unfreezes (restores the count, minus raw references released with
/// [`FrozenFolio::release_raw_refs`]).
pub struct FrozenFolio<'g, 'p> {
    guard: &'g mut FolioGuard<'p>,
    restore: u32,
}

impl<'p> FrozenFolio<'_, 'p> {
    /// The descriptor (which lives as long as the pool).
    #[inline]
    pub fn folio(&self) -> &'p Folio {
        self.guard.folio
    }

    /// The folio's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.guard.bytes()
    }

    /// The folio's bytes for writing, up to date or not.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let (ptr, len) = (
            self.guard.pool.frame_ptr(self.guard.pfn()),
            self.guard.folio.size(),
        );
        // SAFETY: the count is frozen at zero, so no reference other than those owned by this
        // freeze exists or can be taken, and the freeze's owner promised not to read through the
        // raw ones; the guard is mutably borrowed by `self`, and `&mut self` excludes our own
        // other borrows.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    /// Sets [`UPTODATE`].
    #[inline]
    #[doc(alias = "folio_mark_uptodate")]
    pub fn mark_uptodate(&mut self) {
        self.guard.folio.flags.fetch_or(UPTODATE, Ordering::Release);
    }

    /// Clears [`UPTODATE`] (e.g. on invalidation): references taken after the freeze no longer
    /// lend the bytes.
    #[inline]
    #[doc(alias = "folio_clear_uptodate")]
    pub fn clear_uptodate(&mut self) {
        self.guard
            .folio
            .flags
            .fetch_and(!UPTODATE, Ordering::Release);
    }

    /// Records that `n` of the raw references owned by this freeze are gone (e.g. the page cache
    /// removed the folio from its index, and with it the index's reference): the count restored
    /// on unfreeze is smaller by `n`. Returns false (and changes nothing) if `n` is more than the
    /// raw references the freeze owns.
    ///
    /// # Safety
    ///
    /// The holders of those `n` raw references must never use them again.
    #[inline]
    #[doc(alias = "folio_ref_sub")]
    pub unsafe fn release_raw_refs(&mut self, n: u32) -> bool {
        // The guard's own reference is never released here.
        if n > self.restore - 1 {
            return false;
        }
        self.restore -= n;
        true
    }

    /// The count that dropping this value restores.
    #[inline]
    pub fn restore_count(&self) -> u32 {
        self.restore
    }

    /// Ends the freeze with the count left at zero, when the guard's own reference is the only
    /// one left (every raw one given up with [`FrozenFolio::release_raw_refs`]): the folio is
    /// to be freed from the frozen state by [`FolioGuard::free_frozen`], as the kernel frees a
    /// folio `__remove_mapping` froze without unfreezing it. Gives the freeze back while other
    /// references remain.
    #[inline]
    pub fn end_for_free(self) -> Result<FreeTicket<'p>, Self> {
        if self.restore != 1 {
            return Err(self);
        }
        let folio = self.guard.folio;
        std::mem::forget(self);
        Ok(FreeTicket { folio })
    }
}

/// A folio whose freeze ended with its count at zero and only its guard's reference left
/// ([`FrozenFolio::end_for_free`]): hand it to that guard's [`FolioGuard::free_frozen`]. The
/// guard must not be dropped or unlocked meanwhile (its reference is counted nowhere: putting
/// it would find the count at zero and panic).
#[must_use = "the folio's guard must free it with `FolioGuard::free_frozen`"]
#[derive(Debug)]
pub struct FreeTicket<'p> {
    folio: &'p Folio,
}

impl fmt::Debug for FrozenFolio<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenFolio")
            .field("folio", self.guard.folio)
            .field("restore", &self.restore)
            .finish()
    }
}

impl Drop for FrozenFolio<'_, '_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this value froze the folio, and `restore` counts the guard's reference and the
        // raw references still owned (at least 1).
        unsafe { self.guard.folio.unfreeze(self.restore) };
    }
}
