//! Write-back error tracking, after the kernel's `errseq_t`.
//!
//! A file's write-back can fail long after the `write` that dirtied the data returned. The error
//! must reach every `fsync` caller that has not seen it yet — once each — and must not be lost
//! when another caller sees it first (rule 6 of docs/RULES.md). An [`ErrSeq`] is one 64-bit word per
//! file; each open handle keeps a [`ErrSeqSince`] sample of it and compares on `fsync`.
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 0..16 | `code` | the last error's code (an [`std::io::ErrorKind`] index or raw errno, nonzero), 0 if none ever |
//! | 16 | `SEEN` | somebody has reported the current error |
//! | 17..64 | `counter` | bumped when a new error is recorded after the previous one was seen |
//!
//! Recording an error that nobody has seen yet does not bump the counter: the callers that have
//! not seen the first one will see the second (the latest code wins), and one report covers both.
//! A sample taken while an error is unseen is taken as "before" that error, so a handle opened
//! after a failure but before anyone reported it still gets it.

use crate::sync::loom::{AtomicU64, Ordering};

const CODE_BITS: u32 = 16;
const CODE_MASK: u64 = (1 << CODE_BITS) - 1;
const SEEN: u64 = 1 << CODE_BITS;
const COUNTER_ONE: u64 = 1 << (CODE_BITS + 1);

/// A file's write-back error state; see the [module documentation](self).
#[derive(Debug, Default)]
pub(crate) struct ErrSeq {
    word: AtomicU64,
}

/// A handle's position in a file's error sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ErrSeqSince(u64);

impl ErrSeq {
    /// No error recorded.
    pub(crate) fn new() -> ErrSeq {
        ErrSeq {
            word: AtomicU64::new(0),
        }
    }

    /// Records a write-back error with a nonzero `code` (zero is taken as 1).
    #[doc(alias = "errseq_set")]
    pub(crate) fn set(&self, code: u16) {
        let code = u64::from(code.max(1));
        let mut old = self.word.load(Ordering::Relaxed);
        loop {
            let mut new = (old & !(CODE_MASK | SEEN)) | code;
            if old & SEEN != 0 || old & CODE_MASK == 0 {
                // The previous error was reported (or there was none): this one is new to
                // everybody, so move the sequence on.
                new = new.wrapping_add(COUNTER_ONE);
            }
            if new == old {
                return;
            }
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(cur) => old = cur,
            }
        }
    }

    /// A sample for a new handle: the current position, or "before the current error" if nobody
    /// has seen it yet.
    #[doc(alias = "errseq_sample")]
    pub(crate) fn sample(&self) -> ErrSeqSince {
        let cur = self.word.load(Ordering::Acquire);
        if cur & CODE_MASK != 0 && cur & SEEN == 0 {
            ErrSeqSince(0)
        } else {
            ErrSeqSince(cur & !SEEN)
        }
    }

    /// The error recorded since `since`, if any, without consuming it.
    #[doc(alias = "errseq_check")]
    #[allow(dead_code)] // the kernel's errseq_check, kept beside check_and_advance; the unit tests use it
    pub(crate) fn check(&self, since: ErrSeqSince) -> Option<u16> {
        let cur = self.word.load(Ordering::Acquire) & !SEEN;
        if cur == since.0 || cur & CODE_MASK == 0 {
            None
        } else {
            Some((cur & CODE_MASK) as u16)
        }
    }

    /// Reports the error recorded since `*since`, once: marks it seen and moves `*since` past it.
    #[doc(alias = "errseq_check_and_advance")]
    pub(crate) fn check_and_advance(&self, since: &mut ErrSeqSince) -> Option<u16> {
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            if cur & !SEEN == since.0 || cur & CODE_MASK == 0 {
                return None;
            }
            if cur & SEEN != 0 {
                break;
            }
            match self.word.compare_exchange_weak(
                cur,
                cur | SEEN,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        since.0 = cur & !SEEN;
        Some((cur & CODE_MASK) as u16)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn no_error_reports_nothing() {
        let e = ErrSeq::new();
        let mut s = e.sample();
        assert_eq!(e.check(s), None);
        assert_eq!(e.check_and_advance(&mut s), None);
    }

    #[test]
    fn every_handle_sees_an_error_once() {
        let e = ErrSeq::new();
        let mut a = e.sample();
        let mut b = e.sample();
        e.set(5);
        assert_eq!(e.check_and_advance(&mut a), Some(5));
        assert_eq!(e.check_and_advance(&mut a), None);
        assert_eq!(e.check_and_advance(&mut b), Some(5));
        assert_eq!(e.check_and_advance(&mut b), None);
    }

    #[test]
    fn a_handle_opened_before_anyone_saw_the_error_gets_it() {
        let e = ErrSeq::new();
        e.set(7);
        let mut late = e.sample();
        assert_eq!(e.check_and_advance(&mut late), Some(7));
        // Once seen, a newer handle starts after it.
        let mut later = e.sample();
        assert_eq!(e.check_and_advance(&mut later), None);
    }

    #[test]
    fn a_second_error_after_the_first_was_seen_is_reported_again() {
        let e = ErrSeq::new();
        let mut a = e.sample();
        let mut b = e.sample();
        e.set(5);
        assert_eq!(e.check_and_advance(&mut a), Some(5));
        e.set(5);
        assert_eq!(e.check_and_advance(&mut a), Some(5), "same code, new error");
        // b never reported anything: one report covers both errors, with the latest code.
        assert_eq!(e.check_and_advance(&mut b), Some(5));
        assert_eq!(e.check_and_advance(&mut b), None);
    }

    #[test]
    fn unseen_errors_coalesce_with_the_latest_code() {
        let e = ErrSeq::new();
        let mut a = e.sample();
        e.set(5);
        e.set(9);
        assert_eq!(e.check(a), Some(9));
        assert_eq!(e.check_and_advance(&mut a), Some(9));
        assert_eq!(e.check_and_advance(&mut a), None);
    }

    #[test]
    fn concurrent_fsyncs_each_see_the_error_once() {
        let e = ErrSeq::new();
        let samples: Vec<_> = (0..4).map(|_| e.sample()).collect();
        e.set(3);
        let seen: usize = std::thread::scope(|s| {
            let hs: Vec<_> = samples
                .into_iter()
                .map(|mut since| {
                    let e = &e;
                    s.spawn(move || {
                        let first = e.check_and_advance(&mut since).is_some();
                        let second = e.check_and_advance(&mut since).is_some();
                        assert!(!second);
                        usize::from(first)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(seen, 4);
    }
}
