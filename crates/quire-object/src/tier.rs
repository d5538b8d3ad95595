//! The second tier: clean folios evicted from memory kept on local disk, bounded, keyed by
//! object and version, checked on every read, found again after a restart.
//!
//! Reclaim offers each clean folio it evicts to its store ([`quire::Store::evicted_clean`], the
//! kernel's cleancache); an [`crate::file::ObjectFile`] with a tier queues the bytes of those
//! that are exactly a version's (not staged, inside the version's size) to the tier's writer
//! thread, and a miss looks in the tier before it asks the network.
//!
//! # On disk
//!
//! The tier's directory holds one subdirectory per object version, named by a 64-bit hash of
//! (backing URL, key, ETag), holding one file per **chunk** of 1 MiB of the object:
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | magic `QTIER002` |
//! | 8..40 | which of the chunk's 256 pages are present (a bitmap) |
//! | 40..1064 | each page's CRC-32 |
//! | 4096.. | the pages, at their offset in the chunk (a sparse file) |
//!
//! A page is used only if its bit is set and its checksum matches what is read: a torn or
//! corrupted block is a miss (counted, and the page forgotten), never wrong data. Writing a page
//! writes its data, then its header entry; a crash between them leaves a checksum that does not
//! match (a miss). The size bound counts chunk files' allocated pages plus headers; past it the
//! least recently used chunks are deleted. At start the directory is scanned and every chunk
//! with a valid header is known again: a warm restart reads from disk, not the network.
//!
//! # Memory
//!
//! Offers wait for the writer in a queue of at most [`queue_bound_for`] the frames of the cache
//! the tier is put under (a 16th of them, 1 to [`QUEUED_MAX`] bytes). An offer that finds
//! it full waits up to [`OFFER_WAIT`] for room (reclaim slowed to the disk's pace, as the
//! kernel's reclaim is by write-back), and only then is dropped, and counted. The chunk files stay out of the kernel's page cache (see
//! the crate's `spill` module): the writer writes out and drops what it wrote after each batch of at most
//! 4 MiB bytes, and a read of whole pages into quire's frames goes around it (`O_DIRECT`), the
//! disk's bytes landing in the frames with no copy on the way; any other read drops the pages
//! it read. A miss's read of the tier waits on the disk off the runtime's workers
//! (`block_in_place`), so other misses and the network's replies go on meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::ObjectError;

const PAGE: usize = 4096;
pub(crate) const CHUNK: u64 = 1 << 20;
const PAGES: usize = (CHUNK as usize) / PAGE;
const MAGIC: &[u8; 8] = b"QTIER002";
const BITMAP: usize = 8;
const CRCS: usize = BITMAP + PAGES / 8;
const HEADER: u64 = PAGE as u64;

/// The identity of an object version in the tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ObjectId(u64);

impl ObjectId {
    pub(crate) fn of(url: &str, key: &str, e_tag: &str) -> ObjectId {
        // A fixed hash (not RandomState): names must be the same after a restart.
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        url.hash(&mut h);
        key.hash(&mut h);
        e_tag.hash(&mut h);
        ObjectId(h.finish())
    }
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A chunk's header, in memory.
struct Chunk {
    file: Arc<File>,
    present: [u8; PAGES / 8],
    crcs: [u32; PAGES],
    /// Pages present.
    pages: usize,
    /// Last use, for LRU.
    tick: u64,
}

impl Chunk {
    fn has(&self, page: usize) -> bool {
        self.present[page / 8] & (1 << (page % 8)) != 0
    }

    fn set(&mut self, page: usize, on: bool) {
        let was = self.has(page);
        if on {
            self.present[page / 8] |= 1 << (page % 8);
        } else {
            self.present[page / 8] &= !(1 << (page % 8));
        }
        match (was, on) {
            (false, true) => self.pages += 1,
            (true, false) => self.pages -= 1,
            _ => {}
        }
    }

    /// Bytes it takes on disk, by the tier's count.
    fn bytes(&self) -> u64 {
        HEADER + (self.pages * PAGE) as u64
    }

    fn write_header(&self) -> std::io::Result<()> {
        let mut h = vec![0u8; CRCS + PAGES * 4];
        h[..8].copy_from_slice(MAGIC);
        h[BITMAP..CRCS].copy_from_slice(&self.present);
        for (i, c) in self.crcs.iter().enumerate() {
            h[CRCS + i * 4..CRCS + i * 4 + 4].copy_from_slice(&c.to_le_bytes());
        }
        self.file.write_all_at(&h, 0)
    }

    fn load(file: File) -> Option<Chunk> {
        let mut h = vec![0u8; CRCS + PAGES * 4];
        crate::spill::read_dropping(&file, &mut h, 0).ok()?;
        if &h[..8] != MAGIC {
            return None;
        }
        let mut present = [0u8; PAGES / 8];
        present.copy_from_slice(&h[BITMAP..CRCS]);
        let crcs = std::array::from_fn(|i| {
            u32::from_le_bytes(
                h[CRCS + i * 4..CRCS + i * 4 + 4]
                    .try_into()
                    .expect("4 bytes"),
            )
        });
        let pages = present.iter().map(|b| b.count_ones() as usize).sum();
        Some(Chunk {
            file: Arc::new(file),
            present,
            crcs,
            pages,
            tick: 0,
        })
    }
}

/// (object, chunk number).
type ChunkKey = (ObjectId, u64);

struct State {
    chunks: HashMap<ChunkKey, Chunk>,
    /// tick → chunk, the LRU order.
    lru: BTreeMap<u64, ChunkKey>,
    tick: u64,
    bytes: u64,
}

/// The tier's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Pages read from the tier.
    pub hits: u64,
    /// Pages looked for and not there.
    pub misses: u64,
    /// Pages whose checksum did not match: refetched, and forgotten.
    pub corrupt: u64,
    /// Pages written to the tier.
    pub puts: u64,
    /// Pages offered while the writer was behind, not kept.
    pub dropped: u64,
    /// Pages offered that the tier already held (read from it, evicted again): not written
    /// twice.
    pub held: u64,
    /// Chunks deleted to stay under the size bound.
    pub evicted_chunks: u64,
    /// Bytes the tier holds now.
    pub bytes: u64,
    /// The size bound.
    pub limit: u64,
    /// Bytes offered and waiting for the writer now (at most `queue_bound`, bar one offer
    /// larger than it alone in the queue).
    pub queued: u64,
    /// The most bytes that waited at once.
    pub queued_max: u64,
    /// The bound on bytes waiting ([`queue_bound_for`] the cache's frames).
    pub queue_bound: u64,
}

impl std::fmt::Display for TierStats {
    /// One `name value` line per counter, as `/proc/vmstat` does.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "tier_hits {}", self.hits)?;
        writeln!(f, "tier_misses {}", self.misses)?;
        writeln!(f, "tier_corrupt {}", self.corrupt)?;
        writeln!(f, "tier_puts {}", self.puts)?;
        writeln!(f, "tier_dropped {}", self.dropped)?;
        writeln!(f, "tier_held {}", self.held)?;
        writeln!(f, "tier_evicted_chunks {}", self.evicted_chunks)?;
        writeln!(f, "tier_bytes {}", self.bytes)?;
        writeln!(f, "tier_limit {}", self.limit)?;
        writeln!(f, "tier_queued_bytes {}", self.queued)?;
        writeln!(f, "tier_queued_bytes_max {}", self.queued_max)?;
        writeln!(f, "tier_queue_bound {}", self.queue_bound)
    }
}

#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
    corrupt: AtomicU64,
    puts: AtomicU64,
    dropped: AtomicU64,
    held: AtomicU64,
    evicted: AtomicU64,
}

struct Put {
    object: ObjectId,
    offset: u64,
    data: Vec<u8>,
}

pub(crate) struct TierInner {
    dir: PathBuf,
    limit: u64,
    state: Mutex<State>,
    counts: Counts,
    queue: Mutex<Option<SyncSender<Msg>>>,
    /// Bytes offered and not yet written: at most `queue_bound` (an offer past it waits, then
    /// is dropped).
    queued: AtomicU64,
    queue_bound: AtomicU64,
    queued_max: AtomicU64,
    /// Offers waiting for room in the queue park here; the writer wakes them.
    room: (Mutex<()>, Condvar),
}

/// How long an offer waits for room in a full queue before it is dropped.
pub const OFFER_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The most bytes of offers waiting for the writer (copies of evicted folios: memory beside the
/// frames, which a budget given as one figure pays for). Reclaim offers faster than a disk takes
/// them only in bursts; what does not fit is dropped, which costs a later miss a GET, not data.
pub const QUEUED_MAX: u64 = 8 << 20;

/// The bound on a tier's queue of offers under a cache of `frames` bytes: a 16th of them, at
/// least 1 MiB (a chunk) and at most [`QUEUED_MAX`] — so that at a small budget the queue does
/// not take the frames' place.
pub fn queue_bound_for(frames: u64) -> u64 {
    (frames / 16).clamp(1 << 20, QUEUED_MAX)
}

/// A bounded cache of clean pages on local disk under the memory cache; see the
/// [module docs](self).
#[derive(Clone)]
pub struct DiskTier {
    pub(crate) inner: Arc<TierInner>,
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("dir", &self.inner.dir)
            .field("stats", &self.stats())
            .finish()
    }
}

impl DiskTier {
    /// Opens (or makes) the tier in `dir`, holding at most `limit` bytes, and finds again what
    /// an earlier run left there (beyond the bound: the excess is deleted).
    pub fn open(dir: impl AsRef<Path>, limit: u64) -> Result<DiskTier, ObjectError> {
        let dir = dir.as_ref().to_path_buf();
        let shown = dir.display().to_string();
        let io = |e: std::io::Error| ObjectError::Tier {
            dir: shown.clone(),
            source: e,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let mut state = State {
            chunks: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            bytes: 0,
        };
        for obj in std::fs::read_dir(&dir).map_err(io)? {
            let obj = obj.map_err(io)?;
            let Some(id) = obj
                .file_name()
                .to_str()
                .and_then(|n| u64::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            let Ok(files) = std::fs::read_dir(obj.path()) else {
                continue;
            };
            for f in files.flatten() {
                let Some(n) = f.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else {
                    continue;
                };
                let opened = OpenOptions::new().read(true).write(true).open(f.path());
                match opened.ok().and_then(Chunk::load) {
                    Some(mut c) => {
                        state.tick += 1;
                        c.tick = state.tick;
                        state.bytes += c.bytes();
                        state.lru.insert(c.tick, (ObjectId(id), n));
                        state.chunks.insert((ObjectId(id), n), c);
                    }
                    None => {
                        // Not a chunk this tier wrote whole: start it over.
                        let _ = std::fs::remove_file(f.path());
                    }
                }
            }
        }
        let inner = Arc::new(TierInner {
            dir,
            limit,
            state: Mutex::new(state),
            counts: Counts::default(),
            queue: Mutex::new(None),
            queued: AtomicU64::new(0),
            queue_bound: AtomicU64::new(QUEUED_MAX),
            queued_max: AtomicU64::new(0),
            room: (Mutex::new(()), Condvar::new()),
        });
        inner.shrink_to(limit);
        let (tx, rx) = sync_channel::<Msg>(256);
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("quire-tier".into())
            .spawn(move || writer(weak, rx))
            .map_err(io)?;
        *inner.queue.lock() = Some(tx);
        Ok(DiskTier { inner })
    }

    /// Bounds the queue of offers by [`queue_bound_for`] `frames`, the frames of the cache the
    /// tier is put under (a tier shared by several caches takes the last one's).
    pub(crate) fn bound_queue_for(&self, frames: u64) {
        self.inner
            .queue_bound
            .store(queue_bound_for(frames), Ordering::Relaxed);
    }

    /// The counters.
    pub fn stats(&self) -> TierStats {
        let c = &self.inner.counts;
        TierStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            corrupt: c.corrupt.load(Ordering::Relaxed),
            puts: c.puts.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            held: c.held.load(Ordering::Relaxed),
            evicted_chunks: c.evicted.load(Ordering::Relaxed),
            bytes: self.inner.state.lock().bytes,
            limit: self.inner.limit,
            queued: self.inner.queued.load(Ordering::Relaxed),
            queued_max: self.inner.queued_max.load(Ordering::Relaxed),
            queue_bound: self.inner.queue_bound.load(Ordering::Relaxed),
        }
    }

    /// Waits until every page offered so far is written (for tests and orderly shutdown).
    pub fn drain(&self) {
        let q = self.inner.queue.lock().clone();
        if let Some(q) = q {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            if q.send(Msg::Drain(tx)).is_ok() {
                let _ = rx.recv();
            }
        }
    }

    /// The directory of an object version (for tests that damage it).
    pub fn chunk_path(&self, url: &str, key: &str, e_tag: &str, offset: u64) -> PathBuf {
        self.inner
            .chunk_path((ObjectId::of(url, key, e_tag), offset / CHUNK))
    }
}

/// What the writer thread is sent.
enum Msg {
    Put(Put),
    /// Answer when everything before is written.
    Drain(std::sync::mpsc::Sender<()>),
}

/// Writes what is offered, in batches: a batch ends when the queue is empty or
/// 4 MiB bytes were written, and then the files it wrote are written out
/// and dropped from the page cache.
fn writer(tier: std::sync::Weak<TierInner>, rx: Receiver<Msg>) {
    let mut touched: Vec<Arc<File>> = Vec::new();
    let mut batch = 0u64;
    let flush = |touched: &mut Vec<Arc<File>>, batch: &mut u64| {
        for f in touched.drain(..) {
            crate::spill::flush_all(&f);
        }
        *batch = 0;
    };
    while let Ok(m) = rx.recv() {
        let mut next = Some(m);
        while let Some(m) = next.take() {
            let Some(t) = tier.upgrade() else { return };
            match m {
                Msg::Put(p) => {
                    t.write(p.object, p.offset, &p.data, &mut touched);
                    t.queued.fetch_sub(p.data.len() as u64, Ordering::Relaxed);
                    let _g = t.room.0.lock();
                    t.room.1.notify_all();
                    batch += p.data.len() as u64;
                }
                Msg::Drain(done) => {
                    flush(&mut touched, &mut batch);
                    let _ = done.send(());
                }
            }
            if batch >= crate::spill::FLUSH_AT {
                flush(&mut touched, &mut batch);
            }
            next = rx.try_recv().ok();
        }
        flush(&mut touched, &mut batch);
    }
}

impl TierInner {
    fn chunk_path(&self, (id, n): ChunkKey) -> PathBuf {
        self.dir.join(format!("{:016x}", id.0)).join(n.to_string())
    }

    /// Queues `data` (whole pages, `offset` page aligned) of `object` for the writer; drops
    /// it if the writer is behind.
    pub(crate) fn offer(&self, object: ObjectId, offset: u64, data: &[u8]) {
        if !offset.is_multiple_of(PAGE as u64) || data.is_empty() {
            return;
        }
        let Some(q) = self.queue.lock().clone() else {
            return;
        };
        let pages = data.len().div_ceil(PAGE) as u64;
        // A version's bytes never change: pages the tier holds (a folio read from it and
        // evicted again) need no second write.
        if self.holds(object, offset, pages as usize) {
            self.counts.held.fetch_add(pages, Ordering::Relaxed);
            return;
        }
        let n = data.len() as u64;
        let bound = self.queue_bound.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + OFFER_WAIT;
        let now = loop {
            let now = self.queued.fetch_add(n, Ordering::Relaxed) + n;
            // An offer larger than the bound goes in only alone.
            if now <= bound || now == n {
                break now;
            }
            self.queued.fetch_sub(n, Ordering::Relaxed);
            let mut g = self.room.0.lock();
            // Re-checked under the lock the writer wakes under: no wake-up is missed.
            let queued = self.queued.load(Ordering::Relaxed);
            if queued + n > bound
                && queued > 0
                && self.room.1.wait_until(&mut g, deadline).timed_out()
            {
                self.counts.dropped.fetch_add(pages, Ordering::Relaxed);
                return;
            }
        };
        self.queued_max.fetch_max(now, Ordering::Relaxed);
        let p = Put {
            object,
            offset,
            data: data.to_vec(),
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = q.try_send(Msg::Put(p))
        {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.counts.dropped.fetch_add(pages, Ordering::Relaxed);
        }
    }

    /// Whether every one of `pages` pages at `offset` (page aligned) is in the tier.
    fn holds(&self, object: ObjectId, offset: u64, pages: usize) -> bool {
        let s = self.state.lock();
        (0..pages).all(|i| {
            let at = offset + (i * PAGE) as u64;
            s.chunks
                .get(&(object, at / CHUNK))
                .is_some_and(|c| c.has(((at % CHUNK) / PAGE as u64) as usize))
        })
    }

    /// Writes `data`; the chunk files written to are added to `touched` (once each).
    fn write(&self, object: ObjectId, offset: u64, data: &[u8], touched: &mut Vec<Arc<File>>) {
        let mut at = 0usize;
        while at < data.len() {
            let off = offset + at as u64;
            let n = (CHUNK - off % CHUNK).min((data.len() - at) as u64) as usize;
            match self.write_chunk(object, off, &data[at..at + n]) {
                Ok(Some(f)) => {
                    if !touched.iter().any(|t| Arc::ptr_eq(t, &f)) {
                        touched.push(f);
                    }
                }
                Ok(None) => {}
                Err(_) => return,
            }
            at += n;
        }
        self.shrink_to(self.limit);
    }

    /// Writes pages of one chunk; the chunk's file if it wrote to it.
    fn write_chunk(
        &self,
        object: ObjectId,
        off: u64,
        data: &[u8],
    ) -> std::io::Result<Option<Arc<File>>> {
        let key = (object, off / CHUNK);
        let file = {
            let mut s = self.state.lock();
            if !s.chunks.contains_key(&key) {
                let path = self.chunk_path(key);
                if let Some(d) = path.parent() {
                    std::fs::create_dir_all(d)?;
                }
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)?;
                let c = Chunk {
                    file: Arc::new(f),
                    present: [0; PAGES / 8],
                    crcs: [0; PAGES],
                    pages: 0,
                    tick: 0,
                };
                c.write_header()?;
                s.bytes += c.bytes();
                s.chunks.insert(key, c);
            }
            s.tick += 1;
            let tick = s.tick;
            let c = s.chunks.get_mut(&key).expect("just made");
            let first = ((off % CHUNK) as usize) / PAGE;
            if (first..first + data.len().div_ceil(PAGE)).all(|p| c.has(p)) {
                // A version's bytes never change: what is there is these bytes already.
                return Ok(None);
            }
            let old = std::mem::replace(&mut c.tick, tick);
            let file = c.file.clone();
            s.lru.remove(&old);
            s.lru.insert(tick, key);
            file
        };
        let in_chunk = off % CHUNK;
        // Whole pages: an object's short last page is written padded with the zeros its
        // checksum covers, or reading the page back would stop at the file's end.
        let padded;
        let data = if data.len().is_multiple_of(PAGE) {
            data
        } else {
            padded = [data, &vec![0u8; PAGE - data.len() % PAGE]].concat();
            &padded[..]
        };
        file.write_all_at(data, HEADER + in_chunk)?;
        let mut s = self.state.lock();
        let Some(c) = s.chunks.get_mut(&key) else {
            return Ok(Some(file)); // evicted meanwhile
        };
        let before = c.bytes();
        let first = (in_chunk as usize) / PAGE;
        for (i, page) in data.chunks(PAGE).enumerate() {
            let mut full = [0u8; PAGE];
            full[..page.len()].copy_from_slice(page);
            c.crcs[first + i] = checksum(&full);
            c.set(first + i, true);
        }
        c.write_header()?;
        let after = c.bytes();
        s.bytes = s.bytes + after - before;
        self.counts
            .puts
            .fetch_add(data.len().div_ceil(PAGE) as u64, Ordering::Relaxed);
        Ok(Some(file))
    }

    /// Deletes least recently used chunks until the tier holds at most `limit` bytes.
    fn shrink_to(&self, limit: u64) {
        let mut s = self.state.lock();
        while s.bytes > limit {
            let Some((&tick, &key)) = s.lru.iter().next() else {
                break;
            };
            s.lru.remove(&tick);
            if let Some(c) = s.chunks.remove(&key) {
                s.bytes -= c.bytes();
                let _ = std::fs::remove_file(self.chunk_path(key));
                self.counts.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether the tier holds any chunk of `offset..offset + len` of `object`: a read of a range
    /// it does not would find nothing, and touches no disk.
    pub(crate) fn holds_any(&self, object: ObjectId, offset: u64, len: u64) -> bool {
        if len == 0 {
            return false;
        }
        let s = self.state.lock();
        (offset / CHUNK..=(offset + len - 1) / CHUNK).any(|c| s.chunks.contains_key(&(object, c)))
    }

    /// Fills the pages of `dst` (whole pages: `dst.len()` a multiple of 4 KiB, `offset` page
    /// aligned) found in the tier; returns which were found. A run of present pages in one
    /// chunk is one read.
    pub(crate) fn read(&self, object: ObjectId, offset: u64, dst: &mut [u8]) -> Vec<bool> {
        debug_assert!(offset.is_multiple_of(PAGE as u64) && dst.len().is_multiple_of(PAGE));
        let n = dst.len() / PAGE;
        let mut found = vec![false; n];
        let mut i = 0;
        while i < n {
            let off = offset + (i * PAGE) as u64;
            let key = (object, off / CHUNK);
            let first = ((off % CHUNK) as usize) / PAGE;
            let count = (PAGES - first).min(n - i);
            // What the chunk has of these pages, and their checksums.
            let (file, want) = {
                let mut s = self.state.lock();
                s.tick += 1;
                let tick = s.tick;
                let Some(c) = s.chunks.get_mut(&key) else {
                    i += count;
                    continue;
                };
                let want: Vec<Option<u32>> = (first..first + count)
                    .map(|p| c.has(p).then(|| c.crcs[p]))
                    .collect();
                let old = std::mem::replace(&mut c.tick, tick);
                let file = c.file.clone();
                s.lru.remove(&old);
                s.lru.insert(tick, key);
                (file, want)
            };
            let mut p = 0;
            while p < count {
                if want[p].is_none() {
                    p += 1;
                    continue;
                }
                let mut q = p;
                while q < count && want[q].is_some() {
                    q += 1;
                }
                let at = (i + p) * PAGE;
                let buf = &mut dst[at..(i + q) * PAGE];
                let read =
                    crate::spill::read_direct(&file, buf, HEADER + ((first + p) * PAGE) as u64);
                for k in p..q {
                    let page = &dst[(i + k) * PAGE..(i + k + 1) * PAGE];
                    if read.is_ok() && checksum(page) == want[k].expect("present") {
                        found[i + k] = true;
                    } else {
                        self.forget_page(key, first + k);
                    }
                }
                p = q;
            }
            i += count;
        }
        let hits = found.iter().filter(|&&f| f).count() as u64;
        self.counts.hits.fetch_add(hits, Ordering::Relaxed);
        self.counts
            .misses
            .fetch_add(n as u64 - hits, Ordering::Relaxed);
        found
    }

    /// A page that failed its check: counted, and forgotten.
    fn forget_page(&self, key: ChunkKey, page: usize) {
        self.counts.corrupt.fetch_add(1, Ordering::Relaxed);
        let mut s = self.state.lock();
        if let Some(c) = s.chunks.get_mut(&key) {
            if c.has(page) {
                c.set(page, false);
                let _ = c.write_header();
                s.bytes -= PAGE as u64;
            }
        }
    }
}

/// A page's checksum: CRC-32 (IEEE), by crc32fast (carry-less multiplication where the CPU
/// has it: many GB/s, so checking every page read costs little beside the read).
fn checksum(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

#[cfg(test)]
mod tests {
    use super::checksum;

    #[test]
    fn checksum_check_value() {
        // The standard check value of CRC-32 (IEEE).
        assert_eq!(checksum(b"123456789"), 0xcbf4_3926);
    }
}
