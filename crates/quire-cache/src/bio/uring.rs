//! The io_uring engine: one ring per cache and one thread, the reaper, that enters it.
//!
//! Submitters do not call `io_uring_enter`: they queue their batch for the reaper and ring a
//! doorbell, a futex word on which the reaper keeps an `IORING_OP_FUTEX_WAIT` in flight, so a
//! reaper asleep in `io_uring_enter(GETEVENTS)` wakes for new work as it does for completions.
//! The reaper then pushes the queued requests and submits them in its next enter. Why: io_uring
//! completes a read or write through task work on the task that *submitted* it; were that the
//! caller's thread (an executor that parks while its futures wait), every completion would
//! first interrupt it, then wake the reaper, then wake it again. With the reaper as the only
//! submitter, a completion wakes the reaper once, and it wakes the waiting task once. Requests
//! that arrive while the reaper is awake ride its next enter together (no doorbell).
//!
//! Where the kernel has no `IORING_OP_FUTEX_WAIT` (before 6.7), submitters enter the ring
//! themselves (under `sq`) and the reaper only waits.
//!
//! | piece | who touches it | how |
//! |---|---|---|
//! | `queue` | submitters push; the reaper drains | a mutex; the reaper moves its requests to the submission queue |
//! | `bell` | submitters ring it after they queue; the reaper takes its rings before it drains `queue`, and keeps a `FUTEX_WAIT` request on its word | a [`Doorbell`](crate::sync::doorbell): the reaper reads the word before it marks itself asleep and re-checks for rings, and arms the wait with that value, so no wake-up is lost (`tests/loom_doorbell.rs`) |
//! | submission queue | the reaper (and, without the doorbell, submitters) | under `sq` |
//! | completion queue | the reaper only | it waits in `io_uring_enter(GETEVENTS)` for at least one completion, then takes them all |
//! | `room` | submitters wait on it; the reaper frees it | requests in flight, at most the completion queue's size, so completions never overflow the ring |
//! | `user_data` | — | the address of the request's boxed [`InFlight`], [`WAKE`] for the no-op that wakes the reaper to stop, [`DOORBELL`] for the futex wait |
//!
//! Frame memory is registered as fixed buffers (1 GiB each, the kernel's limit per buffer) when
//! the kernel allows it (`RLIMIT_MEMLOCK`, an old kernel): a request whose frames lie in one of
//! them is a `READ_FIXED`/`WRITE_FIXED`, which skips pinning the pages on every request.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use io_uring::{opcode, squeue, types, IoUring};

use super::{Bio, BioOp, Counters, InFlight, Next};
use crate::store::StoreError;
use crate::sync::doorbell::Doorbell;

/// Submission queue entries. The completion queue is twice as large (the kernel's default).
const ENTRIES: u32 = 256;

/// The kernel's largest fixed buffer.
const FIXED_CHUNK: usize = 1 << 30;

/// `user_data` of the no-op that wakes the reaper.
const WAKE: u64 = 0;

/// `user_data` of the reaper's wait on the doorbell.
pub(super) const DOORBELL: u64 = 1;

/// `futex2` flags of the doorbell: a 32-bit, process-private futex.
const FUTEX2_SIZE_U32: u32 = 0x02;
const FUTEX2_PRIVATE: u32 = 128;

/// The pool's frames as fixed buffers.
pub(super) struct Fixed {
    base: usize,
    len: usize,
}

impl Fixed {
    /// The fixed buffer holding `buf..buf + len`, if one does.
    fn index(&self, buf: *mut u8, len: usize) -> Option<u16> {
        let at = (buf as usize).checked_sub(self.base)?;
        if at + len > self.len || at / FIXED_CHUNK != (at + len - 1) / FIXED_CHUNK {
            return None;
        }
        u16::try_from(at / FIXED_CHUNK).ok()
    }
}

struct Shared {
    ring: IoUring,
    sq: Mutex<()>,
    /// Requests in flight.
    room: Mutex<usize>,
    freed: Condvar,
    /// The most requests in flight.
    depth: usize,
    fixed: Option<Fixed>,
    stop: AtomicBool,
    counters: Arc<Counters>,
    /// Whether submitters hand their requests to the reaper (the kernel has
    /// `IORING_OP_FUTEX_WAIT`); see the module documentation.
    via_reaper: bool,
    queue: Mutex<Vec<InFlight>>,
    bell: Doorbell,
}

pub(super) struct Uring {
    shared: Arc<Shared>,
}

impl Uring {
    /// Sets up a ring (with `frames` registered if the kernel allows) and starts its reaper.
    /// Returns the engine and a line on the fixed buffers.
    pub(super) fn start(
        frames: (*mut u8, usize),
        counters: Arc<Counters>,
    ) -> std::io::Result<(Uring, String)> {
        if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
            if s.trim() == "2" {
                return Err(std::io::Error::other("kernel.io_uring_disabled is 2"));
            }
        }
        // Where the reaper is the only submitter (the kernel has IORING_OP_FUTEX_WAIT), task
        // work (completions) need not interrupt anybody: it runs when the reaper next enters
        // the ring, which it does to wait (`COOP_TASKRUN`, 5.19). Where submitters enter the
        // ring themselves they must be interrupted, so that ring is a plain one.
        let (ring, via_reaper) = match IoUring::builder()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build(ENTRIES)
        {
            Ok(coop) if probe(&coop)? => (coop, true),
            _ => {
                let plain = IoUring::new(ENTRIES)?;
                let futex = probe(&plain)?;
                (plain, futex)
            }
        };
        let (base, len) = frames;
        let chunks: Vec<libc::iovec> = (0..len.div_ceil(FIXED_CHUNK))
            .map(|i| libc::iovec {
                iov_base: base.wrapping_add(i * FIXED_CHUNK).cast(),
                iov_len: FIXED_CHUNK.min(len - i * FIXED_CHUNK),
            })
            .collect();
        let (fixed, line) = if len == 0 || chunks.len() > u16::MAX as usize {
            (None, "frames not registered".to_string())
        } else {
            // SAFETY: the frames stay mapped for as long as the cache (and so this ring, which
            // the cache stops and which is dropped with its last user) exists: the pool is
            // unmapped only when the cache is dropped, after every request holding a folio
            // of it has ended.
            match unsafe { ring.submitter().register_buffers(&chunks) } {
                Ok(()) => (
                    Some(Fixed {
                        base: base as usize,
                        len,
                    }),
                    format!("frames registered as {} fixed buffer(s)", chunks.len()),
                ),
                Err(e) => (None, format!("frames not registered ({e})")),
            }
        };
        // One completion slot is the doorbell's.
        let depth = ring.params().cq_entries() as usize - 1;
        let mut shared = Shared {
            ring,
            sq: Mutex::new(()),
            room: Mutex::new(0),
            freed: Condvar::new(),
            depth,
            fixed,
            stop: AtomicBool::new(false),
            counters,
            via_reaper: false,
            queue: Mutex::new(Vec::new()),
            bell: Doorbell::new(),
        };
        shared.via_reaper = via_reaper;
        let line = format!(
            "{line}; {}",
            if shared.via_reaper {
                "the reaper submits (doorbell: IORING_OP_FUTEX_WAIT)"
            } else {
                "submitters enter the ring (no IORING_OP_FUTEX_WAIT)"
            }
        );
        let shared = Arc::new(shared);
        let s = shared.clone();
        std::thread::Builder::new()
            .name("quire-uring".into())
            .spawn(move || reaper(&s))?;
        Ok((Uring { shared }, line))
    }

    /// Submits `bios`, every one with a file descriptor, in as few `io_uring_enter` calls as
    /// the ring's depth allows.
    pub(super) fn submit(&self, bios: Vec<Bio>) {
        let sh = &*self.shared;
        let mut bios = bios.into_iter().peekable();
        while bios.peek().is_some() {
            let want = bios.len();
            let n = {
                let mut room = sh.room.lock().unwrap();
                while *room >= sh.depth {
                    room = sh.freed.wait(room).unwrap();
                }
                let n = want.min(sh.depth - *room);
                *room += n;
                n
            };
            sh.counters.started(n);
            if sh.via_reaper {
                sh.queue
                    .lock()
                    .unwrap()
                    .extend(bios.by_ref().take(n).map(InFlight::new));
                sh.bell.ring();
                continue;
            }
            let _sq = sh.sq.lock().unwrap();
            for bio in bios.by_ref().take(n) {
                sh.push(Box::new(InFlight::new(bio)));
            }
            sh.enter();
        }
    }

    /// Tells the reaper to stop.
    pub(super) fn stop(&self) {
        let sh = &*self.shared;
        sh.stop.store(true, Ordering::Release);
        if sh.via_reaper {
            sh.bell.ring_always();
            return;
        }
        let _sq = sh.sq.lock().unwrap();
        let nop = opcode::Nop::new().build().user_data(WAKE);
        sh.push_entry(&nop);
        sh.enter();
    }
}

/// Checks a fresh ring: a no-op must complete (seccomp filters may allow the setup and not
/// the rest; an error then); returns whether the kernel has `IORING_OP_FUTEX_WAIT` (a wait for
/// a value the word does not hold completes at once with `EAGAIN`).
pub(super) fn probe(ring: &IoUring) -> std::io::Result<bool> {
    let word = AtomicU32::new(0);
    let nop = opcode::Nop::new().build().user_data(u64::MAX);
    let wait = opcode::FutexWait::new(
        word.as_ptr(),
        1,
        u64::from(u32::MAX),
        FUTEX2_SIZE_U32 | FUTEX2_PRIVATE,
    )
    .build()
    .user_data(DOORBELL);
    // SAFETY: nobody else uses the ring yet; the no-op references no memory and the wait's
    // word outlives it (both complete before this returns: the wait at once, its value being
    // wrong).
    unsafe {
        let mut sq = ring.submission_shared();
        sq.push(&nop)
            .and_then(|()| sq.push(&wait))
            .map_err(|_| std::io::Error::other("a fresh ring's submission queue is full"))?;
    }
    ring.submit_and_wait(2)?;
    // SAFETY: as above.
    let mut cq = unsafe { ring.completion_shared() };
    cq.sync();
    let mut futex = false;
    for c in &mut cq {
        match c.user_data() {
            DOORBELL => futex = c.result() == -libc::EAGAIN,
            _ if c.result() < 0 => return Err(std::io::Error::from_raw_os_error(-c.result())),
            _ => {}
        }
    }
    Ok(futex)
}

impl Shared {
    /// Queues `inf` (the caller holds `sq`).
    fn push(&self, mut inf: Box<InFlight>) {
        let e = entry(&mut inf, self.fixed.as_ref());
        let e = e.user_data(Box::into_raw(inf) as u64);
        self.push_entry(&e);
    }

    /// Queues `e`, submitting what is queued first if the submission queue is full (the caller
    /// holds `sq`).
    fn push_entry(&self, e: &squeue::Entry) {
        loop {
            // SAFETY: `sq` is held, so no other thread uses the submission queue; the entry's
            // buffer is frame memory its request keeps until it completes (module docs).
            if unsafe { try_push(&self.ring, e) } {
                return;
            }
            self.enter();
        }
    }

    /// Submits what is queued (the caller holds `sq`).
    fn enter(&self) {
        loop {
            match self.ring.submit() {
                Ok(_) => {
                    self.counters
                        .batches
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EAGAIN/EBUSY: the kernel is short of memory or of completion room right now;
                // the entries stay queued and the next enter (ours or the reaper's) takes them.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) => {
                    std::thread::yield_now();
                    continue;
                }
                Err(e) => panic!("io_uring_enter failed submitting: {e}"),
            }
        }
    }

    /// What a completion of `res` means for `inf`.
    fn complete(&self, mut inf: Box<InFlight>, res: i32) {
        let next = outcome(&mut inf, res);
        match next {
            Next::Again => {
                self.counters
                    .resubmitted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // The reaper's next enter submits it.
                let _sq = self.sq.lock().unwrap();
                self.push(inf);
            }
            Next::Done(r) => {
                self.counters.ended(r.is_err());
                *self.room.lock().unwrap() -= 1;
                self.freed.notify_one();
                inf.finish(r);
            }
        }
    }
}

/// A wait on the futex `word` while it holds `val` (a doorbell's wait).
pub(super) fn futex_wait_entry(word: &AtomicU32, val: u32) -> squeue::Entry {
    opcode::FutexWait::new(
        word.as_ptr(),
        u64::from(val),
        u64::from(u32::MAX),
        FUTEX2_SIZE_U32 | FUTEX2_PRIVATE,
    )
    .build()
}

/// Pushes `e` on `ring`'s submission queue and publishes it; false where the queue is full.
///
/// # Safety
///
/// No other thread uses the ring's submission queue meanwhile, and the memory `e` refers to
/// stays valid until its completion is reaped.
pub(super) unsafe fn try_push(ring: &IoUring, e: &squeue::Entry) -> bool {
    // SAFETY: the caller's promise.
    unsafe {
        let mut sq = ring.submission_shared();
        let r = sq.push(e);
        sq.sync();
        r.is_ok()
    }
}

/// The entry for the rest of `inf`: a fixed-buffer read or write where its frames lie in one of
/// `fixed`'s buffers.
pub(super) fn entry(inf: &mut InFlight, fixed: Option<&Fixed>) -> squeue::Entry {
    let fd = types::Fd(
        inf.bio
            .end
            .store()
            .io_fd()
            .expect("only requests with a descriptor reach the ring")
            .as_raw_fd(),
    );
    if inf.vectored() {
        // Several folios in one request (a write-back's merge): `writev` of what is left,
        // the iovecs kept in the request until it completes.
        let offset = inf.rest_iov();
        let n = inf.iov.len() as u32;
        return match inf.bio.op {
            BioOp::Write => opcode::Writev::new(fd, inf.iov.as_ptr(), n)
                .offset(offset)
                .build(),
            BioOp::Read => opcode::Readv::new(fd, inf.iov.as_ptr(), n)
                .offset(offset)
                .build(),
        };
    }
    let (offset, buf, len) = inf.rest();
    // Requests are folios (2 MiB at most); a longer one would go on as a short transfer.
    let len32 = len.min(1 << 30) as u32;
    let fixed = fixed.and_then(|f| f.index(buf, len));
    match (inf.bio.op, fixed) {
        (BioOp::Read, Some(i)) => opcode::ReadFixed::new(fd, buf, len32, i)
            .offset(offset)
            .build(),
        (BioOp::Read, None) => opcode::Read::new(fd, buf, len32).offset(offset).build(),
        (BioOp::Write, Some(i)) => opcode::WriteFixed::new(fd, buf, len32, i)
            .offset(offset)
            .build(),
        (BioOp::Write, None) => opcode::Write::new(fd, buf, len32).offset(offset).build(),
    }
}

/// What a completion of `res` (bytes moved, or `-errno`) means for `inf`: `EINTR` and `EAGAIN`
/// are tried again, a short transfer goes on under [`InFlight::advance`]'s rules.
pub(super) fn outcome(inf: &mut InFlight, res: i32) -> Next {
    if res >= 0 {
        inf.advance(res as usize)
    } else if res == -libc::EINTR || res == -libc::EAGAIN {
        Next::Again
    } else {
        let (offset, _, _) = inf.rest();
        Next::Done(Err(StoreError::errno(
            inf.op(),
            offset,
            rustix::io::Errno::from_raw_os_error(-res),
        )))
    }
}

/// Submits what the ring holds and waits for `want` completions; with `idle` (no request in
/// flight: the reaper waits on its doorbell only) the wait is not counted as waiting for I/O,
/// where the kernel allows (`IORING_ENTER_NO_IOWAIT`, 6.15). The kernel counts a task waiting
/// on a ring with anything in flight as waiting for I/O, the doorbell's futex wait included,
/// so an engine at rest would show a CPU in `wa` and the system under I/O pressure
/// (`/proc/pressure/io`) for as long as the cache lives. (A request a submitter queues on the
/// ring itself between the count and the wait is then waited for as idle: an accounting
/// slip, nothing else.)
fn submit_and_wait(ring: &IoUring, want: usize, idle: bool) -> std::io::Result<usize> {
    if idle && ring.params().is_feature_no_iowait() {
        ring.submitter().submit_with_args_and_flags(
            want,
            &types::SubmitArgs::new(),
            io_uring::EnterFlags::NO_IOWAIT,
        )
    } else {
        ring.submit_and_wait(want)
    }
}

/// The reaper: submits what is queued, waits for completions and runs them, until told to
/// stop (see the module documentation for the doorbell).
fn reaper(sh: &Shared) {
    let mut done = Vec::new();
    let mut armed = false;
    loop {
        let mut wait = true;
        if sh.via_reaper {
            // Taken before the queue is: a submitter that queues after this rings again, and
            // the check before sleeping sees it.
            sh.bell.take();
            let queued = std::mem::take(&mut *sh.queue.lock().unwrap());
            if !queued.is_empty() {
                sh.counters
                    .batches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let _sq = sh.sq.lock().unwrap();
            for inf in queued {
                sh.push(Box::new(inf));
            }
            let stopping = sh.stop.load(Ordering::Acquire);
            // The value is read before the reaper marks itself asleep (see `Doorbell`). Not
            // re-armed once stopping (`stop` rings after it sets `stop`, which ends the wait in
            // flight).
            match sh.bell.prepare_sleep() {
                None => wait = false,
                Some(val) => {
                    if !armed && !stopping {
                        let e = futex_wait_entry(sh.bell.word(), val).user_data(DOORBELL);
                        sh.push_entry(&e);
                        armed = true;
                    }
                    if sh.stop.load(Ordering::Acquire) {
                        sh.bell.woke();
                        wait = false;
                    }
                }
            }
        }
        // Submits what the reaper queued (resubmissions, the doorbell's wait, the requests
        // handed over) and waits for a completion: as a wait for I/O only while requests are
        // in flight.
        let idle = wait && *sh.room.lock().unwrap() == 0;
        let entered = submit_and_wait(&sh.ring, usize::from(wait), idle);
        sh.bell.woke();
        if let Err(e) = entered {
            if !matches!(
                e.raw_os_error(),
                Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
            ) {
                panic!("io_uring_enter failed waiting: {e}");
            }
        }
        {
            // SAFETY: only this thread uses the completion queue.
            let mut cq = unsafe { sh.ring.completion_shared() };
            cq.sync();
            done.extend((&mut cq).map(|c| (c.user_data(), c.result())));
        }
        for (user_data, res) in done.drain(..) {
            if user_data == WAKE {
                continue;
            }
            if user_data == DOORBELL {
                armed = false;
                continue;
            }
            // SAFETY: every other `user_data` is a request boxed by `push` and completed once.
            let inf = unsafe { Box::from_raw(user_data as *mut InFlight) };
            // An `end_io` that panics loses its request (its `BioEnd` is dropped unrun, which
            // releases what it held), not the reaper.
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sh.complete(inf, res)));
        }
        // Stopped with nothing in flight, not even the doorbell's wait (which refers to this
        // ring's memory).
        if sh.stop.load(Ordering::Acquire)
            && !armed
            && *sh.room.lock().unwrap() == 0
            && sh.queue.lock().unwrap().is_empty()
        {
            return;
        }
    }
}
