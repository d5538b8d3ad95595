//! The backing's counters, as `quire stat` shows them: requests by kind, bytes each way, HTTP
//! attempts (so retries show), errors and requests in flight.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds of request a backing makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// A ranged (or whole) GET.
    Get,
    /// A HEAD: an open's check of the object's version.
    Head,
    /// A single PUT.
    Put,
    /// One part of a multipart upload.
    Part,
    /// Creating or completing a multipart upload.
    Multipart,
    /// A listing page.
    List,
    /// A DELETE.
    Delete,
    /// A server-side copy.
    Copy,
}

const KINDS: usize = 8;

impl Request {
    fn index(self) -> usize {
        self as usize
    }

    fn name(i: usize) -> &'static str {
        [
            "get",
            "head",
            "put",
            "part",
            "multipart",
            "list",
            "delete",
            "copy",
        ][i]
    }
}

/// Counters shared by a backing's files (relaxed atomics; read with [`Counters::snapshot`]).
#[derive(Debug, Default)]
pub struct Counters {
    requests: [AtomicU64; KINDS],
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    errors: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    http_attempts: AtomicU64,
    http_failed: AtomicU64,
    stale: AtomicU64,
    uploads_confirmed: AtomicU64,
    /// Bytes of upload buffers held now (parts and single PUTs being read or sent), and the
    /// most at once.
    upload_bytes: AtomicU64,
    upload_bytes_max: AtomicU64,
    /// Bytes written to staging files that may still be in the kernel's page cache (see
    /// the crate's `spill` module).
    pub(crate) staging_cached: std::sync::Arc<AtomicU64>,
}

impl Counters {
    /// A request starts; the guard ends it.
    pub(crate) fn start(&self, kind: Request) -> InFlight<'_> {
        self.requests[kind.index()].fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight {
            counters: self,
            ok: false,
        }
    }

    pub(crate) fn read(&self, n: usize) {
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn written(&self, n: usize) {
        self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn http_attempt(&self, failed: bool) {
        self.http_attempts.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.http_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn stale(&self) {
        self.stale.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn upload_confirmed(&self) {
        self.uploads_confirmed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn upload_held(&self, n: u64) {
        let now = self.upload_bytes.fetch_add(n, Ordering::Relaxed) + n;
        self.upload_bytes_max.fetch_max(now, Ordering::Relaxed);
    }

    pub(crate) fn upload_freed(&self, n: u64) {
        self.upload_bytes.fetch_sub(n, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> ObjectStats {
        ObjectStats {
            requests: std::array::from_fn(|i| self.requests[i].load(Ordering::Relaxed)),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            http_attempts: self.http_attempts.load(Ordering::Relaxed),
            http_failed: self.http_failed.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
            uploads_confirmed: self.uploads_confirmed.load(Ordering::Relaxed),
            upload_bytes: self.upload_bytes.load(Ordering::Relaxed),
            upload_bytes_max: self.upload_bytes_max.load(Ordering::Relaxed),
            staging_cached_bytes: self.staging_cached.load(Ordering::Relaxed),
        }
    }
}

/// A request in flight; dropped without [`InFlight::ok`], it counts as an error.
pub(crate) struct InFlight<'a> {
    counters: &'a Counters,
    ok: bool,
}

impl InFlight<'_> {
    pub(crate) fn ok(mut self) {
        self.ok = true;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !self.ok {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A snapshot of a backing's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectStats {
    /// Requests made, by kind (see [`Request`]), each counted once however often it was
    /// retried.
    pub requests: [u64; KINDS],
    /// Bytes received in GET bodies.
    pub bytes_read: u64,
    /// Bytes sent in PUT and part bodies.
    pub bytes_written: u64,
    /// Requests that failed after their retries.
    pub errors: u64,
    /// Requests in flight now, and the most at once.
    pub in_flight: u64,
    /// The most requests in flight at once.
    pub max_in_flight: u64,
    /// HTTP requests sent, retries included (0 for stores that are not HTTP).
    pub http_attempts: u64,
    /// HTTP requests that failed (no answer, or a 5xx or 429 status) and so were retried or
    /// reported.
    pub http_failed: u64,
    /// Reads refused because the object changed under an open reader (`ESTALE`), and opens
    /// that found a newer version than the cached one.
    pub stale: u64,
    /// Uploads that failed (their answer lost, the request sent again refused: a conditional
    /// PUT's condition no longer met, a multipart upload no longer known) and that a HEAD
    /// found done all the same: the object there is the upload's.
    pub uploads_confirmed: u64,
    /// Bytes of upload buffers held now (bounded by the backing's upload budget,
    /// `parts_in_flight` × `part_size`).
    pub upload_bytes: u64,
    /// The most upload buffer bytes held at once.
    pub upload_bytes_max: u64,
    /// Bytes written to staging files that may still be in the kernel's page cache (written and
    /// not yet written out and dropped; an upper bound).
    pub staging_cached_bytes: u64,
}

impl ObjectStats {
    /// Requests of `kind`.
    pub fn requests(&self, kind: Request) -> u64 {
        self.requests[kind.index()]
    }

    /// Requests of every kind.
    pub fn total_requests(&self) -> u64 {
        self.requests.iter().sum()
    }

    /// HTTP requests beyond one per logical request: retries.
    pub fn retries(&self) -> u64 {
        self.http_attempts.saturating_sub(self.total_requests())
    }
}

impl fmt::Display for ObjectStats {
    /// One `name value` line per counter, as `/proc/vmstat` does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.requests.iter().enumerate() {
            writeln!(f, "object_{} {n}", Request::name(i))?;
        }
        writeln!(f, "object_bytes_read {}", self.bytes_read)?;
        writeln!(f, "object_bytes_written {}", self.bytes_written)?;
        writeln!(f, "object_errors {}", self.errors)?;
        writeln!(f, "object_in_flight {}", self.in_flight)?;
        writeln!(f, "object_max_in_flight {}", self.max_in_flight)?;
        writeln!(f, "object_http_attempts {}", self.http_attempts)?;
        writeln!(f, "object_http_failed {}", self.http_failed)?;
        writeln!(f, "object_retries {}", self.retries())?;
        writeln!(f, "object_stale {}", self.stale)?;
        writeln!(f, "object_uploads_confirmed {}", self.uploads_confirmed)?;
        writeln!(f, "object_upload_bytes {}", self.upload_bytes)?;
        writeln!(f, "object_upload_bytes_max {}", self.upload_bytes_max)?;
        writeln!(
            f,
            "object_staging_cached_bytes {}",
            self.staging_cached_bytes
        )
    }
}
