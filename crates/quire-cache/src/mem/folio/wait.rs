//! The folio lock and the write-back wait on the flag word, built on [`crate::sync::bitwait`]
//! (`folio_lock`, `folio_unlock`, `folio_wait_locked`, `folio_end_writeback`, …).

use super::*;

impl Folio {
    /// Takes the folio lock without a guard if it is free (acquire). Call only while holding a
    /// reference. Release it with [`Folio::unlock`]; to touch the bytes, lock through
    /// [`FolioRef::lock`] instead.
    #[inline]
    #[doc(alias = "folio_trylock")]
    pub fn try_lock(&self) -> bool {
        bitwait::try_lock(&self.flags)
    }

    /// Takes the folio lock without a guard, sleeping while it is held; see [`Folio::try_lock`].
    #[inline]
    #[doc(alias = "folio_lock")]
    pub fn lock(&self) {
        bitwait::lock(&self.flags)
    }

    /// [`Folio::lock`] under a wait policy (benchmarks: the "before" variants).
    #[inline]
    pub fn lock_with(&self, policy: WaitPolicy) {
        policy.lock(&self.flags)
    }

    /// Releases a lock taken with [`Folio::lock`] or [`Folio::try_lock`]: one release
    /// read-modify-write; the wait table only if somebody waits.
    ///
    /// # Safety
    ///
    /// The calling thread (or one that handed it over) took the lock without a guard and still
    /// holds it. Unlocking a lock held by a [`FolioGuard`] would let two threads write the bytes.
    #[inline]
    #[doc(alias = "folio_unlock")]
    pub unsafe fn unlock(&self) {
        bitwait::unlock(&self.flags)
    }

    /// [`Folio::unlock`] under a wait policy.
    ///
    /// # Safety
    ///
    /// As for [`Folio::unlock`].
    #[inline]
    pub unsafe fn unlock_with(&self, policy: WaitPolicy) {
        policy.unlock(&self.flags)
    }

    /// Sleeps until the folio is unlocked (acquire), without taking the lock.
    #[inline]
    #[doc(alias = "folio_wait_locked")]
    pub fn wait_locked(&self) {
        bitwait::wait_clear(&self.flags, LOCKED)
    }

    /// [`Folio::wait_locked`] under a wait policy.
    #[inline]
    pub fn wait_locked_with(&self, policy: WaitPolicy) {
        policy.wait_clear(&self.flags, LOCKED)
    }

    /// Sleeps until the folio is unlocked, or until `cancel` fires.
    #[inline]
    #[doc(alias = "folio_wait_locked_killable")]
    pub fn wait_locked_cancellable(&self, cancel: &Cancel) -> Result<(), WaitError> {
        bitwait::wait_clear_cancellable(&self.flags, LOCKED, cancel)
    }

    /// Marks write-back in flight; returns whether it already was. The page cache calls it with
    /// the folio locked, after clearing [`DIRTY`], and may unlock before the I/O completes.
    #[inline]
    #[doc(alias = "folio_start_writeback")]
    pub fn start_writeback(&self) -> bool {
        bitwait::set_bit(&self.flags, WRITEBACK)
    }

    /// Ends write-back: clears [`WRITEBACK`] (release) and wakes whoever waits for it.
    #[inline]
    #[doc(alias = "folio_end_writeback")]
    pub fn end_writeback(&self) {
        bitwait::clear_and_wake(&self.flags, WRITEBACK)
    }

    /// [`Folio::end_writeback`] under a wait policy.
    #[inline]
    pub fn end_writeback_with(&self, policy: WaitPolicy) {
        policy.clear_and_wake(&self.flags, WRITEBACK)
    }

    /// Sleeps until no write-back is in flight (acquire).
    #[inline]
    #[doc(alias = "folio_wait_writeback")]
    pub fn wait_writeback(&self) {
        bitwait::wait_clear(&self.flags, WRITEBACK)
    }

    /// [`Folio::wait_writeback`] under a wait policy.
    #[inline]
    pub fn wait_writeback_with(&self, policy: WaitPolicy) {
        policy.wait_clear(&self.flags, WRITEBACK)
    }

    /// Sleeps until no write-back is in flight, or until `cancel` fires.
    #[inline]
    pub fn wait_writeback_cancellable(&self, cancel: &Cancel) -> Result<(), WaitError> {
        bitwait::wait_clear_cancellable(&self.flags, WRITEBACK, cancel)
    }
}
