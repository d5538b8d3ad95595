use super::*;
use crate::sync::bitwait::{
    clear_and_wake, lock, set_lock_unfairness, unlock, wait_clear, UNFAIRNESS_TEST_LOCK,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize as TestUsize, Ordering as O};
use std::sync::{Condvar, Mutex as StdMutex, MutexGuard};
use std::task::Wake as WakeTrait;
use std::time::{Duration, Instant};

const WRITEBACK: u64 = 1 << 4;

/// A waker that counts its wake-ups.
struct Counter(TestUsize);

impl WakeTrait for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, O::SeqCst);
    }
}

fn counting() -> (Arc<Counter>, Waker) {
    let c = Arc::new(Counter(TestUsize::new(0)));
    (c.clone(), Waker::from(c))
}

fn wakes(c: &Counter) -> usize {
    c.0.load(O::SeqCst)
}

fn poll<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(w))
}

/// Runs a future on this thread, parking between polls.
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unparker(std::thread::Thread);
    impl WakeTrait for Unparker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unparker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// How many futures are queued on `word` (no other thread may touch it meanwhile).
fn queued_on(word: &AtomicU64) -> usize {
    let key = WaitPolicy::Exact.key(word);
    shard(key)
        .lock()
        .entries
        .iter()
        .filter(|e| e.key == key)
        .count()
}

/// Serialises the tests that depend on the lock unfairness, and sets it.
fn unfairness(n: u32) -> MutexGuard<'static, ()> {
    let g = UNFAIRNESS_TEST_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    set_lock_unfairness(n);
    g
}

/// Spins until `cond`, failing the test after a generous bound (a lost wake-up).
fn until(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::yield_now();
    }
}

#[test]
fn uncontended_lock_async_completes_at_once_without_waiters() {
    let w = AtomicU64::new(1 << 10);
    let (c, waker) = counting();
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, &waker), Poll::Ready(()));
    drop(f);
    assert_eq!(w.load(Ordering::Relaxed), (1 << 10) | LOCKED);
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 1 << 10);
    let mut f = wait_clear_async(&w, WRITEBACK);
    assert_eq!(poll(&mut f, &waker), Poll::Ready(()));
    assert_eq!(w.load(Ordering::Relaxed), 1 << 10, "no WAITERS, no lock");
    assert_eq!(wakes(&c), 0);
    // A future never polled leaves nothing either.
    drop(lock_async(&w));
    assert_eq!(w.load(Ordering::Relaxed), 1 << 10);
}

#[test]
fn unlock_wakes_an_async_locker_which_then_owns_the_lock() {
    let _g = unfairness(5);
    let w = AtomicU64::new(LOCKED);
    let (c, waker) = counting();
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    assert_eq!(w.load(Ordering::Relaxed), LOCKED | WAITERS);
    assert_eq!(queued_on(&w), 1);
    // Polling again while queued neither wakes nor queues twice.
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    assert_eq!(queued_on(&w), 1);
    assert_eq!(wakes(&c), 0);
    unlock(&w);
    assert_eq!(wakes(&c), 1, "the unlock woke the future");
    assert_eq!(queued_on(&w), 0);
    assert_eq!(
        w.load(Ordering::Relaxed),
        0,
        "WAITERS cleared: nobody is left"
    );
    assert_eq!(poll(&mut f, &waker), Poll::Ready(()));
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
    drop(f);
    assert_eq!(
        w.load(Ordering::Relaxed),
        LOCKED,
        "a completed future owns the lock"
    );
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn block_on_an_async_lock_held_by_a_thread() {
    let w = Arc::new(AtomicU64::new(0));
    let data = Arc::new(TestUsize::new(0));
    lock(&w);
    let holder = {
        let (w, data) = (w.clone(), data.clone());
        std::thread::spawn(move || {
            until("the future queued", || {
                w.load(Ordering::Relaxed) & WAITERS != 0
            });
            data.store(1, O::Relaxed);
            unlock(&w);
        })
    };
    block_on(lock_async(&w));
    // The holder's write happened before its unlock, which our lock acquired.
    assert_eq!(data.load(O::Relaxed), 1);
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
    unlock(&w);
    holder.join().unwrap();
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn clear_and_wake_wakes_every_shared_waiter_of_its_bit_only() {
    let _g = unfairness(5);
    let w = Arc::new(AtomicU64::new(WRITEBACK | LOCKED));
    let shared: Vec<_> = (0..3).map(|_| counting()).collect();
    let mut futs: Vec<_> = shared
        .iter()
        .map(|(_, waker)| {
            let mut f = wait_clear_async(&w, WRITEBACK);
            assert_eq!(poll(&mut f, waker), Poll::Pending);
            f
        })
        .collect();
    // A locker (another bit) and a sleeping thread waiting for write-back too.
    let (lc, lwaker) = counting();
    let mut locker = lock_async(&w);
    assert_eq!(poll(&mut locker, &lwaker), Poll::Pending);
    let thread = {
        let w = w.clone();
        std::thread::spawn(move || wait_clear(&w, WRITEBACK))
    };
    assert_eq!(queued_on(&w), 4);
    std::thread::sleep(Duration::from_millis(20));
    clear_and_wake(&w, WRITEBACK);
    thread.join().unwrap();
    for ((c, waker), f) in shared.iter().zip(futs.iter_mut()) {
        assert_eq!(wakes(c), 1);
        assert_eq!(poll(f, waker), Poll::Ready(()));
    }
    assert_eq!(wakes(&lc), 0, "a waiter of another bit is not woken");
    assert_eq!(queued_on(&w), 1);
    assert_eq!(
        w.load(Ordering::Relaxed),
        LOCKED | WAITERS,
        "the locker still waits"
    );
    unlock(&w);
    assert_eq!(wakes(&lc), 1);
    assert_eq!(poll(&mut locker, &lwaker), Poll::Ready(()));
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
    unlock(&w);
}

#[test]
fn one_unlock_wakes_one_locker_across_threads_and_futures() {
    let _g = unfairness(5);
    // A sleeping thread queued first, then a future: the unlock wakes the thread only.
    let w = Arc::new(AtomicU64::new(LOCKED));
    let got = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let thread = {
        let (w, got, release) = (w.clone(), got.clone(), release.clone());
        std::thread::spawn(move || {
            lock(&w);
            got.store(true, O::SeqCst);
            until("released", || release.load(O::SeqCst));
            unlock(&w);
        })
    };
    // WAITERS is set under the queue lock just before the thread is queued (with its
    // ticket): the future queues after it.
    until("the thread sleeps", || {
        w.load(Ordering::Relaxed) & WAITERS != 0
    });
    let (c, waker) = counting();
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    unlock(&w);
    assert_eq!(wakes(&c), 0, "the older thread took the one wake-up");
    until("the thread owns the lock", || got.load(O::SeqCst));
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    assert_eq!(queued_on(&w), 1);
    release.store(true, O::SeqCst);
    thread.join().unwrap();
    assert_eq!(wakes(&c), 1, "the thread's unlock woke the future");
    assert_eq!(poll(&mut f, &waker), Poll::Ready(()));
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
    unlock(&w);

    // Two futures: one unlock wakes the older one only.
    let w = AtomicU64::new(LOCKED);
    let (c1, w1) = counting();
    let (c2, w2) = counting();
    let mut f1 = lock_async(&w);
    let mut f2 = lock_async(&w);
    assert_eq!(poll(&mut f1, &w1), Poll::Pending);
    assert_eq!(poll(&mut f2, &w2), Poll::Pending);
    unlock(&w);
    assert_eq!((wakes(&c1), wakes(&c2)), (1, 0));
    assert_eq!(w.load(Ordering::Relaxed), WAITERS, "f2 still waits");
    assert_eq!(poll(&mut f1, &w1), Poll::Ready(()));
    assert_eq!(poll(&mut f2, &w2), Poll::Pending);
    unlock(&w);
    assert_eq!((wakes(&c1), wakes(&c2)), (1, 1));
    assert_eq!(poll(&mut f2, &w2), Poll::Ready(()));
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
    unlock(&w);
}

#[test]
fn an_older_future_goes_before_a_sleeping_thread() {
    let _g = unfairness(5);
    let w = Arc::new(AtomicU64::new(LOCKED));
    let (c, waker) = counting();
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    let got = Arc::new(AtomicBool::new(false));
    let thread = {
        let (w, got) = (w.clone(), got.clone());
        std::thread::spawn(move || {
            lock(&w);
            got.store(true, O::SeqCst);
            unlock(&w);
        })
    };
    // Let the thread go to sleep; the assertions below hold even if it has not yet.
    std::thread::sleep(Duration::from_millis(30));
    unlock(&w);
    assert_eq!(wakes(&c), 1, "the future is older than the thread");
    if poll(&mut f, &waker) == Poll::Ready(()) {
        // While the future owns the lock the thread cannot have it.
        assert!(!got.load(O::SeqCst));
        unlock(&w);
    }
    thread.join().unwrap();
    assert!(got.load(O::SeqCst));
    drop(f);
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn dropping_queued_futures_leaves_no_trace() {
    let w = AtomicU64::new(LOCKED);
    let waker = Waker::noop();
    let mut f1 = lock_async(&w);
    let mut f2 = wait_clear_async(&w, LOCKED);
    assert_eq!(poll(&mut f1, waker), Poll::Pending);
    assert_eq!(poll(&mut f2, waker), Poll::Pending);
    assert_eq!(queued_on(&w), 2);
    drop(f1);
    assert_eq!(queued_on(&w), 1);
    assert_eq!(
        w.load(Ordering::Relaxed),
        LOCKED | WAITERS,
        "another waiter is left"
    );
    drop(f2);
    assert_eq!(queued_on(&w), 0);
    assert_eq!(
        w.load(Ordering::Relaxed),
        LOCKED,
        "the last one cleared WAITERS"
    );
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 0);

    // A sleeping thread keeps WAITERS set when the last future leaves.
    let w = Arc::new(AtomicU64::new(LOCKED | WRITEBACK));
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, waker), Poll::Pending);
    let thread = {
        let w = w.clone();
        std::thread::spawn(move || wait_clear(&w, WRITEBACK))
    };
    std::thread::sleep(Duration::from_millis(20));
    drop(f);
    assert_eq!(queued_on(&w), 0);
    if !thread.is_finished() {
        assert_ne!(
            w.load(Ordering::Relaxed) & WAITERS,
            0,
            "the thread still sleeps"
        );
    }
    clear_and_wake(&w, WRITEBACK);
    thread.join().unwrap();
    assert_eq!(w.load(Ordering::Relaxed), LOCKED);
}

#[test]
fn a_new_waker_replaces_the_old_one() {
    let w = AtomicU64::new(WRITEBACK);
    let (c1, w1) = counting();
    let (c2, w2) = counting();
    let mut f = wait_clear_async(&w, WRITEBACK);
    assert_eq!(poll(&mut f, &w1), Poll::Pending);
    assert_eq!(poll(&mut f, &w2), Poll::Pending);
    clear_and_wake(&w, WRITEBACK);
    assert_eq!((wakes(&c1), wakes(&c2)), (0, 1));
    assert_eq!(poll(&mut f, &w2), Poll::Ready(()));
}

#[test]
fn unlock_hands_the_lock_to_a_future_that_asked_for_it() {
    let _g = unfairness(0);
    let before = crate::stats::read(Event::LockHandoffs);
    let w = AtomicU64::new(LOCKED);
    let (c, waker) = counting();
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    unlock(&w);
    assert_eq!(wakes(&c), 1);
    assert_eq!(
        w.load(Ordering::Relaxed),
        LOCKED,
        "taken for the future, WAITERS cleared"
    );
    assert!(!try_lock(&w), "nobody can steal a handed-off lock");
    assert_eq!(poll(&mut f, &waker), Poll::Ready(()));
    assert!(crate::stats::read(Event::LockHandoffs) > before);
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 0);

    // Handed off, then dropped before it looked: the drop unlocks and hands it on.
    let w = AtomicU64::new(LOCKED);
    let (c1, w1) = counting();
    let (c2, w2) = counting();
    let mut f1 = lock_async(&w);
    let mut f2 = lock_async(&w);
    assert_eq!(poll(&mut f1, &w1), Poll::Pending);
    assert_eq!(poll(&mut f2, &w2), Poll::Pending);
    unlock(&w);
    assert_eq!((wakes(&c1), wakes(&c2)), (1, 0));
    drop(f1);
    assert_eq!((wakes(&c1), wakes(&c2)), (1, 1));
    assert_eq!(w.load(Ordering::Relaxed), LOCKED, "handed on to f2");
    assert_eq!(poll(&mut f2, &w2), Poll::Ready(()));
    unlock(&w);
    let mut f3 = lock_async(&w);
    assert_eq!(poll(&mut f3, &w1), Poll::Ready(()));
    drop(f3);
    unlock(&w);
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn a_dropped_woken_locker_passes_its_wake_up_on() {
    let _g = unfairness(5);
    let w = Arc::new(AtomicU64::new(LOCKED));
    let (c, waker) = counting();
    let mut f = lock_async(&w);
    assert_eq!(poll(&mut f, &waker), Poll::Pending);
    let thread = {
        let w = w.clone();
        std::thread::spawn(move || {
            lock(&w);
            unlock(&w);
        })
    };
    std::thread::sleep(Duration::from_millis(30));
    unlock(&w);
    assert_eq!(wakes(&c), 1);
    // The thread (if it sleeps) was not woken by that unlock; dropping the woken future
    // must wake it, or it sleeps for ever.
    drop(f);
    thread.join().unwrap();
    assert_eq!(w.load(Ordering::Relaxed), 0);
}

#[test]
fn async_lockers_under_each_policy() {
    for policy in [
        WaitPolicy::Exact,
        WaitPolicy::AlwaysLookup,
        WaitPolicy::UnfilteredWakeAll,
    ] {
        let w = AtomicU64::new(LOCKED);
        let (c, waker) = counting();
        let mut f = policy.lock_async(&w);
        let mut g = policy.wait_clear_async(&w, LOCKED);
        assert_eq!(poll(&mut f, &waker), Poll::Pending);
        assert_eq!(poll(&mut g, &waker), Poll::Pending);
        policy.unlock(&w);
        assert_eq!(wakes(&c), 2, "{policy:?}");
        if poll(&mut f, &waker) == Poll::Ready(()) {
            policy.unlock(&w);
        } else {
            assert_eq!(policy, WaitPolicy::UnfilteredWakeAll);
            drop(f);
            assert_eq!(w.load(Ordering::Relaxed) & LOCKED, 0);
        }
        // g saw the lock free, or re-queued behind the locker that took it.
        if poll(&mut g, &waker) == Poll::Pending {
            drop(g);
        }
        assert_eq!(w.load(Ordering::Relaxed) & !WAITERS, 0, "{policy:?}");
    }
}

// ---- stress: threads and futures on one word ----

struct Shared {
    word: AtomicU64,
    /// Set while somebody holds the lock: a second holder is a broken exclusion.
    held: AtomicBool,
    value: std::cell::UnsafeCell<u64>,
}

// SAFETY: `value` is only touched while holding the bit lock.
unsafe impl Sync for Shared {}

impl Shared {
    fn critical(&self) {
        assert!(!self.held.swap(true, O::Relaxed), "two lock holders");
        // SAFETY: we hold the bit lock.
        unsafe { *self.value.get() += 1 };
        self.held.store(false, O::Relaxed);
    }
}

/// A future that is pending once (waking itself), then ready.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Gives the inner future `polls` polls: `Some(output)` if it completed, else `None` — and
/// it is dropped at the next turn *without* another poll, so that a wake-up (or a hand-off)
/// that came meanwhile is left for its drop to deal with.
struct GiveUpAfter<F> {
    inner: Option<F>,
    polls: u32,
}

impl<F: Future + Unpin> Future for GiveUpAfter<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            self.inner = None;
            return Poll::Ready(None);
        }
        self.polls -= 1;
        let f = self.inner.as_mut().expect("polled after completion");
        match Pin::new(f).poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => {
                // Come back at the next turn even if nobody wakes us.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// A tiny multi-threaded executor: tasks on one run queue, polled by `threads` threads.
struct Task {
    fut: StdMutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>,
    scheduled: AtomicBool,
    exec: Arc<Exec>,
}

struct Exec {
    queue: StdMutex<VecDeque<Arc<Task>>>,
    ready: Condvar,
    live: TestUsize,
}

impl WakeTrait for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.scheduled.swap(true, O::AcqRel) {
            self.exec.queue.lock().unwrap().push_back(self.clone());
            self.exec.ready.notify_one();
        }
    }
}

fn run(tasks: Vec<Pin<Box<dyn Future<Output = ()> + Send>>>, threads: usize) {
    let exec = Arc::new(Exec {
        queue: StdMutex::new(VecDeque::new()),
        ready: Condvar::new(),
        live: TestUsize::new(tasks.len()),
    });
    for f in tasks {
        Arc::new(Task {
            fut: StdMutex::new(Some(f)),
            scheduled: AtomicBool::new(false),
            exec: exec.clone(),
        })
        .wake_by_ref();
    }
    std::thread::scope(|s| {
        for _ in 0..threads {
            let exec = &exec;
            s.spawn(move || loop {
                let task = {
                    let mut q = exec.queue.lock().unwrap();
                    loop {
                        if exec.live.load(O::Acquire) == 0 {
                            return;
                        }
                        if let Some(t) = q.pop_front() {
                            break t;
                        }
                        q = exec
                            .ready
                            .wait_timeout(q, Duration::from_millis(10))
                            .unwrap()
                            .0;
                    }
                };
                task.scheduled.store(false, O::Release);
                let waker = Waker::from(task.clone());
                let mut slot = task.fut.lock().unwrap();
                if let Some(f) = slot.as_mut() {
                    if f.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                        *slot = None;
                        if exec.live.fetch_sub(1, O::AcqRel) == 1 {
                            exec.ready.notify_all();
                        }
                    }
                }
            });
        }
    });
}

fn stress(unfair: u32) {
    let _g = unfairness(unfair);
    const THREADS: usize = 3;
    const THREAD_ITERS: usize = 2000;
    const FUTURES: usize = 12;
    const FUTURE_ITERS: usize = 400;
    let s = Arc::new(Shared {
        word: AtomicU64::new(0),
        held: AtomicBool::new(false),
        value: std::cell::UnsafeCell::new(0),
    });
    let completed = Arc::new(TestUsize::new(0));
    let before = crate::stats::Snapshot::take();
    let (tx, rx) = std::sync::mpsc::channel();
    let driver = {
        let (s, completed) = (s.clone(), completed.clone());
        std::thread::spawn(move || {
            let mut tasks: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = Vec::new();
            for i in 0..FUTURES {
                let (s, completed) = (s.clone(), completed.clone());
                tasks.push(Box::pin(async move {
                    for j in 0..FUTURE_ITERS {
                        if (i + j) % 4 == 0 {
                            // Give up on the lock after a poll or two (a dropped waiter,
                            // maybe woken or handed the lock meanwhile), else use it.
                            let polls = 1 + (j % 2) as u32;
                            let attempt = GiveUpAfter {
                                inner: Some(lock_async(&s.word)),
                                polls,
                            };
                            if attempt.await.is_some() {
                                s.critical();
                                unlock(&s.word);
                            }
                            continue;
                        }
                        if j % 5 == 0 {
                            wait_clear_async(&s.word, LOCKED).await;
                        }
                        lock_async(&s.word).await;
                        s.critical();
                        if j % 3 == 0 {
                            // Hold the lock across a suspension.
                            YieldNow(false).await;
                        }
                        s.critical();
                        unlock(&s.word);
                    }
                    completed.fetch_add(1, O::SeqCst);
                }));
            }
            std::thread::scope(|sc| {
                for _ in 0..THREADS {
                    let (s, completed) = (&s, &completed);
                    sc.spawn(move || {
                        for j in 0..THREAD_ITERS {
                            if j % 5 == 0 {
                                wait_clear(&s.word, LOCKED);
                            }
                            lock(&s.word);
                            s.critical();
                            unlock(&s.word);
                        }
                        completed.fetch_add(1, O::SeqCst);
                    });
                }
                run(tasks, 3);
            });
            tx.send(()).unwrap();
        })
    };
    // The watchdog: a lost wake-up leaves somebody waiting for ever.
    if rx.recv_timeout(Duration::from_secs(120)).is_err() {
        panic!(
            "stress did not finish: {} of {} finished, word {:#x}",
            completed.load(O::SeqCst),
            THREADS + FUTURES,
            s.word.load(Ordering::Relaxed)
        );
    }
    driver.join().unwrap();
    // What the run exercised (global counters: other tests add to them too).
    let d = crate::stats::Snapshot::take().since(&before).vmstat();
    eprintln!(
        "async waits {} sleeps {} wake-ups {} hand-offs {} spurious {}",
        d.async_waits, d.sleeps, d.wakeups, d.lock_handoffs, d.spurious_wakeups
    );
    assert!(d.async_waits > 0, "the futures never waited");
    assert_eq!(completed.load(O::SeqCst), THREADS + FUTURES);
    // SAFETY: everybody has finished.
    let value = unsafe { *s.value.get() };
    assert!(value >= (THREADS * THREAD_ITERS) as u64);
    assert_eq!(s.word.load(Ordering::Relaxed), 0, "no lock or WAITERS left");
    assert_eq!(queued_on(&s.word), 0);
}

#[test]
fn futures_are_send_sync_and_unpin() {
    fn check<T: Send + Sync + Unpin>() {}
    check::<LockFuture<'static>>();
    check::<WaitClearFuture<'static>>();
}

#[test]
fn stress_threads_and_futures_on_one_lock() {
    stress(5);
}

#[test]
fn stress_threads_and_futures_with_hand_off() {
    stress(0);
}
