//! Owned zero-copy references: [`OwnedFolio`] (its documentation says how it works and why its
//! bytes are stable).

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use super::Cache;
use crate::mem::folio::{Folio, FolioRef, FRAME_SHIFT};

/// A counted reference on an up-to-date folio of a cached file that borrows nothing
/// (`'static`, `Send`, `Sync`): its bytes without copying, stable for as long as it lives.
/// Made by [`CachedFile::read_folio_owned`](super::CachedFile::read_folio_owned); cloning takes
/// another reference. It can outlive the [`CachedFile`](super::CachedFile) and
/// [`PageCache`](super::PageCache) handles, move to another thread or task, and back a buffer
/// type that wants a `'static` owner (with the `bytes` feature, `OwnedFolio::into_bytes`
/// makes a `bytes::Bytes` of it through `Bytes::from_owner`).
///
/// A [`FolioRef`](crate::mem::folio::FolioRef) borrows the frame pool; an `OwnedFolio` instead
/// holds the cache's shared state alive (an `Arc`), which owns the pool, and puts its reference
/// when dropped. While any `OwnedFolio` lives, the cache's memory (the whole pool) stays mapped
/// and its background threads keep running.
///
/// # Stable bytes
///
/// The reference is taken on the path of
/// [`CachedFile::read_folio`](super::CachedFile::read_folio), which write-protects the spaces
/// ([`crate::mm`]) mapping the folio before it lends the bytes; after that, every change to a
/// referenced folio — a write, a truncation zeroing its tail, a write through a mapping — is
/// made in a copy that replaces it in the file's index (see [`crate::filemap`], "Changing
/// bytes"). So the bytes never change while the `OwnedFolio` exists: it is a snapshot of the
/// file's pages as of the read, which later writes do not show through.
///
/// ```
/// use quire::{CacheConfig, MemStore, PageCache};
///
/// # fn main() -> Result<(), quire::FilemapError> {
/// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
/// let file = cache.open(MemStore::from_vec(vec![b'a'; 10_000]))?;
/// let page = file.read_folio_owned(1)?;
/// drop(file); // the reference outlives the handle
/// let at = page.offset_of(1).unwrap();
/// assert_eq!(&page.bytes()[at..at + 3], b"aaa");
/// let worker = std::thread::spawn(move || page.bytes().len());
/// assert!(worker.join().unwrap() >= 4096);
/// # Ok(())
/// # }
/// ```
pub struct OwnedFolio {
    /// The descriptor, on which this value owns one raw reference.
    folio: NonNull<Folio>,
    /// What keeps the pool (and so the descriptor and its frames) alive.
    cache: Arc<Cache>,
}

// SAFETY: an `OwnedFolio` is a counted reference (whose count is atomic) plus an `Arc` of the
// cache, which is `Send` and `Sync`; it hands out only shared `&[u8]` of bytes that nobody
// changes while the reference is held (module documentation). Putting the reference from any
// thread is allowed, as for `FolioRef`.
unsafe impl Send for OwnedFolio {}
// SAFETY: as for `Send`: shared access lends only `&Folio` (which is `Sync`) and `&[u8]`.
unsafe impl Sync for OwnedFolio {}

impl OwnedFolio {
    /// Takes over `f`'s reference; `cache` owns `f`'s pool.
    pub(crate) fn new(f: FolioRef<'_>, cache: Arc<Cache>) -> OwnedFolio {
        debug_assert!(std::ptr::eq(f.pool(), &cache.pool));
        debug_assert!(f.is_uptodate());
        OwnedFolio {
            folio: f.into_raw(),
            cache,
        }
    }

    /// A borrowed view of the reference, which must not be dropped (it would put the
    /// reference this value owns).
    fn view(&self) -> ManuallyDrop<FolioRef<'_>> {
        ManuallyDrop::new(FolioRef::from_parts(self.folio(), &self.cache.pool))
    }

    /// The folio's descriptor (its flags, order and index).
    pub fn folio(&self) -> &Folio {
        // SAFETY: descriptors live as long as their pool, which `self.cache` keeps alive.
        unsafe { self.folio.as_ref() }
    }

    /// The file's page index of the folio's first page.
    pub fn index(&self) -> u64 {
        self.folio().index()
    }

    /// Pages (4 KiB each) in the folio.
    pub fn nr_pages(&self) -> usize {
        self.folio().nr_frames()
    }

    /// Where page `index` of the file starts in [`OwnedFolio::bytes`], if the folio holds it.
    pub fn offset_of(&self, index: u64) -> Option<usize> {
        let first = self.index();
        (index >= first && index - first < self.nr_pages() as u64)
            .then(|| ((index - first) << FRAME_SHIFT) as usize)
    }

    /// The folio's bytes, without copying: the file's bytes from byte
    /// `index() * 4096` on, for `nr_pages() * 4096` bytes (those past the end of the file read
    /// as zeros). They do not change while `self` lives.
    pub fn bytes(&self) -> &[u8] {
        let v = self.view();
        debug_assert!(v.is_uptodate());
        // SAFETY: the frames belong to the folio while this reference is held, lie inside the
        // pool's mapping (alive through `self.cache`) and are initialised. The folio was up to
        // date when the reference was taken, and UPTODATE is cleared only with the count
        // frozen, which our reference prevents; every change to an up-to-date folio needs such
        // a freeze or goes to a copy, and the spaces mapping it were write-protected before
        // this reference was handed out (module documentation). So nothing writes the bytes
        // for as long as `&self` is borrowed.
        unsafe { std::slice::from_raw_parts(v.as_ptr(), v.size()) }
    }

    /// Converts into a [`bytes::Bytes`] of the folio's bytes, without copying; the reference
    /// is put when the last `Bytes` sharing it is dropped.
    ///
    /// ```
    /// use quire::{CacheConfig, MemStore, PageCache};
    ///
    /// # fn main() -> Result<(), quire::FilemapError> {
    /// let cache = PageCache::new(CacheConfig::new(4 << 20))?;
    /// let file = cache.open(MemStore::from_vec(b"hello, bytes".to_vec()))?;
    /// let b = file.read_folio_owned(0)?.into_bytes();
    /// assert_eq!(&b[..12], b"hello, bytes");
    /// let hello = b.slice(..5); // shares the folio
    /// drop(b);
    /// assert_eq!(&hello[..], b"hello");
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "bytes")]
    pub fn into_bytes(self) -> bytes::Bytes {
        bytes::Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for OwnedFolio {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::ops::Deref for OwnedFolio {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

#[cfg(feature = "bytes")]
impl From<OwnedFolio> for bytes::Bytes {
    fn from(f: OwnedFolio) -> bytes::Bytes {
        f.into_bytes()
    }
}

impl Clone for OwnedFolio {
    fn clone(&self) -> OwnedFolio {
        let r: FolioRef<'_> = FolioRef::clone(&self.view());
        OwnedFolio::new(r, self.cache.clone())
    }
}

impl Drop for OwnedFolio {
    fn drop(&mut self) {
        // SAFETY: `self.folio` is a descriptor of this pool on which we own one raw reference
        // (from `FolioRef::into_raw`), given back only here; the folio is not frozen with it
        // counted (freezes count only the index's and the freezer's references). The pool is
        // alive: `self.cache` is dropped after this body.
        drop(unsafe { self.cache.pool.ref_from_raw(self.folio) });
    }
}

impl fmt::Debug for OwnedFolio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedFolio")
            .field("index", &self.index())
            .field("nr_pages", &self.nr_pages())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::filemap::{CacheConfig, PageCache, PAGE_SIZE};
    use crate::store::MemStore;

    fn cache() -> PageCache {
        PageCache::new(CacheConfig::new(4 << 20)).unwrap()
    }

    /// Whether every frame is free within 2 s: a readahead request's end on the I/O engine's
    /// thread may hold its folio a moment after the reader it woke went on.
    fn all_free(cache: &PageCache) -> bool {
        let start = std::time::Instant::now();
        loop {
            let s = cache.stats_exact();
            if s.free_frames == s.frames {
                return true;
            }
            if start.elapsed() > std::time::Duration::from_secs(2) {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn outlives_the_handles_and_keeps_its_bytes_under_writes() {
        let cache = cache();
        let file = cache.open(MemStore::from_vec(vec![1u8; 3 * 4096])).unwrap();
        let held = file.read_folio_owned(1).unwrap();
        let at = held.offset_of(1).unwrap();
        assert_eq!(held.offset_of(held.index() + held.nr_pages() as u64), None);
        // Writes and a truncation go to copies: the reference still sees the old bytes.
        file.write_all_at(4096, &[2u8; 4096]).unwrap();
        file.set_len(4096 + 100).unwrap();
        assert!(held.bytes()[at..at + 4096].iter().all(|&b| b == 1));
        let mut now = [0u8; 100];
        file.read_exact_at(4096, &mut now).unwrap();
        assert_eq!(now, [2u8; 100]);
        // Handles and the cache go; the reference keeps the memory.
        let other = held.clone();
        drop(file);
        drop(cache);
        let t = std::thread::spawn(move || other[at..at + 4096].iter().all(|&b| b == 1));
        assert!(t.join().unwrap());
        assert!(held.as_ref()[at..].iter().take(4096).all(|&b| b == 1));
    }

    #[test]
    fn references_are_put_when_dropped() {
        let cache = cache();
        let file = cache.open(MemStore::from_vec(vec![5u8; 8 * 4096])).unwrap();
        let refs: Vec<_> = (0..8).map(|i| file.read_folio_owned(i).unwrap()).collect();
        let copies: Vec<_> = refs.to_vec();
        drop(refs);
        drop(copies);
        // With no reference left, every frame of the file can be freed.
        drop(file);
        assert_eq!(cache.stats_exact().cached_frames, 0);
        assert!(all_free(&cache), "{:?}", cache.stats_exact());
    }

    #[test]
    fn past_the_end_fails() {
        let cache = cache();
        let file = cache.open(MemStore::from_vec(vec![5u8; 100])).unwrap();
        let e = file.read_folio_owned(1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        let f = file.read_folio_owned(0).unwrap();
        assert_eq!(f.len(), PAGE_SIZE as usize * f.nr_pages());
        assert!(f[100..].iter().all(|&b| b == 0), "zeros past the end");
    }

    #[cfg(feature = "bytes")]
    #[test]
    fn bytes_share_the_folio_and_put_it_last() {
        let cache = cache();
        let file = cache.open(MemStore::from_vec(vec![9u8; 4096])).unwrap();
        let b = bytes::Bytes::from(file.read_folio_owned(0).unwrap());
        let part = b.slice(10..20);
        let c = b.clone();
        drop(b);
        assert_eq!(&part[..], &[9u8; 10]);
        assert_eq!(c.as_ptr() as usize + 10, part.as_ptr() as usize, "no copy");
        drop((part, c));
        drop(file);
        assert!(all_free(&cache), "the last Bytes put the reference");
    }
}
