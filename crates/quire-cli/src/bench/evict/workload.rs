//! What the `evict` cases run, the same in quire and in the kernel child: access traces (Zipf,
//! uniform, loops), Belady's optimal replacement over a trace, and the stores the quire side
//! counts its I/O through.

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use quire::store::{Result as StoreResult, Store};

use super::super::harness::Rng;

/// Draws from a Zipf distribution over `0..n` with exponent `s` (rank 0 the most likely), by
/// binary search in the cumulative distribution: exact, and fast enough for traces built
/// before a run.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    /// A rank in `0..n`.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// A fixed shuffle of `0..n` (Fisher–Yates with `seed`): where each Zipf rank lives in the file,
/// so that the hot pages are spread over it rather than packed at its start.
pub fn permutation(n: usize, seed: u64) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n as u32).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

/// The pages one thread of the `zipf` case reads, in order.
pub fn zipf_trace(pages: usize, len: usize, thread: usize) -> Vec<u32> {
    let zipf = Zipf::new(pages, 0.99);
    let perm = permutation(pages, 0x5A1F);
    let mut rng = Rng::new(0x2121 + thread as u64);
    (0..len).map(|_| perm[zipf.sample(&mut rng)]).collect()
}

/// Uniform random pages of `0..pages` (the `scan` case's hot reader).
pub fn uniform_trace(pages: usize, len: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.below(pages as u64) as u32).collect()
}

/// Threads' traces merged one access at a time in turn: how the `opt` variant sees several
/// threads running side by side.
pub fn interleave(traces: &[&[u32]]) -> Vec<u32> {
    let longest = traces.iter().map(|t| t.len()).max().unwrap_or(0);
    let mut out = Vec::with_capacity(traces.iter().map(|t| t.len()).sum());
    for i in 0..longest {
        for t in traces {
            if let Some(&p) = t.get(i) {
                out.push(p);
            }
        }
    }
    out
}

/// Belady's optimal replacement (evict the page whose next use is furthest away) with room for
/// `capacity` pages: which accesses of `trace` hit. The ceiling no online policy can beat.
pub fn opt_hits(trace: &[u32], capacity: usize) -> Vec<bool> {
    const NEVER: usize = usize::MAX;
    let mut next = vec![NEVER; trace.len()];
    let mut last: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (i, &p) in trace.iter().enumerate().rev() {
        next[i] = last.get(&p).copied().unwrap_or(NEVER);
        last.insert(p, i);
    }
    // Resident pages with their next use; the heap holds (next use, page), stale entries
    // skipped when popped.
    let mut resident: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    let mut heap = BinaryHeap::new();
    let mut hits = Vec::with_capacity(trace.len());
    for (i, &p) in trace.iter().enumerate() {
        let hit = resident.contains_key(&p);
        hits.push(hit);
        if !hit && resident.len() >= capacity {
            while let Some((n, q)) = heap.pop() {
                if resident.get(&q) == Some(&n) {
                    resident.remove(&q);
                    break;
                }
            }
        }
        resident.insert(p, next[i]);
        heap.push((next[i], p));
    }
    hits
}

/// The hit ratio of `opt_hits` over the accesses from `from` on.
pub fn opt_ratio(trace: &[u32], capacity: usize, from: usize) -> f64 {
    let hits = opt_hits(trace, capacity);
    let measured = &hits[from.min(hits.len())..];
    measured.iter().filter(|&&h| h).count() as f64 / measured.len().max(1) as f64
}

/// A store that counts the bytes read from the store below it: quire's misses. For stores
/// without a file descriptor (the trace replay's computed bytes): it does not forward
/// [`Store::io_fd`], so over a `FileStore` every read would go to the I/O engine's threads
/// rather than io_uring — the suite's cases count with `CachedFile::store_bytes_read` instead.
pub struct CountingStore<S> {
    inner: S,
    read: AtomicU64,
}

impl<S> CountingStore<S> {
    pub fn new(inner: S) -> CountingStore<S> {
        CountingStore {
            inner,
            read: AtomicU64::new(0),
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}

impl<S: Store> Store for CountingStore<S> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> StoreResult<()> {
        self.inner.sync()
    }
    fn sync_all(&self) -> StoreResult<()> {
        self.inner.sync_all()
    }
    fn len(&self) -> StoreResult<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> StoreResult<()> {
        self.inner.set_len(len)
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
}

/// A read-only store of `len` bytes that are computed, not stored (each 8-byte word is its own
/// offset): the `shadow-memory` case streams a hundred budgets through the cache without a
/// hundred budgets of disk.
pub struct SyntheticStore {
    len: u64,
}

impl SyntheticStore {
    pub fn new(len: u64) -> SyntheticStore {
        SyntheticStore { len }
    }
}

impl Store for SyntheticStore {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        let n = (self.len.saturating_sub(offset) as usize).min(buf.len());
        // SAFETY: every bit pattern is a valid `u64`, and `align_to_mut` hands out only the
        // aligned middle of the bytes as words.
        let (head, words, tail) = unsafe { buf[..n].align_to_mut::<u64>() };
        let (at, tail) = if head.is_empty() && tail.len() < 8 {
            // The cache's frames are aligned: the whole words as one loop of word stores (the
            // per-word byte copies below were an eighth of a miss-heavy trace replay's time).
            for (k, w) in words.iter_mut().enumerate() {
                *w = (offset + 8 * k as u64).to_le();
            }
            (offset + 8 * words.len() as u64, tail)
        } else {
            // Anywhere else, whole words first, each one 8-byte store (a copy of a run-time
            // length, as for the last word, is a call to memmove).
            let mut words = buf[..n].chunks_exact_mut(8);
            let mut at = offset;
            for w in &mut words {
                w.copy_from_slice(&at.to_le_bytes());
                at += 8;
            }
            (at, words.into_remainder())
        };
        let len = tail.len();
        tail.copy_from_slice(&at.to_le_bytes()[..len]);
        Ok(n)
    }
    fn write_at(&self, offset: u64, _buf: &[u8]) -> StoreResult<usize> {
        Err(quire::store::StoreError::Io {
            op: quire::store::Op::Write,
            offset,
            kind: std::io::ErrorKind::PermissionDenied,
            errno: Some(libc::EROFS),
        })
    }
    fn sync(&self) -> StoreResult<()> {
        Ok(())
    }
    fn len(&self) -> StoreResult<u64> {
        Ok(self.len)
    }
    fn set_len(&self, _len: u64) -> StoreResult<()> {
        self.write_at(0, &[]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opt_matches_a_hand_worked_trace() {
        // Capacity 2: 1 2 3 1 2 3 → OPT keeps 1 and evicts 2 for 3, then 1 hits, 2 misses
        // (evicting 1, used never again), 3 hits.
        let hits = opt_hits(&[1, 2, 3, 1, 2, 3], 2);
        assert_eq!(hits, [false, false, false, true, false, true]);
        // A loop one page larger than the cache: OPT still hits most of it.
        let trace: Vec<u32> = (0..10).flat_map(|_| 0..5u32).collect();
        assert!(opt_ratio(&trace, 4, 5) > 0.7);
    }

    #[test]
    fn zipf_is_skewed_and_deterministic() {
        let a = zipf_trace(1000, 20_000, 0);
        assert_eq!(a, zipf_trace(1000, 20_000, 0));
        let mut counts = vec![0u32; 1000];
        for &p in &a {
            counts[p as usize] += 1;
        }
        counts.sort_unstable_by(|x, y| y.cmp(x));
        let top10: u32 = counts[..10].iter().sum();
        // With s = 0.99 over 1000 items the ten hottest take about 39% of the draws.
        assert!(top10 > 20_000 * 3 / 10 && top10 < 20_000 / 2, "{top10}");
    }

    #[test]
    fn synthetic_store_reads_its_offsets() {
        let s = SyntheticStore::new(100);
        let mut buf = [0u8; 16];
        assert_eq!(s.read_at(88, &mut buf).unwrap(), 12);
        assert_eq!(u64::from_le_bytes(buf[..8].try_into().unwrap()), 88);
        assert!(s.write_at(0, b"x").is_err());
    }

    #[test]
    fn synthetic_store_gives_the_same_bytes_aligned_or_not() {
        // Byte `i` of a read at `offset` is byte `i % 8` of the little-endian word
        // `offset + i - i % 8` (the word that starts there holds its own offset).
        let byte = |offset: u64, i: u64| (offset + i - i % 8).to_le_bytes()[(i % 8) as usize];
        let s = SyntheticStore::new(10_000);
        // Backed by words, so that a start at a multiple of 8 bytes is aligned.
        let mut words = vec![0u64; 600];
        // SAFETY: u8 has no alignment and no invalid values.
        let (_, bytes, _) = unsafe { words.align_to_mut::<u8>() };
        for (start, offset, len) in [(0, 4096, 4096), (0, 8, 4093), (3, 4096, 4000), (8, 5, 100)] {
            let buf = &mut bytes[start..start + len];
            let n = s.read_at(offset, buf).unwrap();
            assert_eq!(n, len.min(10_000 - offset as usize));
            for (i, &b) in buf[..n].iter().enumerate() {
                assert_eq!(
                    b,
                    byte(offset, i as u64),
                    "read of {len} at {offset}, byte {i}"
                );
            }
        }
        // At the end: a short read, aligned and not.
        for start in [0, 3] {
            let buf = &mut bytes[start..start + 32];
            assert_eq!(s.read_at(9_984, buf).unwrap(), 16);
            for (i, &b) in buf[..16].iter().enumerate() {
                assert_eq!(
                    b,
                    byte(9_984, i as u64),
                    "short read from {start}, byte {i}"
                );
            }
        }
    }
}
