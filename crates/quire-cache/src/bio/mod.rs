//! Block I/O beneath the stores: requests submitted in batches to an engine that keeps many of
//! them in flight, after the kernel's `bio`, `blk_plug` and completion path.
//!
//! A `Bio` moves bytes between **frame memory** (a locked folio being read, a folio under
//! write-back) and a [`Store`], at a byte offset. Whoever builds it gives it a `BioEnd`: the
//! owner of everything the request needs while it is in flight (the folio's lock and
//! reference, the mapping that keeps the store and the pool alive) and the code that runs when
//! it is over (`end_io`: mark the folio up to date and unlock it, or end its write-back). The
//! submitter does not wait: it hands a batch to `Engine::submit` and goes on, the way the
//! kernel's readahead submits a window of bios under one plug and returns.
//!
//! # Engines
//!
//! | engine | chosen when | how requests run |
//! |---|---|---|
//! | [`IoEngineKind::IoUring`] | the kernel gives this process an io_uring ([`IoEngineChoice::Auto`] or `IoUring`) | a batch is one `io_uring_enter`; one reaper thread waits for completions and runs `end_io`; short transfers and `EINTR`/`EAGAIN` are resubmitted from there. The pool's frames are registered as fixed buffers where the kernel allows (no page pinning per request). Requests for stores without a file descriptor ([`Store::io_fd`] is `None`: user stores, [`crate::store::MemStore`], [`crate::store::FaultyStore`]) go to the threads below. |
//! | [`IoEngineKind::Threads`] | io_uring is refused (`kernel.io_uring_disabled`, seccomp, `EPERM`, an old kernel) or `Threads` is asked for | a few blocking threads ([`crate::CacheConfig::io_threads`]) take requests from a queue and call the store's `read_at`/`write_at`; with 0 threads a batch runs on the submitter. |
//!
//! Beside the engine, a thread may have its own ring ([`ThreadRing`]): the reads its futures
//! await go there, and it runs their ends itself when it parks (see [`local`]'s documentation
//! for why and for the rules that keep that safe).
//!
//! The engine is chosen when the cache is made and never changes; [`EngineInfo`] says which and
//! why (in [`crate::CacheStats`]). `QUIRE_IO_ENGINE=threads` (or `io_uring`, `auto`) in the
//! environment overrides [`crate::CacheConfig::io_engine`]'s default, so a whole test run can
//! use the fallback.
//!
//! # Merging
//!
//! A file's batch of reads for the ring (io_uring, a store with a descriptor) is merged first
//! (`merge_reads`): reads whose store bytes follow one another (a readahead window of small
//! folios) become one request of several pieces, a `readv` (at most 256 pieces and 2 MiB),
//! whose end ends each folio's own end with its share of the bytes. The threads engine is not
//! given merged reads: it would run the pieces one after another on one thread, where its
//! threads ran them side by side.
//!
//! # What a request promises
//!
//! - Its buffer is frame memory that its `BioEnd` keeps (locked or under write-back, with a
//!   reference) until `end_io` has run; never a caller's buffer, so a caller that gives up
//!   waiting (a dropped future) leaves nothing the kernel still writes into.
//! - `end_io` runs exactly once, with the bytes moved and the first error, after the engine
//!   retried what may be retried: a read goes on until it is full, the store returns 0 (its
//!   end), or a transfer ends off the store's alignment (how `O_DIRECT` reports the end of a
//!   file); a write goes on until all is written (0 bytes written is [`StoreError::WriteZero`]).
//! - The number of requests in flight is bounded by the ring's completion queue; a submitter
//!   that finds it full waits for completions (the kernel's request-queue depth).

pub mod local;
mod threads;
mod uring;

pub use local::{ThreadRing, Unparker};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::store::{Op, ReadEnd, Store, StoreError};

/// The read a store that completes reads itself is handed: now [`crate::store::ReadRequest`],
/// beside the [`Store`] trait whose [`Store::submit_reads`] takes it.
#[deprecated(note = "use `quire::store::ReadRequest`, beside the `Store` trait that takes it")]
pub type ReadRequest = crate::store::ReadRequest;

/// Which engine a cache asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IoEngineChoice {
    /// io_uring where the kernel allows it, else threads (the default).
    #[default]
    Auto,
    /// io_uring; the cache still starts with threads if the kernel refuses it (the reason is in
    /// [`EngineInfo::reason`]).
    IoUring,
    /// Blocking threads only.
    Threads,
}

impl IoEngineChoice {
    /// The choice `QUIRE_IO_ENGINE` names (`auto`, `io_uring`/`io-uring`/`uring`, `threads`),
    /// if it is set to one of them.
    pub fn from_env() -> Option<IoEngineChoice> {
        match std::env::var("QUIRE_IO_ENGINE").ok()?.as_str() {
            "auto" => Some(IoEngineChoice::Auto),
            "io_uring" | "io-uring" | "uring" => Some(IoEngineChoice::IoUring),
            "threads" => Some(IoEngineChoice::Threads),
            _ => None,
        }
    }
}

/// The engine a cache runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoEngineKind {
    /// io_uring, with blocking threads for stores that have no file descriptor.
    IoUring,
    /// Blocking threads.
    Threads,
}

impl std::fmt::Display for IoEngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoEngineKind::IoUring => "io_uring",
            IoEngineKind::Threads => "threads",
        })
    }
}

/// Which engine runs and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineInfo {
    /// The engine.
    pub kind: IoEngineKind,
    /// Why: what was asked for and, where io_uring is not used, what refused it; whether the
    /// frames are registered as fixed buffers.
    pub reason: String,
}

/// Counts of an engine's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Requests submitted (each counted once, however often it was resubmitted).
    pub submitted: u64,
    /// Submissions to the kernel (`io_uring_enter` calls that submitted requests); with
    /// threads, batches handed to the queue; and each request run on the thread that waits for
    /// it (a write-back of one request that an `fsync` waits on).
    pub batches: u64,
    /// Resubmissions after a short transfer or `EINTR`/`EAGAIN`.
    pub resubmitted: u64,
    /// Requests that ended with an error.
    pub errors: u64,
    /// Requests in flight right now.
    pub in_flight: u64,
    /// The most requests in flight at once.
    pub max_in_flight: u64,
    /// Over every request submitted, the requests in flight as it was started, itself
    /// included: [`EngineStats::mean_depth`] is the depth a request joins on average (what the
    /// device is asked to overlap, as `iostat`'s queue size says for a disk).
    pub depth_sum: u64,
    /// Requests submitted to the awaiting thread's own ring ([`ThreadRing`]) rather than the
    /// engine's (counted in `submitted` too).
    pub local: u64,
}

impl EngineStats {
    /// The mean depth a request joined (`depth_sum / submitted`); 0 before any request.
    pub fn mean_depth(&self) -> f64 {
        if self.submitted == 0 {
            0.0
        } else {
            self.depth_sum as f64 / self.submitted as f64
        }
    }

    /// What happened between `earlier` and `self` (counts only; `in_flight` and
    /// `max_in_flight` are `self`'s).
    pub fn since(&self, earlier: &EngineStats) -> EngineStats {
        EngineStats {
            submitted: self.submitted - earlier.submitted,
            batches: self.batches - earlier.batches,
            resubmitted: self.resubmitted - earlier.resubmitted,
            local: self.local - earlier.local,
            errors: self.errors - earlier.errors,
            depth_sum: self.depth_sum - earlier.depth_sum,
            ..*self
        }
    }
}

/// The direction of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BioOp {
    /// Store to frames.
    Read,
    /// Frames to store.
    Write,
}

/// The owner of a request's resources and its completion; see the [module docs](self).
pub(crate) trait BioEnd: Send {
    /// The store the request is for; it lives as long as `self`.
    fn store(&self) -> &dyn Store;
    /// The request is over: `done` bytes moved, then `res` (the error that stopped it, if
    /// any). Runs once, on an engine thread or on the submitter.
    fn end_io(self: Box<Self>, done: usize, res: Result<(), StoreError>);
}

/// One request: `len` bytes between frame memory at `buf` and the store at `offset`.
pub(crate) struct Bio {
    pub(crate) op: BioOp,
    pub(crate) offset: u64,
    pub(crate) buf: *mut u8,
    pub(crate) len: usize,
    /// Further pieces of frame memory whose bytes follow `buf..buf + len` in the store (a
    /// write-back merging adjacent folios into one request; writes only): the kernel's bio of
    /// several segments.
    pub(crate) more: Vec<(*mut u8, usize)>,
    pub(crate) end: Box<dyn BioEnd>,
}

impl Bio {
    /// The request's bytes, all pieces together.
    pub(crate) fn total(&self) -> usize {
        self.len + self.more.iter().map(|&(_, l)| l).sum::<usize>()
    }
}

/// The most pieces one merged read carries: the kernel's `BIO_MAX_VECS`, well inside the
/// `IOV_MAX` (1 024) a `readv` takes.
pub(crate) const MAX_MERGED_PIECES: usize = 256;

/// The most bytes one merged request carries, read or write-back (a device's
/// `max_sectors_kb`): a prefetch of a long range stays many requests in flight rather than
/// one.
pub(crate) const MAX_MERGED_BYTES: usize = 2 << 20;

/// Merges runs of reads in `bios` whose store bytes follow one another (same store, each
/// starting where the one before ends) into requests of several pieces, at most
/// [`MAX_MERGED_PIECES`] and [`MAX_MERGED_BYTES`] each: one `readv` for a readahead window of
/// small folios, where each was its own request (the block layer's plug merging,
/// `blk_attempt_plug_merge`). Order is kept; writes and requests that already have pieces
/// pass through alone. Each merged request's end ends its pieces' own ends, in order, with
/// their share of the bytes ([`MergedEnd`]).
#[doc(alias = "blk_attempt_plug_merge")]
pub(crate) fn merge_reads(bios: Vec<Bio>) -> Vec<Bio> {
    let mut out: Vec<Bio> = Vec::with_capacity(bios.len());
    // Where the run being built would take a next piece: its store, and the offset.
    let mut tail: Option<(*const u8, u64)> = None;
    let mut run: Vec<Bio> = Vec::new();
    let mut run_bytes = 0;
    let flush = |run: &mut Vec<Bio>, out: &mut Vec<Bio>| match run.len() {
        0 => {}
        1 => out.extend(run.pop()),
        _ => out.push(merged(std::mem::take(run))),
    };
    for bio in bios {
        let mergeable = bio.op == BioOp::Read && bio.more.is_empty();
        let store = bio.end.store() as *const dyn Store as *const u8;
        let follows = mergeable
            && run.len() < MAX_MERGED_PIECES
            && run_bytes + bio.len <= MAX_MERGED_BYTES
            && tail.is_some_and(|(s, end)| std::ptr::eq(s, store) && end == bio.offset);
        if !follows {
            flush(&mut run, &mut out);
            run_bytes = 0;
        }
        if mergeable {
            tail = Some((store, bio.offset + bio.len as u64));
            run_bytes += bio.len;
            run.push(bio);
        } else {
            tail = None;
            out.push(bio);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// One request of the reads `run` (two or more, adjacent in the store, in order).
fn merged(run: Vec<Bio>) -> Bio {
    let mut pieces = run.into_iter();
    let first = pieces.next().expect("a run has a first read");
    let mut more = Vec::new();
    let mut ends = vec![(first.len, first.end)];
    for b in pieces {
        more.push((b.buf, b.len));
        ends.push((b.len, b.end));
    }
    Bio {
        op: BioOp::Read,
        offset: first.offset,
        buf: first.buf,
        len: first.len,
        more,
        end: Box::new(MergedEnd { ends }),
    }
}

/// The end of a merged read ([`merge_reads`]): the pieces' own ends with their lengths, in
/// store order.
struct MergedEnd {
    ends: Vec<(usize, Box<dyn BioEnd>)>,
}

impl BioEnd for MergedEnd {
    fn store(&self) -> &dyn Store {
        self.ends[0].1.store()
    }

    /// A piece the transfer covered ends with its bytes and no error; the piece where it
    /// stopped ends with what it got and the request's result (an error, or the store's end),
    /// and so does every piece after it, with no bytes.
    fn end_io(self: Box<Self>, done: usize, res: Result<(), StoreError>) {
        let mut at = 0;
        for (len, end) in self.ends {
            let got = done.saturating_sub(at).min(len);
            at += len;
            if got == len {
                end.end_io(len, Ok(()));
            } else {
                end.end_io(got, res.clone());
            }
        }
    }
}

// SAFETY: `buf` points into frame memory that `end` keeps for the request (see `BioEnd`),
// which any thread may access; `end` is `Send`.
unsafe impl Send for Bio {}

/// What a request does after a transfer.
enum Next {
    /// Transfer the rest.
    Again,
    /// It is over, with this result.
    Done(Result<(), StoreError>),
}

/// A request and its progress.
struct InFlight {
    bio: Bio,
    /// Bytes moved so far.
    done: usize,
    /// The request's bytes, all pieces together.
    total: usize,
    /// The pieces left, for a vectored submission (kept here, stable, while it is in flight).
    iov: Vec<libc::iovec>,
}

// SAFETY: `iov` points into the request's frame memory, as `bio.buf` does (see `Bio`).
unsafe impl Send for InFlight {}

impl InFlight {
    fn new(bio: Bio) -> InFlight {
        let total = bio.total();
        InFlight {
            bio,
            done: 0,
            total,
            iov: Vec::new(),
        }
    }

    /// The pieces of the request, in store order.
    fn pieces(&self) -> impl Iterator<Item = (*mut u8, usize)> + '_ {
        std::iter::once((self.bio.buf, self.bio.len)).chain(self.bio.more.iter().copied())
    }

    /// Whether the request has more than one piece.
    fn vectored(&self) -> bool {
        !self.bio.more.is_empty()
    }

    /// Fills `iov` with what is left of every piece; returns the store offset it starts at.
    fn rest_iov(&mut self) -> u64 {
        let mut skip = self.done;
        let mut iov = Vec::with_capacity(1 + self.bio.more.len());
        for (p, l) in self.pieces() {
            if skip >= l {
                skip -= l;
                continue;
            }
            iov.push(libc::iovec {
                iov_base: p.wrapping_add(skip).cast(),
                iov_len: l - skip,
            });
            skip = 0;
        }
        self.iov = iov;
        self.bio.offset + self.done as u64
    }

    fn op(&self) -> Op {
        match self.bio.op {
            BioOp::Read => Op::Read,
            BioOp::Write => Op::Write,
        }
    }

    /// Where the rest of the current piece starts: (store offset, buffer, length).
    fn rest(&self) -> (u64, *mut u8, usize) {
        let mut skip = self.done;
        for (p, l) in self.pieces() {
            if skip < l {
                // `skip < l`: inside the piece.
                return (
                    self.bio.offset + self.done as u64,
                    p.wrapping_add(skip),
                    l - skip,
                );
            }
            skip -= l;
        }
        (self.bio.offset + self.done as u64, self.bio.buf, 0)
    }

    /// Accounts a transfer of `n` bytes (0: the store had nothing more) under the rules of the
    /// module documentation.
    fn advance(&mut self, n: usize) -> Next {
        self.done += n;
        debug_assert!(self.done <= self.total);
        if self.done == self.total {
            return Next::Done(Ok(()));
        }
        match self.bio.op {
            BioOp::Read => {
                let align = self.bio.end.store().alignment().max(1);
                if n == 0 || !self.done.is_multiple_of(align) {
                    Next::Done(Ok(()))
                } else {
                    Next::Again
                }
            }
            BioOp::Write if n == 0 => Next::Done(Err(StoreError::WriteZero {
                offset: self.bio.offset + self.done as u64,
            })),
            BioOp::Write => Next::Again,
        }
    }

    /// Runs `end_io`.
    fn finish(self, res: Result<(), StoreError>) {
        let InFlight { bio, done, .. } = self;
        bio.end.end_io(done, res);
    }
}

/// Counters shared by an engine's parts.
#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    batches: AtomicU64,
    resubmitted: AtomicU64,
    errors: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    depth_sum: AtomicU64,
    local: AtomicU64,
}

impl Counters {
    fn started(&self, n: usize) {
        let n = n as u64;
        self.submitted.fetch_add(n, Ordering::Relaxed);
        let before = self.in_flight.fetch_add(n, Ordering::Relaxed);
        self.max_in_flight.fetch_max(before + n, Ordering::Relaxed);
        // The k-th of the batch joins `before + k` requests in flight.
        self.depth_sum
            .fetch_add(n * before + n * (n + 1) / 2, Ordering::Relaxed);
    }

    fn ended(&self, failed: bool) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> EngineStats {
        EngineStats {
            submitted: self.submitted.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            resubmitted: self.resubmitted.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            depth_sum: self.depth_sum.load(Ordering::Relaxed),
            local: self.local.load(Ordering::Relaxed),
        }
    }
}

/// The engine's end of a read it handed to a store as a [`crate::store::ReadRequest`]: the
/// request's own end,
/// after the engine's count of requests in flight.
struct StoreReadEnd {
    end: Box<dyn BioEnd>,
    counters: Arc<Counters>,
}

impl ReadEnd for StoreReadEnd {
    fn end_read(self: Box<Self>, result: Result<usize, StoreError>) {
        self.counters.ended(result.is_err());
        match result {
            Ok(n) => self.end.end_io(n, Ok(())),
            Err(e) => self.end.end_io(0, Err(e)),
        }
    }
}

/// A cache's I/O engine; see the [module documentation](self).
pub(crate) struct Engine {
    uring: Option<uring::Uring>,
    threads: threads::Threads,
    info: EngineInfo,
    counters: Arc<Counters>,
}

impl Engine {
    /// Starts the engine `choice` asks for, with `threads` blocking threads, registering the
    /// frame memory `frames` (start, length) as fixed buffers where it can.
    pub(crate) fn start(
        choice: IoEngineChoice,
        threads: usize,
        frames: (*mut u8, usize),
    ) -> std::io::Result<Engine> {
        let counters = Arc::new(Counters::default());
        let pool = threads::Threads::start(threads, counters.clone())?;
        let (uring, info) = match choice {
            IoEngineChoice::Threads => (
                None,
                EngineInfo {
                    kind: IoEngineKind::Threads,
                    reason: "threads asked for".into(),
                },
            ),
            IoEngineChoice::Auto | IoEngineChoice::IoUring => {
                match uring::Uring::start(frames, counters.clone()) {
                    Ok((u, fixed)) => (
                        Some(u),
                        EngineInfo {
                            kind: IoEngineKind::IoUring,
                            reason: format!("{choice:?} asked for; {fixed}"),
                        },
                    ),
                    Err(e) => (
                        None,
                        EngineInfo {
                            kind: IoEngineKind::Threads,
                            reason: format!("{choice:?} asked for; io_uring refused: {e}"),
                        },
                    ),
                }
            }
        };
        Ok(Engine {
            uring,
            threads: pool,
            info,
            counters,
        })
    }

    /// Whether reads of `store` go to the ring, where adjacent ones are worth merging
    /// ([`merge_reads`]): one `readv` in place of a request per folio. Not for the threads,
    /// which would run the pieces one `read_at` after another on one thread where several
    /// threads ran them side by side.
    pub(crate) fn merges_reads(&self, store: &dyn Store) -> bool {
        self.uring.is_some() && store.io_fd().is_some()
    }

    /// Which engine runs and why.
    pub(crate) fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// The engine's counts.
    pub(crate) fn stats(&self) -> EngineStats {
        self.counters.snapshot()
    }

    /// Runs `bio` to its end on the calling thread with blocking calls, counted as the
    /// engine's: for a lone request the caller would only sleep on until it ends (an `fsync`
    /// of a few adjacent pages), where handing it to the engine costs two thread wake-ups (the
    /// engine's, then the caller's) and the switches, more than the request itself saves.
    /// A store with a descriptor gets what the ring would do (one vectored call for a merged
    /// write-back), others their `write_at`/`read_at` per piece as on the engine's threads.
    pub(crate) fn run_here(&self, bio: Bio) {
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.counters.started(1);
        // An `end_io` that panics is contained as on the engine's threads: the request's
        // end, dropped unrun, releases what it held, and the caller's wait sees it end.
        let on_fd = bio.end.store().io_fd().is_some();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            threads::run(bio, &self.counters, on_fd)
        }));
    }

    /// Submits `bios` as one batch and returns without waiting for them (except where the queue
    /// is full, or the engine has no threads and runs them here).
    #[doc(alias("submit_bio", "blk_finish_plug"))]
    pub(crate) fn submit(&self, bios: Vec<Bio>) {
        if bios.is_empty() {
            return;
        }
        let Some(uring) = &self.uring else {
            self.threads.submit(bios);
            return;
        };
        let (ring, rest): (Vec<Bio>, Vec<Bio>) = bios
            .into_iter()
            .partition(|b| b.end.store().io_fd().is_some());
        if !rest.is_empty() {
            self.threads.submit(rest);
        }
        if !ring.is_empty() {
            uring.submit(ring);
        }
    }

    /// Submits `bio`, a read the calling thread awaits: to the thread's own ring where a
    /// [`ThreadRing::enter`] runs on it (io_uring engine, a store with a file descriptor),
    /// else as [`submit`](Self::submit) does.
    pub(crate) fn submit_awaited(&self, bio: Bio) {
        let bio = if self.uring.is_some() && bio.end.store().io_fd().is_some() {
            local::submit_awaited(bio, &self.counters)
        } else {
            Some(bio)
        };
        if let Some(bio) = bio {
            self.submit(vec![bio]);
        }
    }

    /// Hands a batch of reads for `store`, which completes reads itself
    /// ([`Store::completes_reads`]), to the store as [`crate::store::ReadRequest`]s, counted as
    /// the engine's
    /// own requests.
    pub(crate) fn submit_to_store(&self, store: &dyn Store, bios: Vec<Bio>) {
        if bios.is_empty() {
            return;
        }
        debug_assert!(bios
            .iter()
            .all(|b| b.op == BioOp::Read && b.more.is_empty()));
        self.counters.started(bios.len());
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        let reqs = bios
            .into_iter()
            .map(|bio| {
                let end = Box::new(StoreReadEnd {
                    end: bio.end,
                    counters: self.counters.clone(),
                });
                // SAFETY: a read's buffer is frame memory of a locked folio that is not up to
                // date, kept by its end for the request (see `Bio`).
                unsafe { crate::store::ReadRequest::new(bio.offset, bio.buf, bio.len, end) }
            })
            .collect();
        store.submit_reads(reqs);
    }

    /// Tells the engine's threads to stop once their work is done (they are not joined: the
    /// last reference to the cache may be dropped on one of them).
    pub(crate) fn stop(&self) {
        self.threads.stop();
        if let Some(u) = &self.uring {
            u.stop();
        }
    }
}

#[cfg(test)]
mod tests;
