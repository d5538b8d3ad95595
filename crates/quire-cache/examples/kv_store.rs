//! A small key-value store on quire: an append-only log in one cached file and an index in
//! memory, with `fsync` for durability and recovery from the log after reopening.
//!
//! Each record is a 16-byte header — key length, value length (`u32::MAX` for a deletion) and a
//! checksum of the rest — followed by the key and the value. `put` and `delete` append a
//! record at the end of the log through the page cache (`write_all_at`) and point the index at
//! it; `get` reads the value back from the cache (`read_exact_at`); `sync` makes everything
//! appended so far durable (`fsync`, which also reports a failed write-back once).
//!
//! The demonstration appends 10,500 records (puts, overwrites, deletions), syncs, then
//! appends half a record as a crash in the middle of an append would leave it, and drops
//! everything: the store, the file handle and the cache. It opens the file again in a new
//! cache, rebuilds the index by scanning the log (through a `FileCursor` under a
//! `BufReader`), cuts the torn record off, and checks every key against a model.
//!
//! `cargo run --release -p quire-cache --example kv_store`

use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use quire::stats::Snapshot;
use quire::{CacheConfig, CachedFile, IoMode, OpenOptions, PageCache};

type Error = Box<dyn std::error::Error>;

const HEADER: usize = 16;
const TOMBSTONE: u32 = u32::MAX;

/// FNV-1a over the lengths, the key and the value.
fn checksum(key: &[u8], value: Option<&[u8]>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let vlen = value.map_or(TOMBSTONE, |v| v.len() as u32);
    let parts: [&[u8]; 4] = [
        &(key.len() as u32).to_le_bytes(),
        &vlen.to_le_bytes(),
        key,
        value.unwrap_or_default(),
    ];
    for b in parts.iter().flat_map(|p| p.iter()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A record as written to the log.
fn encode(key: &[u8], value: Option<&[u8]>) -> Vec<u8> {
    let vlen = value.map_or(TOMBSTONE, |v| v.len() as u32);
    let mut rec = Vec::with_capacity(HEADER + key.len() + value.map_or(0, <[u8]>::len));
    rec.extend_from_slice(&(key.len() as u32).to_le_bytes());
    rec.extend_from_slice(&vlen.to_le_bytes());
    rec.extend_from_slice(&checksum(key, value).to_le_bytes());
    rec.extend_from_slice(key);
    rec.extend_from_slice(value.unwrap_or_default());
    rec
}

/// Where a live value lies in the log.
#[derive(Clone, Copy)]
struct Slot {
    offset: u64,
    len: u32,
}

/// What opening found in the log.
#[derive(Debug)]
struct Recovery {
    records: u64,
    live_keys: usize,
    torn_bytes: u64,
}

struct KvStore {
    log: CachedFile,
    index: HashMap<Vec<u8>, Slot>,
    end: u64,
}

impl KvStore {
    /// Opens (or creates) the log at `path` in `cache` and rebuilds the index from it. A torn
    /// or corrupt record ends the log: it and anything after it are cut off, durably.
    fn open(cache: &PageCache, path: &Path) -> Result<(KvStore, Recovery), Error> {
        let store = OpenOptions::new()
            .create(true)
            .mode(IoMode::PreferDirect)
            .open(path)?;
        let log = cache.open(store)?;
        let mut index = HashMap::new();
        let mut records = 0;
        let mut end = 0u64;
        {
            let mut r = BufReader::with_capacity(256 << 10, log.cursor());
            let mut header = [0u8; HEADER];
            loop {
                match r.read_exact(&mut header) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e.into()),
                }
                let klen = u32::from_le_bytes(header[0..4].try_into()?) as usize;
                let vlen = u32::from_le_bytes(header[4..8].try_into()?);
                let sum = u64::from_le_bytes(header[8..16].try_into()?);
                let body = klen + if vlen == TOMBSTONE { 0 } else { vlen as usize };
                if end + (HEADER + body) as u64 > log.len() {
                    break; // the body was never written completely
                }
                let mut kv = vec![0u8; body];
                r.read_exact(&mut kv)?;
                let (key, value) = kv.split_at(klen);
                let value = (vlen != TOMBSTONE).then_some(value);
                if checksum(key, value) != sum {
                    break; // a torn or corrupt record
                }
                match value {
                    Some(v) => {
                        let offset = end + (HEADER + klen) as u64;
                        index.insert(
                            key.to_vec(),
                            Slot {
                                offset,
                                len: v.len() as u32,
                            },
                        );
                    }
                    None => {
                        index.remove(key);
                    }
                }
                records += 1;
                end += (HEADER + body) as u64;
            }
        }
        let torn_bytes = log.len() - end;
        if torn_bytes > 0 {
            log.set_len(end)?;
            log.fsync()?;
        }
        let rec = Recovery {
            records,
            live_keys: index.len(),
            torn_bytes,
        };
        Ok((KvStore { log, index, end }, rec))
    }

    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<u64, Error> {
        if key.len() >= TOMBSTONE as usize || value.is_some_and(|v| v.len() >= TOMBSTONE as usize) {
            return Err("key or value too long".into());
        }
        let rec = encode(key, value);
        let at = self.end;
        self.log.write_all_at(at, &rec)?;
        self.end += rec.len() as u64;
        Ok(at)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        let at = self.append(key, Some(value))?;
        let slot = Slot {
            offset: at + (HEADER + key.len()) as u64,
            len: value.len() as u32,
        };
        self.index.insert(key.to_vec(), slot);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        if !self.index.contains_key(key) {
            return Ok(false);
        }
        self.append(key, None)?;
        self.index.remove(key);
        Ok(true)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let Some(slot) = self.index.get(key) else {
            return Ok(None);
        };
        let mut v = vec![0u8; slot.len as usize];
        self.log.read_exact_at(slot.offset, &mut v)?;
        Ok(Some(v))
    }

    /// Makes every record appended so far durable.
    fn sync(&self) -> Result<(), Error> {
        Ok(self.log.fsync()?)
    }
}

/// The value the demonstration stores under key `k` in round `round`.
fn value_of(k: u64, round: u64) -> Vec<u8> {
    let len = 20 + (k * 7 + round * 13) % 300;
    (0..len).map(|i| (k ^ round ^ i) as u8).collect()
}

fn key_of(k: u64) -> Vec<u8> {
    format!("user:{k:06}").into_bytes()
}

/// Every key of `model` must read back its value, and nothing else may be there.
fn verify(kv: &KvStore, model: &BTreeMap<Vec<u8>, Vec<u8>>, keys: u64) -> Result<(), Error> {
    for k in 0..keys {
        let key = key_of(k);
        if kv.get(&key)? != model.get(&key).cloned() {
            return Err(format!("key {} reads back wrong", String::from_utf8_lossy(&key)).into());
        }
    }
    if kv.index.len() != model.len() {
        return Err(format!("{} keys indexed, {} expected", kv.index.len(), model.len()).into());
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    const KEYS: u64 = 5_000;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("kv.log");
    let mut model = BTreeMap::new();

    // Session 1: write, overwrite and delete; sync; then crash in the middle of an append.
    let log_len;
    {
        let cache = PageCache::new(CacheConfig::new(16 << 20))?;
        let (mut kv, rec) = KvStore::open(&cache, &path)?;
        println!("session 1: opened an empty log ({rec:?})");
        let mut ops = 0;
        for round in 0..3 {
            for k in 0..KEYS {
                let key = key_of(k);
                if round == 2 && k % 5 == 0 {
                    kv.delete(&key)?;
                    model.remove(&key);
                } else if round == 0 || k % 2 == 0 {
                    let v = value_of(k, round);
                    kv.put(&key, &v)?;
                    model.insert(key, v);
                } else {
                    continue;
                }
                ops += 1;
            }
        }
        kv.sync()?;
        log_len = kv.end;
        verify(&kv, &model, KEYS)?;
        println!(
            "session 1: {ops} records appended, {} live keys, log {} KiB, synced",
            model.len(),
            log_len >> 10
        );
        // The crash: half a record reaches the file, and nothing else of this session runs.
        let torn = encode(b"user:torn", Some(&[0xEE; 200]));
        kv.log.write_all_at(kv.end, &torn[..torn.len() / 2])?;
        kv.log.flush()?;
        println!(
            "session 1: crashed half-way through an append ({} of {} bytes written)",
            torn.len() / 2,
            torn.len()
        );
    } // store, handle and cache dropped: nothing of session 1 is left in memory

    let on_disk = std::fs::metadata(&path)?.len();
    println!(
        "\non disk: {on_disk} bytes ({} past the last whole record)",
        on_disk - log_len
    );

    // Session 2: a new cache; the index is rebuilt from the log alone.
    let before = Snapshot::take();
    let cache = PageCache::new(CacheConfig::new(16 << 20))?;
    let (mut kv, rec) = KvStore::open(&cache, &path)?;
    println!(
        "session 2: recovered {} records, {} live keys, cut {} torn bytes",
        rec.records, rec.live_keys, rec.torn_bytes
    );
    if rec.torn_bytes != on_disk - log_len || kv.end != log_len {
        return Err("recovery did not cut the log back to its last whole record".into());
    }
    verify(&kv, &model, KEYS)?;
    println!("session 2: all {KEYS} keys read back as they were synced");

    // The store goes on from there.
    kv.put(b"user:after", b"the log continues after the cut")?;
    kv.sync()?;
    drop(kv);
    let (kv, rec) = KvStore::open(&cache, &path)?;
    if rec.torn_bytes != 0
        || kv.get(b"user:after")?.as_deref() != Some(&b"the log continues after the cut"[..])
    {
        return Err("the record appended after recovery was lost".into());
    }
    println!(
        "session 3: {} records, {} live keys, nothing torn: ok",
        rec.records, rec.live_keys
    );
    let s = Snapshot::take().since(&before).vmstat();
    println!(
        "\nsessions 2 and 3: {} misses reading the log ({} more folios read ahead), {} folios written back, {} frames cached now",
        s.page_cache_misses,
        s.readahead,
        s.writeback,
        cache.stats().cached_frames
    );
    Ok(())
}
