//! [`FaultyStore`]: a wrapper that injects I/O errors and short transfers, for error tests.
//!
//! A [`Fault`] covers a byte range and applies to reads, writes, or both (or to `sync`). A
//! request that overlaps a fault's range behaves like a device with a bad region:
//!
//! - if it begins before the range, it is cut at the range's start (a short transfer of the
//!   bytes before it; this does not fire the fault);
//! - if it begins inside the range, the fault *fires*: an [`FaultKind::Error`] fails the request
//!   (nothing transferred), a [`FaultKind::Short`] transfers at most `max` bytes.
//!
//! With an aligned inner store (see [`Store::alignment`]) cuts are rounded down to the
//! alignment, so the wrapper never turns an aligned request into an unaligned one; a cut that
//! rounds down to the request's start counts as beginning inside the range.
//!
//! A fault fires a chosen number of times ([`Fault::times`]; once by default) or forever
//! ([`Fault::persistent`]). The wrapper counts what it injected, per fault and in total.

use crate::sync::loom::{Mutex, MutexGuard};
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{check_range, Op, Result, Store, StoreError};

/// What a fault does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Fail the request with this error.
    Error {
        /// The error's kind.
        kind: io::ErrorKind,
        /// The OS error number reported (EIO by default).
        errno: Option<i32>,
    },
    /// Transfer at most `max` bytes (0: a read that looks like the end of the file, a write
    /// that makes no progress).
    Short {
        /// The most bytes transferred.
        max: usize,
    },
}

/// One injected fault; see the [module documentation](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The bytes it covers (ignored for sync faults).
    pub range: Range<u64>,
    /// Whether it applies to reads.
    pub reads: bool,
    /// Whether it applies to writes.
    pub writes: bool,
    /// Whether it applies to `sync` (then only an error makes sense; the range is ignored).
    pub syncs: bool,
    /// Whether it applies to `set_len` (an error; the range is ignored).
    pub set_lens: bool,
    /// What it does.
    pub kind: FaultKind,
    /// How many more times it fires; `None` for ever.
    pub times: Option<u64>,
}

const EIO: i32 = 5;

impl Fault {
    fn new(range: Range<u64>, reads: bool, writes: bool, kind: FaultKind) -> Fault {
        Fault {
            range,
            reads,
            writes,
            syncs: false,
            set_lens: false,
            kind,
            times: Some(1),
        }
    }

    /// Reads that begin in `range` fail with EIO (once).
    pub fn read_error(range: Range<u64>) -> Fault {
        Fault::new(range, true, false, FaultKind::eio())
    }

    /// Writes that begin in `range` fail with EIO (once).
    pub fn write_error(range: Range<u64>) -> Fault {
        Fault::new(range, false, true, FaultKind::eio())
    }

    /// Reads that begin in `range` transfer at most `max` bytes (once).
    pub fn short_read(range: Range<u64>, max: usize) -> Fault {
        Fault::new(range, true, false, FaultKind::Short { max })
    }

    /// Writes that begin in `range` transfer at most `max` bytes (once).
    pub fn short_write(range: Range<u64>, max: usize) -> Fault {
        Fault::new(range, false, true, FaultKind::Short { max })
    }

    /// `sync` fails with EIO (once).
    pub fn sync_error() -> Fault {
        Fault {
            range: 0..0,
            reads: false,
            writes: false,
            syncs: true,
            set_lens: false,
            kind: FaultKind::eio(),
            times: Some(1),
        }
    }

    /// `set_len` fails with EIO (once), changing nothing.
    pub fn set_len_error() -> Fault {
        Fault {
            syncs: false,
            set_lens: true,
            ..Fault::sync_error()
        }
    }

    /// Applies to reads and writes alike.
    pub fn both(mut self) -> Fault {
        self.reads = true;
        self.writes = true;
        self
    }

    /// Fires every time.
    pub fn persistent(mut self) -> Fault {
        self.times = None;
        self
    }

    /// Fires `n` times.
    pub fn times(mut self, n: u64) -> Fault {
        self.times = Some(n);
        self
    }

    /// Fails with `kind` (and no OS error number) instead of EIO.
    pub fn with_error(mut self, kind: io::ErrorKind) -> Fault {
        self.kind = FaultKind::Error { kind, errno: None };
        self
    }
}

impl FaultKind {
    /// An EIO error.
    pub fn eio() -> FaultKind {
        FaultKind::Error {
            kind: io::ErrorKind::Other,
            errno: Some(EIO),
        }
    }
}

/// Names a fault added to a [`FaultyStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

struct Armed {
    id: FaultId,
    fault: Fault,
    fired: u64,
}

/// What one request runs into.
enum Plan {
    /// Pass through unchanged.
    Pass,
    /// Transfer only the first `n` bytes (`n < len`).
    Cut(usize),
    /// Fail.
    Fail(StoreError),
}

/// A store that injects faults into another; see the [module documentation](self).
pub struct FaultyStore<S> {
    inner: S,
    faults: Mutex<Faults>,
    injected: AtomicU64,
}

struct Faults {
    armed: Vec<Armed>,
    /// Firing counts of faults that were used up or removed, by id.
    retired: Vec<(FaultId, u64)>,
    next_id: u64,
}

impl<S: Store> FaultyStore<S> {
    /// Wraps `inner` with no faults armed.
    pub fn new(inner: S) -> FaultyStore<S> {
        FaultyStore {
            inner,
            faults: Mutex::new(Faults {
                armed: Vec::new(),
                retired: Vec::new(),
                next_id: 0,
            }),
            injected: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock()
    }

    /// Arms a fault.
    pub fn add(&self, fault: Fault) -> FaultId {
        let mut f = self.faults();
        let id = FaultId(f.next_id);
        f.next_id += 1;
        if fault.times == Some(0) {
            f.retired.push((id, 0));
        } else {
            f.armed.push(Armed {
                id,
                fault,
                fired: 0,
            });
        }
        id
    }

    /// Disarms a fault; returns whether it was still armed.
    pub fn remove(&self, id: FaultId) -> bool {
        let mut f = self.faults();
        match f.armed.iter().position(|a| a.id == id) {
            Some(i) => {
                let a = f.armed.remove(i);
                f.retired.push((a.id, a.fired));
                true
            }
            None => false,
        }
    }

    /// Disarms every fault.
    pub fn clear(&self) {
        let mut f = self.faults();
        let armed = std::mem::take(&mut f.armed);
        f.retired.extend(armed.into_iter().map(|a| (a.id, a.fired)));
    }

    /// How many times fault `id` fired.
    pub fn fired(&self, id: FaultId) -> u64 {
        let f = self.faults();
        f.armed
            .iter()
            .find(|a| a.id == id)
            .map(|a| a.fired)
            .or_else(|| f.retired.iter().find(|r| r.0 == id).map(|r| r.1))
            .unwrap_or(0)
    }

    /// How many faults fired in total.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Decides what the request `[offset, offset + len)` runs into, firing a fault if it begins
    /// inside one.
    fn plan(&self, op: Op, offset: u64, len: usize) -> Plan {
        if len == 0 {
            return Plan::Pass;
        }
        let align = self.inner.alignment().max(1) as u64;
        let end = offset + len as u64;
        let f = self.faults();
        // The fault the request reaches first.
        let hit = f
            .armed
            .iter()
            .enumerate()
            .filter(|(_, a)| {
                let applies = match op {
                    Op::Read => a.fault.reads,
                    Op::Write => a.fault.writes,
                    _ => false,
                };
                applies && a.fault.range.start < end && offset < a.fault.range.end
            })
            .min_by_key(|(_, a)| a.fault.range.start.max(offset))
            .map(|(i, a)| (i, a.fault.range.start));
        let Some((i, start)) = hit else {
            return Plan::Pass;
        };
        if start > offset {
            let cut = (start - offset) / align * align;
            if cut > 0 {
                return Plan::Cut(cut as usize);
            }
        }
        // Begins inside: fire.
        let kind = self.fire(f, i);
        match kind {
            FaultKind::Error { kind, errno } => Plan::Fail(StoreError::Io {
                op,
                offset,
                kind,
                errno,
            }),
            FaultKind::Short { max } => {
                let n = (max.min(len) as u64 / align * align) as usize;
                if n < len {
                    Plan::Cut(n)
                } else {
                    Plan::Pass
                }
            }
        }
    }
}

impl<S: Store> FaultyStore<S> {
    /// Fires armed fault `i`: counts it, retires it if it is used up, and returns what it does.
    fn fire(&self, mut f: MutexGuard<'_, Faults>, i: usize) -> FaultKind {
        let a = &mut f.armed[i];
        a.fired += 1;
        let kind = a.fault.kind;
        if let Some(t) = a.fault.times.as_mut() {
            *t -= 1;
            if *t == 0 {
                let a = f.armed.remove(i);
                f.retired.push((a.id, a.fired));
            }
        }
        drop(f);
        self.injected.fetch_add(1, Ordering::Relaxed);
        kind
    }

    /// Fires the first armed fault that `applies` to a whole-store operation (`sync`,
    /// `set_len`), as an error.
    fn fire_whole(&self, op: Op, applies: impl Fn(&Fault) -> bool) -> Result<()> {
        let f = self.faults();
        let Some(i) = f.armed.iter().position(|a| applies(&a.fault)) else {
            return Ok(());
        };
        let kind = self.fire(f, i);
        let (kind, errno) = match kind {
            FaultKind::Error { kind, errno } => (kind, errno),
            FaultKind::Short { .. } => (io::ErrorKind::Other, Some(EIO)),
        };
        Err(StoreError::Io {
            op,
            offset: 0,
            kind,
            errno,
        })
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_range(Op::Read, offset, buf.len())?;
        match self.plan(Op::Read, offset, buf.len()) {
            Plan::Pass => self.inner.read_at(offset, buf),
            Plan::Cut(0) => Ok(0),
            Plan::Cut(n) => self.inner.read_at(offset, &mut buf[..n]),
            Plan::Fail(e) => Err(e),
        }
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        check_range(Op::Write, offset, buf.len())?;
        match self.plan(Op::Write, offset, buf.len()) {
            Plan::Pass => self.inner.write_at(offset, buf),
            Plan::Cut(0) => Ok(0),
            Plan::Cut(n) => self.inner.write_at(offset, &buf[..n]),
            Plan::Fail(e) => Err(e),
        }
    }

    fn sync(&self) -> Result<()> {
        self.fire_whole(Op::Sync, |f| f.syncs)?;
        self.inner.sync()
    }

    fn sync_all(&self) -> Result<()> {
        self.fire_whole(Op::Sync, |f| f.syncs)?;
        self.inner.sync_all()
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.fire_whole(Op::SetLen, |f| f.set_lens)?;
        self.inner.set_len(len)
    }

    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("injected", &self.injected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
