//! [`MemStore`]: a store held in memory, for tests.
//!
//! Besides the current image it keeps the image as of the last [`Store::sync`] (what a crash
//! would leave), and it can pretend to need aligned requests like an `O_DIRECT` file, so that
//! the page cache's aligned paths are tested without a real disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{check_range, check_request, Op, Result, Store, StoreError};

/// The default limit on a [`MemStore`]'s length: 4 GiB.
pub const DEFAULT_LIMIT: u64 = 4 << 30;

/// An in-memory store; see the [module documentation](self).
#[derive(Debug)]
pub struct MemStore {
    data: RwLock<Vec<u8>>,
    /// The image as of the last sync.
    synced: RwLock<Vec<u8>>,
    align: usize,
    limit: u64,
    syncs: AtomicU64,
}

impl Default for MemStore {
    fn default() -> Self {
        MemStore::new()
    }
}

impl MemStore {
    /// An empty store, with no alignment needs and a length limit of [`DEFAULT_LIMIT`].
    pub fn new() -> MemStore {
        MemStore::from_vec(Vec::new())
    }

    /// A store holding `data` (also taken as synced).
    pub fn from_vec(data: Vec<u8>) -> MemStore {
        MemStore {
            synced: RwLock::new(data.clone()),
            data: RwLock::new(data),
            align: 1,
            limit: DEFAULT_LIMIT,
            syncs: AtomicU64::new(0),
        }
    }

    /// Makes the store demand requests aligned to `align` bytes (a power of two), like an
    /// `O_DIRECT` file.
    ///
    /// # Panics
    ///
    /// If `align` is not a power of two.
    pub fn with_alignment(mut self, align: usize) -> MemStore {
        assert!(align.is_power_of_two(), "alignment must be a power of two");
        self.align = align;
        self
    }

    /// Sets the largest length the store may grow to; growing past it is a
    /// [`StoreError::TooLarge`] error.
    pub fn with_limit(mut self, limit: u64) -> MemStore {
        self.limit = limit;
        self
    }

    /// A copy of the current image.
    pub fn contents(&self) -> Vec<u8> {
        self.read().clone()
    }

    /// A copy of the image as of the last sync: what would survive a crash now.
    pub fn synced_contents(&self) -> Vec<u8> {
        self.synced
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many times [`Store::sync`] was called.
    pub fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.data.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Grows `data` to `len` bytes (zero filled), within the limit and without aborting on an
    /// allocation failure.
    fn grow(&self, op: Op, offset: u64, data: &mut Vec<u8>, len: u64) -> Result<()> {
        if len <= data.len() as u64 {
            return Ok(());
        }
        let too_large = StoreError::TooLarge {
            op,
            offset,
            len,
            limit: self.limit,
        };
        if len > self.limit {
            return Err(too_large);
        }
        let len = usize::try_from(len).map_err(|_| too_large.clone())?;
        data.try_reserve(len - data.len())
            .map_err(|_| StoreError::Io {
                op,
                offset,
                kind: std::io::ErrorKind::OutOfMemory,
                errno: None,
            })?;
        data.resize(len, 0);
        Ok(())
    }
}

impl Store for MemStore {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        check_request(Op::Read, offset, buf, self.align)?;
        let data = self.read();
        if offset >= data.len() as u64 {
            return Ok(0);
        }
        let start = offset as usize;
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        check_request(Op::Write, offset, buf, self.align)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let mut data = self.write();
        let end = offset + buf.len() as u64;
        self.grow(Op::Write, offset, &mut data, end)?;
        data[offset as usize..end as usize].copy_from_slice(buf);
        Ok(buf.len())
    }

    fn sync(&self) -> Result<()> {
        // Lock order: data, then synced.
        let data = self.read();
        let mut synced = self.synced.write().unwrap_or_else(|p| p.into_inner());
        synced.clear();
        synced.extend_from_slice(&data);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.read().len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        check_range(Op::SetLen, len, 0)?;
        let mut data = self.write();
        if len <= data.len() as u64 {
            data.truncate(len as usize);
            Ok(())
        } else {
            self.grow(Op::SetLen, len, &mut data, len)
        }
    }

    fn alignment(&self) -> usize {
        self.align
    }
}
