//! FUSE over io_uring (Linux 6.14+, `Documentation/filesystems/fuse-io-uring.rst`): the
//! channel that replaces a `read` and a `write` system call per request, and the switches
//! between the kernel's thread and a serving thread, by one ring submission per batch.
//!
//! One queue per possible CPU, as the kernel requires before it sends anything through the
//! rings: a queue is served by threads pinned to its CPU, each with its own ring of 128-byte
//! submission entries and a few *entries*, each a header buffer (the request's and reply's
//! headers and the operation's fixed argument) and a payload buffer (names, the bytes written or
//! read), registered once with `FUSE_IO_URING_CMD_REGISTER`. The kernel puts a request made on
//! CPU *n* into a free entry of queue *n* and completes that entry's command; the entry's thread
//! serves it through the same [`Serve`] file system as the classic channel
//! ([`dispatch`](self::dispatch)), writes the reply into the entry, and hands it back with
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which sends the reply and waits for the entry's next
//! request in one command. Every completion the ring holds is served before one
//! `io_uring_enter` sends all their replies. FORGET and INTERRUPT still come through
//! `/dev/fuse` (the kernel sends only those there once the rings are ready), served by the
//! classic threads.
//!
//! | entry state | who owns its buffers |
//! |---|---|
//! | registered, or committed and fetching | the kernel (writes the next request into them) |
//! | completed (`res` 0) | the queue's thread, until its next commit is submitted |
//! | completed with an error (`ENOTCONN`, `ECANCELED`: the connection ended) | the thread; the entry is done |
//!
//! Rings and buffers are made once as a check before the INIT reply asks for the channel, so a
//! machine that cannot make them never has the kernel wait for rings that will not come (each
//! thread then makes its own). Registered buffers
//! are freed only after every entry's command has ended (the connection is gone); a thread that
//! stops early for any other reason leaves its buffers allocated, because the kernel may still
//! copy a request into them before it cancels the ring's commands.

pub(crate) mod abi;
pub(crate) mod dispatch;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::serve::Serve;

/// How long the queues keep asking to register while the kernel has not finished INIT.
const REGISTER_PATIENCE: Duration = Duration::from_secs(10);

/// One flag per queue the kernel expects (one per possible CPU, indexed by CPU number):
/// whether that CPU is online. `Err` where the possible CPUs cannot be read: the kernel would
/// wait for a queue per possible CPU, and a wrong count leaves every request waiting.
pub(crate) fn cpus() -> io::Result<Vec<bool>> {
    let read = |f: &str| std::fs::read_to_string(format!("/sys/devices/system/cpu/{f}"));
    let possible = read("possible")
        .ok()
        .and_then(|s| possible_cpus(&s))
        .ok_or_else(|| io::Error::other("the possible CPUs are unknown"))?;
    let online = read("online").unwrap_or_default();
    Ok((0..possible).map(|c| cpu_in(&online, c)).collect())
}

/// Whether CPU `cpu` is in a kernel CPU list ("0-3,8"); `true` when the list cannot be read.
fn cpu_in(list: &str, cpu: usize) -> bool {
    let list = list.trim();
    if list.is_empty() {
        return true;
    }
    list.split(',').any(|part| {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        matches!((a.parse::<usize>(), b.parse::<usize>()), (Ok(a), Ok(b)) if (a..=b).contains(&cpu))
    })
}

/// Counts the CPUs of a kernel CPU list ("0-3,8").
fn possible_cpus(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.trim().split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let a = part.parse::<usize>().ok()?;
                (a, a)
            }
        };
        n += b.checked_sub(a)? + 1;
    }
    (n > 0).then_some(n)
}

/// Whether this process may make an io_uring with 128-byte entries (`kernel.io_uring_disabled`,
/// seccomp or a container may refuse it): `Err` says why not.
pub(crate) fn probe() -> io::Result<()> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(2)
        .map(drop)
}

/// The mount's `/dev/fuse` descriptor, handed to the queues once fuser has it: the queues start
/// at INIT, inside fuser's handshake, before the session that owns the descriptor is returned.
#[derive(Debug, Default)]
pub(crate) struct FdCell {
    fd: parking_lot::Mutex<Option<Option<Arc<OwnedFd>>>>,
    cv: parking_lot::Condvar,
}

impl FdCell {
    /// Hands the descriptor over (`None`: there will be none, the mount failed or ended).
    /// The first answer stays.
    pub(crate) fn set(&self, fd: Option<Arc<OwnedFd>>) {
        let mut g = self.fd.lock();
        if g.is_none() {
            *g = Some(fd);
        }
        self.cv.notify_all();
    }

    /// Waits for the descriptor.
    fn wait(&self) -> io::Result<Arc<OwnedFd>> {
        let deadline = Instant::now() + REGISTER_PATIENCE;
        let mut g = self.fd.lock();
        loop {
            match &*g {
                Some(Some(fd)) => return Ok(fd.clone()),
                Some(None) => return Err(io::Error::other("the mount failed")),
                None => {
                    if self.cv.wait_until(&mut g, deadline).timed_out() {
                        return Err(io::Error::other("no /dev/fuse descriptor came"));
                    }
                }
            }
        }
    }
}

/// The running queues.
#[derive(Debug)]
pub(crate) struct Ring {
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// What the queues report.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Entries whose registration failed (the kernel then serves everything through
    /// `/dev/fuse`).
    pub refused: AtomicUsize,
    /// Why registration failed, if it did.
    pub why: parking_lot::Mutex<Option<String>>,
    /// Requests served, per queue (each on its own cache line).
    served: Vec<PerQueue>,
}

#[derive(Debug, Default)]
#[repr(align(64))]
struct PerQueue(std::sync::atomic::AtomicU64);

impl Shared {
    /// Requests the queues have served.
    pub(crate) fn served(&self) -> u64 {
        self.served
            .iter()
            .map(|q| q.0.load(Ordering::Relaxed))
            .sum()
    }
}

impl Ring {
    /// Starts a queue per entry of `cpus` (whether its CPU is online), served by `per_queue`
    /// threads (one for an offline CPU, which the kernel only needs registered) of one entry
    /// with a `payload`-byte payload buffer each, serving `fs` on the connection of `fuse` (a
    /// `/dev/fuse` descriptor of the mount). Several threads per queue: a thread waiting for a
    /// miss holds only its own entry, and the kernel fills the queue's others. Every ring and
    /// buffer is made here once as a check, before anything is registered (`Err`: nothing
    /// was); a thread whose own ring then cannot be made is counted as refused.
    pub(crate) fn start<S: Serve>(
        fs: Arc<S>,
        fuse: Arc<FdCell>,
        cpus: &[bool],
        per_queue: usize,
        payload: usize,
    ) -> io::Result<Ring> {
        // Every thread's ring and buffers are made here once, as a check (nothing is asked of
        // the kernel if they cannot be), and again by the thread itself, which is the only one
        // ever to submit to its ring.
        let mut prepared = Vec::new();
        for (qid, &online) in cpus.iter().enumerate() {
            for t in 0..if online { per_queue.max(1) } else { 1 } {
                drop(Prepared::new(1, payload)?);
                prepared.push((qid as u16, t));
            }
        }
        let shared = Arc::new(Shared {
            served: (0..prepared.len()).map(|_| PerQueue::default()).collect(),
            ..Shared::default()
        });
        let mut threads = Vec::with_capacity(prepared.len());
        for (slot, (qid, t)) in prepared.into_iter().enumerate() {
            let (fs, fuse2, sh) = (fs.clone(), fuse.clone(), shared.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("quire-fuse-q{qid}.{t}"))
                .spawn(move || {
                    let q = Queue { qid, slot };
                    let run = |fd: Arc<OwnedFd>| {
                        q.run(&*fs, fd.as_raw_fd(), Prepared::new(1, payload)?, &sh)
                    };
                    if let Err(e) = fuse2.wait().and_then(run) {
                        sh.refused.fetch_add(1, Ordering::Relaxed);
                        sh.why.lock().get_or_insert_with(|| e.to_string());
                    }
                });
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    // Release the threads started (they wait for a descriptor that will not
                    // come) before anything is registered.
                    fuse.set(None);
                    for h in threads {
                        let _ = h.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Ring { threads, shared })
    }

    /// What the queues report.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Waits for every queue's thread to end (they end when the connection does).
    pub(crate) fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// One entry's buffers. The kernel reads the iovec array at registration and keeps the two
/// buffers' addresses; they are raw allocations (no Rust owner asserts exclusive access while
/// the kernel writes into them), freed when the entry is dropped, after the ring is closed.
struct Entry {
    iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the iovecs point to the entry's own allocations, which no other value refers to.
unsafe impl Send for Entry {}

impl Entry {
    fn new(payload: usize) -> Entry {
        let alloc = |n: usize| {
            let b: *mut [u8] = Box::into_raw(vec![0u8; n].into_boxed_slice());
            libc::iovec {
                iov_base: b.cast(),
                iov_len: n,
            }
        };
        Entry {
            iov: Box::new([alloc(abi::HEADER_SIZE), alloc(payload)]),
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        for v in self.iov.iter() {
            let b = std::ptr::slice_from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len);
            // SAFETY: made by `Box::into_raw` of a boxed slice of this length in `Entry::new`,
            // freed once; the ring that lent it to the kernel is closed before entries drop.
            drop(unsafe { Box::from_raw(b) });
        }
    }
}

/// A queue thread's ring and entries, made before the channel is asked for.
struct Prepared {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Entry>,
}

impl Prepared {
    fn new(nr: usize, payload: usize) -> io::Result<Prepared> {
        Ok(Prepared {
            ring: IoUring::builder().build(nr.next_power_of_two().max(2) as u32)?,
            entries: (0..nr).map(|_| Entry::new(payload)).collect(),
        })
    }
}

/// One thread of a queue: its ring and entries.
struct Queue {
    /// The queue (the CPU) it serves.
    qid: u16,
    /// Its counter in [`Shared`].
    slot: usize,
}

impl Queue {
    /// The submission for entry `idx`: REGISTER, or COMMIT_AND_FETCH of request `commit_id`.
    fn command(
        fuse: RawFd,
        e: &Entry,
        idx: usize,
        cmd: u32,
        commit_id: u64,
        qid: u16,
    ) -> squeue::Entry128 {
        let sqe = opcode::UringCmd80::new(types::Fd(fuse), cmd)
            .cmd(abi::cmd_req(commit_id, qid))
            .addr(Some(e.iov.as_ptr() as u64))
            .build()
            .user_data(idx as u64);
        with_len(sqe, 2)
    }

    fn run<S: Serve>(&self, fs: &S, fuse: RawFd, p: Prepared, shared: &Shared) -> io::Result<()> {
        let qid = self.qid;
        // The kernel routes a request to the queue of the CPU it was made on: serve it there.
        // (Unpinned, in alternated `fuse --quick` runs: cached 4 KiB reads at 1 job 1.6x as
        // fast, but zipf-randread at 4 jobs 0.7x, db_bench fill 0.23x, readseq 0.47x.)
        if (qid as usize) < rustix::thread::CpuSet::MAX_CPU {
            let mut set = rustix::thread::CpuSet::new();
            set.set(qid as usize);
            let _ = rustix::thread::sched_setaffinity(None, &set);
        }
        let Prepared { mut ring, entries } = p;
        // Once registered, the buffers are the kernel's until every command has ended: any
        // early return leaves them allocated (below, they are freed only at the clean end).
        let entries = std::mem::ManuallyDrop::new(entries);
        let nr = entries.len();
        let push = |ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, sqe: squeue::Entry128| {
            // SAFETY: the command's iovecs and buffers are never freed while a command may
            // use them (see above); the submission queue has a slot per entry and each entry
            // has at most one command in flight.
            unsafe { ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("the ring's submission queue is full"))
        };
        for (i, e) in entries.iter().enumerate() {
            push(
                &mut ring,
                Self::command(fuse, e, i, abi::CMD_REGISTER, 0, qid),
            )?;
        }
        let started = Instant::now();
        let mut registered = vec![false; nr];
        let mut live = nr;
        let mut done: Vec<(usize, i32)> = Vec::with_capacity(nr);
        let mut afters = Vec::with_capacity(nr);
        while live > 0 {
            match wait_for_requests(&ring) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(
                ring.completion()
                    .map(|c| (c.user_data() as usize, c.result())),
            );
            for &(idx, res) in &done {
                let Some(e) = entries.get(idx) else { continue };
                if res == -libc::EAGAIN && !registered[idx] {
                    // The kernel has not finished INIT yet: ask again shortly.
                    if started.elapsed() > REGISTER_PATIENCE {
                        return Err(io::Error::other(
                            "the kernel did not accept the ring's entries (INIT never finished)",
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    push(
                        &mut ring,
                        Self::command(fuse, e, idx, abi::CMD_REGISTER, 0, qid),
                    )?;
                    continue;
                }
                if res < 0 {
                    let ended = [
                        libc::ENOTCONN,
                        libc::ECANCELED,
                        libc::ECONNABORTED,
                        libc::ENODEV,
                    ];
                    if !ended.contains(&-res) {
                        // Refused at registration (or a commit the kernel did not take): the
                        // kernel serves everything through /dev/fuse from now on.
                        return Err(io::Error::from_raw_os_error(-res));
                    }
                    // The connection ended (unmounted, aborted): the entry is done.
                    live -= 1;
                    continue;
                }
                registered[idx] = true;
                // SAFETY: the entry's command completed: the kernel wrote a request into its
                // buffers and does not touch them until the next command is submitted.
                let (header, payload) = unsafe { entry_buffers(e) };
                let commit_id = abi::u64_at(header, abi::ENT_IN_OUT + 8).unwrap_or(0);
                let in_len = abi::u32_at(header, abi::ENT_IN_OUT + 16).unwrap_or(0) as usize;
                let answer = match abi::InHeader::parse(header) {
                    Some(h) => {
                        let arg = &header[abi::OP_IN..abi::OP_IN + abi::OP_IN_SIZE];
                        let a = dispatch::serve(fs, &h, arg, payload, in_len);
                        (h.unique, a.error, a.len, a.after)
                    }
                    None => (commit_id, -libc::EINVAL, 0, None),
                };
                let (unique, error, len, after) = answer;
                if let Some(q) = shared.served.get(self.slot) {
                    q.0.store(q.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                }
                abi::out_header(header, (16 + len) as u32, error, unique);
                header[abi::ENT_IN_OUT + 16..abi::ENT_IN_OUT + 20]
                    .copy_from_slice(&(len as u32).to_ne_bytes());
                afters.push(after);
                push(
                    &mut ring,
                    Self::command(fuse, e, idx, abi::CMD_COMMIT_AND_FETCH, commit_id, qid),
                )?;
            }
            // The replies go out with the next submission; the work they left runs once
            // they are sent (and is not lost if the submission fails).
            if !afters.is_empty() {
                let sent = loop {
                    match ring.submit() {
                        Ok(_) => break Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => break Err(e),
                    }
                };
                for a in afters.drain(..) {
                    dispatch::run_after(a);
                }
                sent?;
            }
        }
        // Every entry's command ended (the connection is gone): the buffers are ours again.
        drop(ring);
        drop(std::mem::ManuallyDrop::into_inner(entries));
        Ok(())
    }
}

/// Submits what the ring holds and waits for a completion, the wait not counted as waiting for
/// I/O where the kernel allows (`IORING_ENTER_NO_IOWAIT`, 6.15). The kernel counts a task that
/// waits on a ring with commands in flight as waiting for I/O, and a queue's commands are in
/// flight for as long as the mount stands: an idle mount would show its CPUs 100% in `wa` and
/// the system's I/O pressure (`/proc/pressure/io`, which container managers act on) near 100%,
/// for a wait on requests, not on a device.
fn wait_for_requests(ring: &IoUring<squeue::Entry128>) -> io::Result<usize> {
    if ring.params().is_feature_no_iowait() {
        ring.submitter().submit_with_args_and_flags(
            1,
            &types::SubmitArgs::new(),
            io_uring::EnterFlags::NO_IOWAIT,
        )
    } else {
        ring.submit_and_wait(1)
    }
}

/// The entry's header and payload buffers, writable.
///
/// # Safety
/// The entry must be owned by the caller's thread right now (its command completed and no
/// new one was submitted), so that neither the kernel nor any other reference uses them.
#[allow(clippy::mut_from_ref)]
unsafe fn entry_buffers(e: &Entry) -> (&mut [u8], &mut [u8]) {
    // SAFETY: per the contract, nothing else reads or writes the buffers while these slices
    // live; both are the entry's own allocations of the given lengths.
    unsafe {
        (
            std::slice::from_raw_parts_mut(e.iov[0].iov_base.cast(), e.iov[0].iov_len),
            std::slice::from_raw_parts_mut(e.iov[1].iov_base.cast(), e.iov[1].iov_len),
        )
    }
}

/// `sqe` with its `len` field set: the kernel takes the iovec count of a FUSE ring command
/// from it, and `UringCmd80` has no setter for it.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `#[repr(C)]` over the kernel's 64-byte `io_uring_sqe` and 64 bytes
    // of command, plain data with no invalid bit patterns; `len` is the `u32` at byte 24 of
    // the SQE, and the result is the same entry with that field changed.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(sqe);
        raw[24..28].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_read() {
        assert!(cpu_in("0-3,8", 2) && cpu_in("0-3,8", 8) && !cpu_in("0-3,8", 5));
        assert!(cpu_in("", 7), "unknown: taken as online");
        assert_eq!(possible_cpus("0-1\n"), Some(2));
        assert_eq!(possible_cpus("0"), Some(1));
        assert_eq!(possible_cpus("0-3,8-9"), Some(6));
        assert_eq!(possible_cpus(""), None);
        assert_eq!(possible_cpus("3-1"), None);
    }

    #[test]
    fn the_command_carries_its_iovecs_count_and_queue() {
        let e = Entry::new(8192);
        let sqe = Queue::command(3, &e, 5, abi::CMD_COMMIT_AND_FETCH, 77, 1);
        // SAFETY: as in `with_len`: plain data of 128 bytes.
        let raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(raw[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(i32::from_ne_bytes(raw[4..8].try_into().unwrap()), 3, "fd");
        assert_eq!(
            u32::from_ne_bytes(raw[8..12].try_into().unwrap()),
            abi::CMD_COMMIT_AND_FETCH,
            "cmd_op"
        );
        assert_eq!(
            u64::from_ne_bytes(raw[16..24].try_into().unwrap()),
            e.iov.as_ptr() as u64,
            "addr"
        );
        assert_eq!(
            u32::from_ne_bytes(raw[24..28].try_into().unwrap()),
            2,
            "len"
        );
        assert_eq!(
            u64::from_ne_bytes(raw[32..40].try_into().unwrap()),
            5,
            "user_data"
        );
        // struct fuse_uring_cmd_req at the command area (byte 48): flags, commit_id, qid.
        assert_eq!(u64::from_ne_bytes(raw[56..64].try_into().unwrap()), 77);
        assert_eq!(u16::from_ne_bytes(raw[64..66].try_into().unwrap()), 1);
    }
}
