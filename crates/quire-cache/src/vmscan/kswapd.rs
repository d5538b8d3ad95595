//! Background reclaim: one thread per cache (the kernel's `kswapd`), woken by allocations that
//! find the free frames below the low watermark, reclaiming until they are above the high one.
//!
//! The thread holds only the shared wake-up state and a weak reference to whatever does the
//! work ([`Balance`], the cache), so the cache goes away when its last user does; its drop
//! calls [`Kswapd::stop`], which the thread sees at once when asleep, and between rounds of
//! reclaim when awake (a round never waits for I/O: write-back is the flusher's).
//!
//! Waking costs an allocation two relaxed loads while the thread is already awake (and, once a
//! round, a store of the flag that asks for another round).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::stats::{Counters, Event};

/// What the thread runs: a round of background reclaim for an allocation of `order`, stopping
/// early when `stop()` turns true. Returns whether the free frames reached the high watermark.
pub(crate) trait Balance: Send + Sync {
    fn kswapd_balance(&self, order: u32, stop: &dyn Fn() -> bool) -> bool;
    /// Whether allocations would wake the thread now (free frames below the low watermark).
    fn kswapd_wanted(&self) -> bool;
}

#[derive(Default)]
struct State {
    stop: bool,
    /// A wake-up arrived since the thread last looked.
    pending: bool,
    /// The largest order asked for since then.
    order: u32,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Rounds of reclaim the thread has finished; allocations waiting for it sleep on
    /// `round_done`.
    rounds: Mutex<u64>,
    /// The same count, bumped before `rounds`, for allocations that watch it without the lock.
    rounds_seen: AtomicU64,
    round_done: Condvar,
    /// The thread is working (or about to): wakers need not take the lock.
    awake: AtomicBool,
    /// An allocation found the free frames below the low watermark while the thread was
    /// awake: it wants another round once this one ends. Cleared as each round begins. What
    /// the thread watches between rounds (see [`LINGER`]), rather than the free-frame
    /// counters: those change with every allocation, and a thread reading them all the time
    /// would take their cache line from the allocating core each time; this flag is written
    /// once a round.
    wanted: AtomicBool,
    stopping: AtomicBool,
}

/// The handle on a cache's background reclaim thread.
pub(crate) struct Kswapd {
    shared: Arc<Shared>,
}

/// How long the thread waits before trying again after a round that freed nothing (everything
/// pinned, locked or dirty), unless woken sooner.
const BACKOFF: Duration = Duration::from_millis(20);

impl Kswapd {
    pub(crate) fn new() -> Kswapd {
        Kswapd {
            shared: Arc::new(Shared::default()),
        }
    }

    /// Starts the thread.
    #[doc(alias = "kswapd_run")]
    pub(crate) fn spawn(&self, target: Weak<dyn Balance>) -> std::io::Result<()> {
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("quire-kswapd".into())
            .spawn(move || run(&shared, &target))?;
        Ok(())
    }

    /// Wakes the thread for an allocation of `order` (the kernel's `wakeup_kswapd`).
    #[doc(alias = "wakeup_kswapd")]
    #[inline]
    pub(crate) fn wake(&self, order: u32, counters: &Counters) {
        if self.shared.awake.load(Ordering::Relaxed) {
            // (A load first: the line stays shared while the flag is already set.)
            if !self.shared.wanted.load(Ordering::Relaxed) {
                self.shared.wanted.store(true, Ordering::Relaxed);
            }
            return;
        }
        self.wake_slow(order, counters);
    }

    #[cold]
    fn wake_slow(&self, order: u32, counters: &Counters) {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.stop {
            return;
        }
        st.pending = true;
        st.order = st.order.max(order);
        if !self.shared.awake.swap(true, Ordering::Relaxed) {
            counters.count(Event::KswapdWakeups);
            self.shared.wake.notify_one();
        }
    }

    /// Whether the thread is working (or about to).
    #[inline]
    pub(crate) fn is_awake(&self) -> bool {
        self.shared.awake.load(Ordering::Relaxed)
    }

    /// The thread finished a round of reclaim: wakes the allocations waiting for it.
    pub(crate) fn note_round(&self) {
        self.shared.rounds_seen.fetch_add(1, Ordering::Release);
        *self.shared.rounds.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.shared.round_done.notify_all();
    }

    /// Watches for the end of the thread's current round of reclaim, `looks` times with a few
    /// hundred nanoseconds of spinning between (and a yield every eighth, so that the thread
    /// runs where it shares this CPU): whether a round ended meanwhile. Cheaper than
    /// [`Kswapd::wait_round`] when the round is about to end, as it is for an allocation that
    /// comes back every round: no sleep, and no thread switch to wake it.
    pub(crate) fn spin_for_round(&self, looks: u32) -> bool {
        let seen = self.shared.rounds_seen.load(Ordering::Acquire);
        for look in 1..=looks {
            for _ in 0..16 {
                std::hint::spin_loop();
            }
            if self.shared.rounds_seen.load(Ordering::Acquire) != seen {
                return true;
            }
            if look.is_multiple_of(8) {
                std::thread::yield_now();
            }
        }
        false
    }

    /// Waits until the thread finishes a round of reclaim, at most `timeout`.
    pub(crate) fn wait_round(&self, timeout: Duration) {
        let rounds = self.shared.rounds.lock().unwrap_or_else(|e| e.into_inner());
        let seen = *rounds;
        let _ = self
            .shared
            .round_done
            .wait_timeout_while(rounds, timeout, |r| *r == seen);
    }

    /// Tells the thread to stop.
    #[doc(alias = "kswapd_stop")]
    pub(crate) fn stop(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.stop = true;
        drop(st);
        self.shared.wake.notify_all();
    }
}

/// Rounds in a row that may free nothing before the thread waits to be woken again.
const MAX_FAILURES: u32 = 4;

/// How long the thread keeps looking after a round that balanced, before it sleeps: a reader
/// missing all the time (a cold scan, a trace larger than the cache) takes a round's frames in
/// about this long, and finding the free frames low again here saves the wake-up — the waker's
/// lock and futex call, two thread switches — that would otherwise cost every round. It
/// yields the CPU between looks, so a runnable thread is not kept waiting.
const LINGER: Duration = Duration::from_micros(100);

/// After a balanced round: whether allocations want another within [`LINGER`]. An allocation's
/// flag is confirmed against the free frames (one read of their counters): one raised while
/// the round was still freeing may be answered already.
fn linger(shared: &Shared, t: &dyn Balance, stopping: &dyn Fn() -> bool) -> bool {
    let until = std::time::Instant::now() + LINGER;
    loop {
        if shared.wanted.load(Ordering::Relaxed) {
            if t.kswapd_wanted() {
                return true;
            }
            shared.wanted.store(false, Ordering::Relaxed);
        }
        if stopping() || std::time::Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}

fn run(shared: &Shared, target: &Weak<dyn Balance>) {
    let stopping = || shared.stopping.load(Ordering::Relaxed);
    let mut failures = 0u32;
    // The last round balanced and allocations already wanted another: no sleep between.
    let mut busy = false;
    loop {
        let order = if busy {
            0
        } else {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            let retry = failures > 0 && failures < MAX_FAILURES;
            if retry && !st.pending && !st.stop {
                // The last round freed nothing: try again a little later even if nobody wakes
                // us, since the flusher may have cleaned folios meanwhile.
                st = shared
                    .wake
                    .wait_timeout(st, BACKOFF)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            while !st.pending && !st.stop && !retry {
                shared.awake.store(false, Ordering::Relaxed);
                st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.stop {
                return;
            }
            shared.awake.store(true, Ordering::Relaxed);
            st.pending = false;
            std::mem::take(&mut st.order)
        };
        let Some(t) = target.upgrade() else {
            // Gone (its drop also stops us), or not finished being built yet.
            if stopping() {
                return;
            }
            failures += 1;
            continue;
        };
        busy = false;
        shared.wanted.store(false, Ordering::Relaxed);
        if t.kswapd_balance(order, &stopping) {
            failures = 0;
            busy = linger(shared, &*t, &stopping);
        } else {
            failures += 1;
        }
        drop(t);
        // Allocations waiting for this round must not wait for one that will not come.
        *shared.rounds.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        shared.round_done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Counts its rounds; in the first, an allocation wakes the (awake) thread again.
    struct Rounds {
        k: Arc<Kswapd>,
        counters: Counters,
        rounds: AtomicU64,
    }

    impl Balance for Rounds {
        fn kswapd_balance(&self, _order: u32, _stop: &dyn Fn() -> bool) -> bool {
            if self.rounds.fetch_add(1, Ordering::SeqCst) == 0 {
                self.k.wake(0, &self.counters);
            }
            true
        }
        fn kswapd_wanted(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_wake_during_a_round_gets_another_round_without_a_wakeup() {
        let k = Arc::new(Kswapd::new());
        let r = Arc::new(Rounds {
            k: k.clone(),
            counters: Counters::default(),
            rounds: AtomicU64::new(0),
        });
        let target: Arc<dyn Balance> = r.clone();
        k.spawn(Arc::downgrade(&target)).unwrap();
        k.wake(0, &r.counters);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while r.rounds.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The thread lingers, then sleeps; a third round would need another wake.
        std::thread::sleep(LINGER * 20);
        k.stop();
        assert_eq!(
            r.rounds.load(Ordering::SeqCst),
            2,
            "the wake in the round was lost"
        );
        // One wake-up (the first): the second round followed the first without a sleep.
        assert_eq!(r.counters.get(Event::KswapdWakeups), 1);
    }

    #[test]
    fn a_watch_with_no_round_ending_gives_up() {
        let k = Kswapd::new();
        assert!(!k.spin_for_round(16));
    }

    #[test]
    fn a_watch_sees_a_round_that_ends_meanwhile() {
        let k = Arc::new(Kswapd::new());
        let done = Arc::new(AtomicBool::new(false));
        let ender = {
            let (k, done) = (k.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    k.note_round();
                }
            })
        };
        // Rounds end every millisecond; a million looks take far longer.
        let seen = k.spin_for_round(1_000_000);
        done.store(true, Ordering::Relaxed);
        ender.join().unwrap();
        assert!(seen, "the round that ended was not seen");
    }
}
