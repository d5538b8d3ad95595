//! [`FolioRef`], the owned reference to an allocated folio. See the rules for the bytes in the
//! [parent module](super).

use super::*;

/// An owned reference to an allocated folio: dropping it puts the reference, and the last put
/// returns the frames to the pool's buddy allocator. Dereferences to the [`Folio`] descriptor.
pub struct FolioRef<'p> {
    pub(super) folio: &'p Folio,
    pub(super) pool: &'p FramePool,
}

// `FolioRef` is `Send` and `Sync` because `Folio` and `FramePool` are `Sync`: moving or sharing
// a reference only moves or shares the right to read up-to-date bytes, which is thread-safe.

impl<'p> FolioRef<'p> {
    /// Wraps a reference the caller owns.
    #[inline]
    pub(crate) fn from_parts(folio: &'p Folio, pool: &'p FramePool) -> FolioRef<'p> {
        FolioRef { folio, pool }
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

    /// The folio's first frame number in its pool.
    #[inline]
    #[doc(alias = "folio_pfn")]
    pub fn pfn(&self) -> usize {
        self.pool.pfn_of_desc(self.folio)
    }

    /// The address of the folio's first byte (page aligned; 2^order × 4 KiB aligned). Reading or
    /// writing through it is subject to the rules in the [module documentation](super).
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.pool.frame_ptr(self.pfn())
    }

    /// The folio's bytes, without copying, if it is up to date (`None` otherwise). They cannot
    /// change while this reference is borrowed; see the [module documentation](super).
    #[inline]
    pub fn bytes(&self) -> Option<&[u8]> {
        if !self.folio.is_uptodate() {
            return None;
        }
        // SAFETY: the frames belong to this folio while we hold a reference (it cannot be freed),
        // lie inside the pool's mapping, and are initialised (anonymous memory starts zeroed and
        // is only ever written with bytes). UPTODATE was set (acquire, pairing with the release in
        // `mark_uptodate`), so no `&mut` to them exists or can be made while this borrow of a
        // counted reference lasts (module documentation, "Access to the bytes").
        Some(unsafe { std::slice::from_raw_parts(self.as_ptr(), self.folio.size()) })
    }

    /// Takes the folio lock, sleeping while another thread holds it.
    #[inline]
    #[doc(alias = "folio_lock")]
    pub fn lock(self) -> FolioGuard<'p> {
        self.lock_with(WaitPolicy::Exact)
    }

    /// Takes the folio lock under a wait policy; the guard unlocks under the same policy. Every
    /// party locking one folio must use the same policy.
    #[inline]
    pub fn lock_with(self, policy: WaitPolicy) -> FolioGuard<'p> {
        policy.lock(&self.folio.flags);
        FolioGuard::from_ref(self, policy)
    }

    /// [`FolioRef::lock_with`] that awaits the lock instead of sleeping: the task parks a
    /// waker in the folio's wait queue (`sync::bitwait_async`). Cancel-safe: a future dropped
    /// before it completes leaves no waiter, holds no lock and puts its reference.
    #[doc(alias = "__folio_lock_async")]
    pub async fn lock_async(self, policy: WaitPolicy) -> FolioGuard<'p> {
        policy.lock_async(&self.folio.flags).await;
        FolioGuard::from_ref(self, policy)
    }

    /// Waits (asynchronously) until the folio is unlocked: "wait for the read in flight".
    #[doc(alias = "folio_wait_locked_async")]
    pub async fn wait_unlocked_async(&self, policy: WaitPolicy) {
        policy.wait_clear_async(&self.folio.flags, LOCKED).await;
    }

    /// Takes the folio lock if it is free; gives the reference back otherwise.
    #[inline]
    #[doc(alias = "folio_trylock")]
    pub fn try_lock(self) -> Result<FolioGuard<'p>, FolioRef<'p>> {
        self.try_lock_with(WaitPolicy::Exact)
    }

    /// [`FolioRef::try_lock`] under a wait policy; the guard unlocks under the same policy.
    #[inline]
    pub fn try_lock_with(self, policy: WaitPolicy) -> Result<FolioGuard<'p>, FolioRef<'p>> {
        if policy.try_lock(&self.folio.flags) {
            Ok(FolioGuard::from_ref(self, policy))
        } else {
            Err(self)
        }
    }

    /// Takes the folio lock, or gives up when `cancel` fires (returning the reference).
    #[doc(alias = "folio_lock_killable")]
    pub fn lock_cancellable(
        self,
        cancel: &Cancel,
    ) -> Result<FolioGuard<'p>, (FolioRef<'p>, WaitError)> {
        match bitwait::lock_cancellable(&self.folio.flags, cancel) {
            Ok(()) => Ok(FolioGuard::from_ref(self, WaitPolicy::Exact)),
            Err(e) => Err((self, e)),
        }
    }

    /// Gives up the `FolioRef` without putting the reference: it becomes a raw reference, to be
    /// turned back with [`FramePool::ref_from_raw`] (e.g. the page cache's own reference, stored
    /// as a pointer in its index).
    #[inline]
    pub fn into_raw(self) -> NonNull<Folio> {
        let p = NonNull::from(self.folio);
        std::mem::forget(self);
        p
    }
}

impl Clone for FolioRef<'_> {
    #[inline]
    fn clone(&self) -> Self {
        self.folio.get();
        FolioRef {
            folio: self.folio,
            pool: self.pool,
        }
    }
}

impl Drop for FolioRef<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.folio.put() {
            self.pool.free_folio(self.folio);
        }
    }
}

impl std::ops::Deref for FolioRef<'_> {
    type Target = Folio;
    #[inline]
    fn deref(&self) -> &Folio {
        self.folio
    }
}

impl fmt::Debug for FolioRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FolioRef")
            .field("pfn", &self.pfn())
            .field("folio", self.folio)
            .finish()
    }
}
