//! [`ReadRequest`]: a read handed to a store that completes reads itself
//! ([`Store::completes_reads`]). It is part of the [`Store`] trait's contract
//! ([`Store::submit_reads`]), so it lives beside the trait; the I/O engine that makes requests
//! (`crate::bio`) gives each one a [`ReadEnd`] to run when it is over.

#[cfg(doc)]
use super::Store;
use super::{Op, StoreError};

/// What ends a [`ReadRequest`]: the I/O engine's side of it (its accounting, and the end of
/// the request that fills the folio).
pub(crate) trait ReadEnd: Send {
    /// The read is over: `Ok(n)` when the first `n` bytes of the buffer hold the store's data,
    /// or the error that stopped it. Runs once.
    fn end_read(self: Box<Self>, result: Result<usize, StoreError>);
}

/// A read handed to a store that completes reads itself ([`Store::completes_reads`]): a stretch of
/// frame memory to fill from the store at
/// [`offset`](Self::offset), owned by the store until it calls [`complete`](Self::complete).
///
/// The store may finish it on any thread, in any order, later than the call that took it (an
/// async runtime's task waiting on the network). Dropping it uncompleted ends it with an
/// error (`ECANCELED`): the folio it fills is unlocked, not up to date, and a reader that waits
/// on it sees the error — nothing stays locked.
pub struct ReadRequest {
    offset: u64,
    buf: *mut u8,
    len: usize,
    /// `None` once ended.
    end: Option<Box<dyn ReadEnd>>,
}

// SAFETY: `buf` points into frame memory that `end` keeps for the request (a locked folio that
// is not up to date), which any thread may access; `end` is `Send`.
unsafe impl Send for ReadRequest {}

impl ReadRequest {
    /// A request to fill `len` bytes of frame memory at `buf` from the store at `offset`.
    ///
    /// # Safety
    ///
    /// `buf..buf + len` must be frame memory that `end` keeps for the request until it runs,
    /// that no reader looks at and no other request targets meanwhile (a locked folio that is
    /// not up to date).
    pub(crate) unsafe fn new(
        offset: u64,
        buf: *mut u8,
        len: usize,
        end: Box<dyn ReadEnd>,
    ) -> ReadRequest {
        ReadRequest {
            offset,
            buf,
            len,
            end: Some(end),
        }
    }

    /// The store offset the bytes come from.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it asks for no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame memory to fill.
    pub fn buf(&mut self) -> &mut [u8] {
        if self.end.is_none() {
            return &mut [];
        }
        // SAFETY: a read's buffer is frame memory of a locked folio that is not up to date
        // (`ReadRequest::new`): no reader looks at it and no other request targets it until
        // this request ends, which takes `self`; `&mut self` makes the borrow exclusive here.
        unsafe { std::slice::from_raw_parts_mut(self.buf, self.len) }
    }

    /// Ends the request: `Ok(n)` when the first `n` bytes of [`buf`](Self::buf) hold the
    /// store's data (fewer than [`len`](Self::len) only where the store's data ends), or the
    /// error that stopped it.
    pub fn complete(mut self, result: Result<usize, StoreError>) {
        if let Some(end) = self.end.take() {
            end.end_read(result.map(|n| n.min(self.len)));
        }
    }
}

impl Drop for ReadRequest {
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            end.end_read(Err(StoreError::Io {
                op: Op::Read,
                offset: self.offset,
                kind: std::io::ErrorKind::Interrupted,
                errno: Some(libc::ECANCELED),
            }));
        }
    }
}

impl std::fmt::Debug for ReadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRequest")
            .field("offset", &self.offset())
            .field("len", &self.len())
            .finish()
    }
}
