//! A small range server on tokio: clients ask for byte ranges of a file over TCP, the server
//! answers from a quire cache with `read_at_async` — a miss parks the task in the folio's wait
//! queue, not a thread, so a few runtime threads keep many misses in flight.
//!
//! Runs with no arguments: it writes a 64 MiB file in a temporary directory, serves it through
//! a 16 MiB cache (O_DIRECT where the file system allows it), runs 64 clients that each ask
//! for 200 random ranges on one connection, checks every byte, and prints the cache's I/O
//! figures.
//!
//! Protocol: a request is 12 bytes (offset as u64, length as u32, little-endian); the answer
//! is a u32 length then the bytes (fewer at the end of the file). Length 0 closes.

use std::sync::Arc;
use std::time::Instant;

use quire::{CacheConfig, CachedFile, FileStore, IoMode, PageCache};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const FILE: usize = 64 << 20;
const CLIENTS: usize = 64;
const REQUESTS: usize = 200;

fn byte_at(i: usize) -> u8 {
    (i / 4096 * 31 + i % 253) as u8
}

async fn serve(file: Arc<CachedFile>, mut conn: TcpStream) -> std::io::Result<()> {
    let mut req = [0u8; 12];
    let mut buf = Vec::new();
    loop {
        conn.read_exact(&mut req).await?;
        let offset = u64::from_le_bytes(req[..8].try_into().unwrap());
        let len = u32::from_le_bytes(req[8..].try_into().unwrap()) as usize;
        if len == 0 {
            return Ok(());
        }
        buf.resize(len.min(1 << 20), 0);
        let n = file.read_at_async(offset, &mut buf).await?;
        conn.write_all(&(n as u32).to_le_bytes()).await?;
        conn.write_all(&buf[..n]).await?;
    }
}

async fn client(addr: std::net::SocketAddr, seed: u64) -> std::io::Result<u64> {
    let mut conn = TcpStream::connect(addr).await?;
    let mut x = seed | 1;
    let mut got = Vec::new();
    let mut bytes = 0;
    for _ in 0..REQUESTS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = x % FILE as u64;
        let len = (x >> 44) as u32 % (64 << 10) + 1;
        let mut req = [0u8; 12];
        req[..8].copy_from_slice(&offset.to_le_bytes());
        req[8..].copy_from_slice(&len.to_le_bytes());
        conn.write_all(&req).await?;
        let n = conn.read_u32_le().await? as usize;
        got.resize(n, 0);
        conn.read_exact(&mut got).await?;
        let want = (FILE - offset as usize).min(len as usize);
        assert_eq!(n, want, "length of the answer at {offset}");
        for (i, &b) in got.iter().enumerate() {
            assert_eq!(
                b,
                byte_at(offset as usize + i),
                "byte {}",
                offset as usize + i
            );
        }
        bytes += n as u64;
    }
    conn.write_all(&[0u8; 12]).await?;
    Ok(bytes)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ranges.bin");
    std::fs::write(&path, (0..FILE).map(byte_at).collect::<Vec<u8>>())?;

    let cache = PageCache::new(CacheConfig::new(16 << 20))?;
    let file = Arc::new(cache.open(FileStore::open(&path, IoMode::PreferDirect)?)?);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = {
        let file = file.clone();
        tokio::spawn(async move {
            loop {
                let (conn, _) = listener.accept().await?;
                let file = file.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(file, conn).await {
                        eprintln!("connection: {e}");
                    }
                });
            }
            #[allow(unreachable_code)]
            Ok::<(), std::io::Error>(())
        })
    };

    let before = quire::stats::Snapshot::take();
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(client(
                addr,
                0x9e37_79b9_7f4a_7c15 ^ (i as u64 * 0x1000_0001),
            ))
        })
        .collect();
    let mut bytes = 0;
    for c in clients {
        bytes += c.await??;
    }
    let secs = start.elapsed().as_secs_f64();
    server.abort();

    let s = cache.stats();
    println!(
        "{CLIENTS} clients x {REQUESTS} ranges: {:.1} MiB checked in {secs:.2} s",
        bytes as f64 / (1 << 20) as f64
    );
    println!(
        "engine {} ({}): {} reads submitted in {} batches, at most {} in flight",
        s.io_engine.kind, s.io_engine.reason, s.io.submitted, s.io.batches, s.io.max_in_flight
    );
    let v = quire::stats::Snapshot::take().since(&before).vmstat();
    println!("hits {} misses {}", v.page_cache_hits, v.page_cache_misses);
    Ok(())
}
