//! The fallback engine: a few blocking threads that run requests with the store's own `read_at`
//! and `write_at` (and the engine for stores without a file descriptor under io_uring).
//!
//! Threads hold the queue only, never the cache, so a cache goes away when its last user does;
//! stopping does not join them (the last reference may be dropped in an `end_io` on one of
//! them). With no threads, a batch runs on the thread that submits it.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use super::{Bio, Counters, InFlight, Next};
use crate::store::StoreError;

/// Requests queued or running at most: as many as the io_uring engine keeps in flight.
pub(super) const DEPTH: usize = 512;

#[derive(Default)]
struct Queue {
    bios: VecDeque<Bio>,
    /// Requests queued or running.
    pending: usize,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    room: Condvar,
}

pub(super) struct Threads {
    shared: Arc<Shared>,
    threads: usize,
    counters: Arc<Counters>,
}

impl Threads {
    /// Starts `n` threads.
    pub(super) fn start(n: usize, counters: Arc<Counters>) -> std::io::Result<Threads> {
        let t = Threads {
            shared: Arc::new(Shared::default()),
            threads: n,
            counters,
        };
        for i in 0..n {
            let shared = t.shared.clone();
            let counters = t.counters.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("quire-io-{i}"))
                .spawn(move || worker(&shared, &counters));
            if let Err(e) = spawned {
                t.stop();
                return Err(e);
            }
        }
        Ok(t)
    }

    /// Queues `bios` (or runs them here, with no threads or once stopped), waiting for room
    /// while [`DEPTH`] requests are queued or running.
    pub(super) fn submit(&self, bios: Vec<Bio>) {
        self.counters
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut bios = bios.into_iter().peekable();
        if self.threads > 0 {
            while bios.peek().is_some() {
                let mut q = self.shared.queue.lock().unwrap();
                while q.pending >= DEPTH && !q.stop {
                    q = self.shared.room.wait(q).unwrap();
                }
                if q.stop {
                    break;
                }
                let n = bios.len().min(DEPTH - q.pending);
                self.counters.started(n);
                q.pending += n;
                q.bios.extend(bios.by_ref().take(n));
                drop(q);
                if n == 1 {
                    self.shared.ready.notify_one();
                } else {
                    self.shared.ready.notify_all();
                }
            }
        }
        for bio in bios {
            self.counters.started(1);
            run(bio, &self.counters, false);
        }
    }

    /// Tells the threads to stop once the queue is empty.
    pub(super) fn stop(&self) {
        self.shared.queue.lock().unwrap().stop = true;
        self.shared.ready.notify_all();
        self.shared.room.notify_all();
    }
}

fn worker(shared: &Shared, counters: &Counters) {
    loop {
        let bio = {
            let mut q = shared.queue.lock().unwrap();
            loop {
                if let Some(b) = q.bios.pop_front() {
                    break b;
                }
                if q.stop {
                    return;
                }
                q = shared.ready.wait(q).unwrap();
            }
        };
        // An `end_io` that panics does not take the thread with it.
        let _ =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(bio, counters, false)));
        shared.queue.lock().unwrap().pending -= 1;
        shared.room.notify_one();
    }
}

/// Runs one request to its end with blocking calls: the store's `read_at`/`write_at`, piece by
/// piece, or with `on_fd` its descriptor ([`Store::io_fd`](crate::store::Store::io_fd)) as the
/// ring would use it: one `pwritev` or `preadv` of what is left of every piece (a merged
/// write-back is one call, not one `write_at` per folio), `io_fd_written` left to the request's
/// end as after the ring. A store that panics loses the request: its `BioEnd` is dropped unrun,
/// which releases what it held.
pub(super) fn run(bio: Bio, counters: &Counters, on_fd: bool) {
    let mut inf = InFlight::new(bio);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if on_fd {
            transfer_on_fd(&mut inf, counters)
        } else {
            transfer(&mut inf, counters)
        }
    }));
    counters.ended(!matches!(res, Ok(Ok(()))));
    if let Ok(res) = res {
        inf.finish(res);
    }
}

fn transfer_on_fd(inf: &mut InFlight, counters: &Counters) -> Result<(), StoreError> {
    use std::os::fd::AsRawFd;
    loop {
        let offset = inf.rest_iov();
        let fd = inf
            .bio
            .end
            .store()
            .io_fd()
            .expect("run_on_fd: a store with a descriptor")
            .as_raw_fd();
        let (iov, n) = (inf.iov.as_ptr(), inf.iov.len() as libc::c_int);
        // SAFETY: the iovecs cover what is left of the request's frame memory, which its
        // `BioEnd` keeps for it (locked, or under write-back) and nothing else writes while it
        // runs (a write only reads it); the descriptor is the store's, which the end keeps
        // alive; at most `MAX_MERGED_PIECES` iovecs, inside `IOV_MAX`.
        let r = unsafe {
            match inf.bio.op {
                super::BioOp::Write => libc::pwritev(fd, iov, n, offset as libc::off_t),
                super::BioOp::Read => libc::preadv(fd, iov, n, offset as libc::off_t),
            }
        };
        let res = if r < 0 {
            -std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        } else {
            r.min(i32::MAX as isize) as i32
        };
        match super::uring::outcome(inf, res) {
            Next::Again => {
                counters
                    .resubmitted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Next::Done(r) => return r,
        }
    }
}

/// The transfers of `inf`, retried as the module documentation of [`super`] says.
fn transfer(inf: &mut InFlight, counters: &Counters) -> Result<(), StoreError> {
    loop {
        let (offset, buf, len) = inf.rest();
        let store = inf.bio.end.store();
        let step = match inf.bio.op {
            super::BioOp::Read => {
                // SAFETY: `buf..buf + len` is the rest of the request's frame memory, which its
                // `BioEnd` keeps for it (locked, or under write-back) and nothing else writes
                // or reads while the request runs.
                let b = unsafe { std::slice::from_raw_parts_mut(buf, len) };
                store.read_at(offset, b)
            }
            super::BioOp::Write => {
                // SAFETY: as above; a write only reads the frames.
                let b = unsafe { std::slice::from_raw_parts(buf, len) };
                store.write_at(offset, b)
            }
        };
        match step {
            Ok(n) => match inf.advance(n) {
                Next::Again => {
                    counters
                        .resubmitted
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Next::Done(r) => return r,
            },
            Err(e) => return Err(e),
        }
    }
}
