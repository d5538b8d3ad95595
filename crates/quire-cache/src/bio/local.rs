//! The waiting thread's own ring: reads that a thread's futures await, submitted to an io_uring
//! of that thread and reaped by it when it has nothing else to do — what the runtimes built on
//! io_uring do (they park in `io_uring_enter`), offered to any single-thread executor.
//!
//! Why. The cache's engine (`bio/uring.rs`) has one reaper thread: a read's completion wakes
//! the reaper (io_uring runs it as task work on the submitting task), the reaper runs `end_io`,
//! which unlocks the folio and wakes the future's executor — two wake-ups of a sleeping thread
//! per miss, tens of microseconds each on a virtual machine, during which the executor's other
//! futures wait too. A [`ThreadRing`] removes one of them and the thread switch: the executor
//! submits the reads its futures await to its own ring and, when every future waits, sleeps in
//! that ring; a completion wakes it directly, it runs `end_io` itself, and the futures it wakes
//! are polled on the same thread. (The kernel's io_uring buffered read is one wake-up too: the
//! block layer's completion queues task work to the task that waits.)
//!
//! # Use
//!
//! ```no_run
//! # use quire::bio::ThreadRing;
//! # fn poll_my_futures() {}
//! let ring = ThreadRing::current().expect("io_uring refused");
//! let unparker = ring.unparker(); // for the wakers: Send + Sync, wakes `park`
//! loop {
//!     ring.enter(|| poll_my_futures()); // awaited misses go to this thread's ring
//!     ring.park(); // until a completion here woke a future, or `unparker.unpark()`
//! }
//! ```
//!
//! [`crate::filemap::block_on`] works this way where the thread can have a ring.
//!
//! # Rules
//!
//! | rule | why |
//! |---|---|
//! | only the folio a future awaits (the caller's own read, see `Engine::submit_awaited`) goes to the thread's ring, only while a poll runs inside [`ThreadRing::enter`], only on the io_uring engine, only for stores with a file descriptor; readahead and write-back stay on the cache's engine | a request here ends only when this thread reaps: nothing that nobody awaits here may wait on it |
//! | the ring is `SINGLE_ISSUER \| DEFER_TASKRUN` (`COOP_TASKRUN` on kernels without it): completions run only when the thread asks | nothing interrupts the thread while it polls |
//! | [`ThreadRing::reap`] (each pass of an executor) and [`ThreadRing::park`] submit what is queued and run what completed | a request waits at most one pass for its submission and its end |
//! | a thread about to sleep in a folio's wait queue (a blocking read inside a future, say), or to block on a mapping's invalidate lock (which a truncation holds while it waits for folios), first waits for its ring's requests | it may be waiting for one of them (truncation holds the invalidate lock while it waits for folios; other locks held across a folio wait have not been audited for this) |
//! | dropping a [`ThreadRing`] handle waits for its thread's requests (`block_on` returns with none in flight) | every `end_io` runs, no frame stays lent to the kernel |
//! | another thread waiting on a folio read here waits until this thread reaps | the price: an executor that polls for long between reaps delays them |
//!
//! Wake-ups from other threads ring a `sync::doorbell::Doorbell` (the reaper's
//! mechanism, model-checked by `tests/loom_doorbell.rs`): the ring keeps an
//! `IORING_OP_FUTEX_WAIT` on its word in flight while the thread sleeps, and
//! [`Unparker::unpark`] rings it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Waker;

use io_uring::IoUring;

use super::uring::{entry, futex_wait_entry, outcome, probe, try_push, DOORBELL};
use super::{Bio, Counters, InFlight, Next};
use crate::sync::doorbell::Doorbell;

/// Submission queue entries of a thread's ring; the completion queue is twice as large.
const ENTRIES: u32 = 64;

/// `io_uring_enter`'s flag to wait for (and, on a `DEFER_TASKRUN` ring, run) completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

/// Wakes a thread parked in [`ThreadRing::park`], from any thread.
#[derive(Clone)]
pub struct Unparker(Arc<Doorbell>);

impl Unparker {
    /// Makes the thread's next (or current) [`ThreadRing::park`] return.
    pub fn unpark(&self) {
        self.0.ring();
    }
}

impl std::fmt::Debug for Unparker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unparker").finish_non_exhaustive()
    }
}

/// A request on a thread's ring, with the counters of the engine it was counted in.
struct Req {
    inf: InFlight,
    counters: Arc<Counters>,
}

/// A thread's ring and what it has in flight.
struct Local {
    ring: IoUring,
    bell: Arc<Doorbell>,
    /// Requests in flight (submitted or queued), at most `depth`.
    in_flight: Cell<usize>,
    depth: usize,
    /// Whether the doorbell's wait is in flight.
    armed: Cell<bool>,
    /// Completions taken from the ring and not yet run: taken one at a time, so that a reap
    /// nested in an `end_io` (its thread about to sleep, see `drain_current_thread`) runs the
    /// rest instead of waiting for completions that already came.
    pending: RefCell<VecDeque<(u64, i32)>>,
}

thread_local! {
    /// The ring of the [`ThreadRing::enter`] running on this thread, if any.
    static CURRENT: Cell<*const Local> = const { Cell::new(std::ptr::null()) };
    /// This thread's ring, kept between uses; `Err` once the kernel refused one.
    static RING: RefCell<Option<Result<Rc<Local>, ()>>> = const { RefCell::new(None) };
}

/// A handle on this thread's own ring; see the [module documentation](self). Not `Send`: the
/// ring is the thread's.
pub struct ThreadRing {
    local: Rc<Local>,
}

impl ThreadRing {
    /// This thread's ring, made on first use; `None` where the kernel refuses it (io_uring
    /// disabled or filtered, or older than 6.7, which lacks the futex wait the doorbell needs).
    pub fn current() -> Option<ThreadRing> {
        RING.with(|r| {
            let mut r = r.borrow_mut();
            if r.is_none() {
                *r = Some(Local::new().map(Rc::new).map_err(drop));
                install_hook();
            }
            match r.as_ref() {
                Some(Ok(local)) => Some(ThreadRing {
                    local: local.clone(),
                }),
                _ => None,
            }
        })
    }

    /// Runs `f` (an executor's poll of its futures) with this ring as the thread's: the reads
    /// those futures await are submitted here.
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const Local);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(Rc::as_ptr(&self.local))));
        f()
    }

    /// What wakes [`park`](Self::park) from another thread (or from a waker on this one).
    pub fn unparker(&self) -> Unparker {
        Unparker(self.local.bell.clone())
    }

    /// A waker that unparks this thread.
    pub fn waker(&self) -> Waker {
        Waker::from(self.local.bell.clone())
    }

    /// Submits what is queued and runs the completions that have arrived, without waiting;
    /// returns how many requests ended. An executor calls it between its passes.
    pub fn reap(&self) -> usize {
        self.local.reap(false)
    }

    /// Sleeps until an [`Unparker::unpark`] (or a waker of [`waker`](Self::waker)) since the
    /// last `park` returned, submitting what is queued and running completions meanwhile: a
    /// completion that wakes one of this thread's futures ends the sleep.
    pub fn park(&self) {
        self.local.park();
    }

    /// Requests of this thread's ring in flight.
    pub fn in_flight(&self) -> usize {
        self.local.in_flight.get()
    }
}

impl Drop for ThreadRing {
    fn drop(&mut self) {
        // Every request ends before its handles are gone (see the module documentation).
        self.local.drain();
    }
}

impl std::fmt::Debug for ThreadRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadRing")
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Local {
    fn new() -> std::io::Result<Local> {
        if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
            if s.trim() == "2" {
                return Err(std::io::Error::other("kernel.io_uring_disabled is 2"));
            }
        }
        let ring = match IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(ENTRIES)
        {
            Ok(r) => r,
            Err(_) => IoUring::builder()
                .setup_coop_taskrun()
                .setup_taskrun_flag()
                .build(ENTRIES)?,
        };
        if !probe(&ring)? {
            return Err(std::io::Error::other("no IORING_OP_FUTEX_WAIT"));
        }
        // One completion slot is the doorbell's.
        let depth = ring.params().cq_entries() as usize - 1;
        Ok(Local {
            ring,
            bell: Arc::new(Doorbell::new()),
            in_flight: Cell::new(0),
            depth,
            armed: Cell::new(false),
            pending: RefCell::new(VecDeque::new()),
        })
    }

    /// Queues `req`'s next transfer, submitting first if the submission queue is full.
    fn push(&self, mut req: Box<Req>) {
        let e = entry(&mut req.inf, None).user_data(Box::into_raw(req) as u64);
        self.push_entry(&e);
    }

    fn push_entry(&self, e: &io_uring::squeue::Entry) {
        loop {
            // SAFETY: only this thread uses the ring (a `Local` is reached only through the
            // thread's `Rc`s and its thread-locals); the entry's buffer is frame memory its
            // request keeps until it completes, and the doorbell's word lives in `bell` until
            // its wait has completed (`Drop`).
            if unsafe { try_push(&self.ring, e) } {
                return;
            }
            self.enter(0);
        }
    }

    /// Submits what is queued and, with `wait`, waits for a completion; runs deferred
    /// completions (`GETEVENTS`) when there is something in flight.
    fn enter(&self, wait: u32) {
        let flags = if wait > 0 || self.in_flight.get() > 0 || self.armed.get() {
            IORING_ENTER_GETEVENTS
        } else {
            0
        };
        // Entries pushed and not yet submitted.
        let n = self.sq_len() as u32;
        // SAFETY: plain arguments, no extended argument.
        let r = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(n, wait, flags, None)
        };
        match r {
            Ok(_) => {}
            // Interrupted, or short of memory or of completion room (what was not taken stays
            // queued): the caller reaps what completed and comes back.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                ) =>
            {
                if e.raw_os_error() != Some(libc::EINTR) {
                    std::thread::yield_now();
                }
            }
            Err(e) => panic!("io_uring_enter failed on a thread's ring: {e}"),
        }
    }

    fn sq_len(&self) -> usize {
        // SAFETY: only this thread uses the ring.
        unsafe { self.ring.submission_shared().len() }
    }

    /// Submits a read `bio` that this thread awaits, counted in `counters`; gives it back where
    /// the ring is full.
    fn submit(&self, bio: Bio, counters: &Arc<Counters>) -> Option<Bio> {
        if self.in_flight.get() >= self.depth {
            return Some(bio);
        }
        self.in_flight.set(self.in_flight.get() + 1);
        counters.started(1);
        counters.local.fetch_add(1, Ordering::Relaxed);
        self.push(Box::new(Req {
            inf: InFlight::new(bio),
            counters: counters.clone(),
        }));
        // Submitted now, not at the next reap: a pass of an executor polls many futures, and
        // reads held back for the whole pass go out together and come back together (measured:
        // the device then idles while the thread works, and the other way round).
        self.enter(0);
        None
    }

    /// Submits, then runs the completions that arrived (with `wait`, after waiting for one);
    /// returns how many requests ended.
    fn reap(&self, wait: bool) -> usize {
        let taskrun = {
            // SAFETY: only this thread uses the ring.
            unsafe { self.ring.submission_shared().taskrun() }
        };
        // Completions already taken count as what a wait would bring.
        let wait = wait && self.pending.borrow().is_empty();
        if wait || self.sq_len() > 0 || taskrun {
            self.enter(u32::from(wait));
        }
        {
            // SAFETY: only this thread uses the completion queue.
            let mut cq = unsafe { self.ring.completion_shared() };
            cq.sync();
            self.pending
                .borrow_mut()
                .extend((&mut cq).map(|c| (c.user_data(), c.result())));
        }
        let mut ended = 0;
        loop {
            let next = self.pending.borrow_mut().pop_front();
            let Some((user_data, res)) = next else {
                break;
            };
            if user_data == DOORBELL {
                self.armed.set(false);
                continue;
            }
            // SAFETY: every other `user_data` is a request boxed by `push`, completed once.
            let mut req = unsafe { Box::from_raw(user_data as *mut Req) };
            match outcome(&mut req.inf, res) {
                Next::Again => {
                    req.counters.resubmitted.fetch_add(1, Ordering::Relaxed);
                    self.push(req);
                }
                Next::Done(r) => {
                    ended += 1;
                    self.in_flight.set(self.in_flight.get() - 1);
                    let Req { inf, counters } = *req;
                    counters.ended(r.is_err());
                    // An `end_io` that panics loses its request (its `BioEnd`, dropped unrun,
                    // releases what it held), not the thread's other requests.
                    let _ =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inf.finish(r)));
                }
            }
        }
        ended
    }

    fn park(&self) {
        let bell = &*self.bell;
        loop {
            self.reap(false);
            if bell.take() {
                return;
            }
            let Some(val) = bell.prepare_sleep() else {
                continue;
            };
            if !self.armed.get() {
                let e = futex_wait_entry(bell.word(), val).user_data(DOORBELL);
                self.push_entry(&e);
                self.armed.set(true);
            }
            self.enter(1);
            bell.woke();
        }
    }

    /// Waits until every request of the ring has ended.
    fn drain(&self) {
        while self.in_flight.get() > 0 {
            self.reap(true);
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.drain();
        // The doorbell's wait refers to `bell`, which this frees: end it first.
        if self.armed.get() {
            self.bell.ring_always();
            self.bell.take();
            while self.armed.get() {
                self.reap(true);
            }
        }
    }
}

/// Submits `bio`, a read the calling thread awaits, to the thread's ring if a
/// [`ThreadRing::enter`] runs on it; gives it back otherwise (or where the ring is full).
pub(super) fn submit_awaited(bio: Bio, counters: &Arc<Counters>) -> Option<Bio> {
    let cur = CURRENT.with(|c| c.get());
    if cur.is_null() {
        return Some(bio);
    }
    // SAFETY: `CURRENT` is set only inside `ThreadRing::enter`, whose handle keeps the `Local`
    // alive until it restores the previous value; the `Local` is this thread's.
    let local = unsafe { &*cur };
    local.submit(bio, counters)
}

/// Before this thread sleeps in a folio's wait queue or blocks on a lock that a thread waiting
/// for a folio may hold: if its ring has requests in flight, waits for them (the wait may be for
/// one of them). Called by `sync::bitwait` through its hook and by `Mapping::invalidate_shared`.
pub(crate) fn drain_current_thread() {
    let local = RING
        .try_with(|r| match r.try_borrow() {
            Ok(r) => match r.as_ref() {
                Some(Ok(l)) if l.in_flight.get() > 0 => Some(l.clone()),
                _ => None,
            },
            Err(_) => None,
        })
        .ok()
        .flatten();
    if let Some(l) = local {
        l.drain();
    }
}

/// Installs [`before_sleep`] as the wait queues' hook (once per process).
fn install_hook() {
    crate::sync::bitwait::set_before_sleep(drain_current_thread);
}
