//! `FileStore` on real files: buffered I/O, `O_DIRECT` straight into pool frames (skipped with a
//! note where the file system refuses it), short reads at the end, length changes, typed errors.
#![cfg(not(loom))]

use std::path::PathBuf;

use quire::mem::{FramePool, FRAME_SIZE};
use quire::store::{FileStore, IoMode, Op, OpenOptions, Store, StoreError};

/// A fresh path in a directory on a real disk (the target dir), removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> TempPath {
        TempPath::in_dir(env!("CARGO_TARGET_TMPDIR").as_ref(), name)
    }

    fn in_dir(dir: &std::path::Path, name: &str) -> TempPath {
        let p = dir.join(format!("quire-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempPath(p)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn buffered_read_write_len_and_reopen() {
    let t = TempPath::new("buffered");
    let s = FileStore::create(&t.0, IoMode::Buffered).unwrap();
    assert!(!s.is_direct());
    assert_eq!(s.alignment(), 1);
    assert_eq!(s.len().unwrap(), 0);
    s.write_all_at(10, b"hello").unwrap();
    assert_eq!(s.len().unwrap(), 15);
    let mut buf = [0xffu8; 32];
    // Short read at the end: 15 bytes exist.
    assert_eq!(s.read_full_at(0, &mut buf).unwrap(), 15);
    assert_eq!(&buf[..10], &[0; 10], "a hole reads as zeros");
    assert_eq!(&buf[10..15], b"hello");
    assert_eq!(s.read_at(15, &mut buf).unwrap(), 0);
    assert_eq!(s.read_at(1 << 40, &mut buf).unwrap(), 0);
    s.set_len(12).unwrap();
    assert_eq!(s.len().unwrap(), 12);
    s.set_len(20).unwrap();
    s.sync().unwrap();
    drop(s);
    let s = FileStore::open(&t.0, IoMode::Buffered).unwrap();
    let mut buf = [0xffu8; 20];
    assert_eq!(s.read_full_at(0, &mut buf).unwrap(), 20);
    assert_eq!(&buf[10..12], b"he");
    assert_eq!(&buf[12..], &[0; 8], "extended with zeros");
}

#[test]
fn open_errors_are_typed() {
    let t = TempPath::new("missing");
    let e = FileStore::open(&t.0, IoMode::Buffered).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Io {
                op: Op::Open,
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        ),
        "{e}"
    );
    let e = OpenOptions::new()
        .create(true)
        .open("/nonexistent-dir-quire/x")
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn overflow_is_an_error_not_a_syscall() {
    let t = TempPath::new("overflow");
    let s = FileStore::create(&t.0, IoMode::Buffered).unwrap();
    let mut buf = [0u8; 8];
    assert!(matches!(
        s.read_at(u64::MAX - 2, &mut buf),
        Err(StoreError::Overflow { .. })
    ));
    assert!(matches!(
        s.write_at(i64::MAX as u64, &buf),
        Err(StoreError::Overflow { .. })
    ));
}

/// Opens `name` with O_DIRECT in the target dir or /var/tmp; `None` (with a note) if neither
/// file system allows it.
fn direct_store(name: &str) -> Option<(TempPath, FileStore)> {
    for dir in [env!("CARGO_TARGET_TMPDIR"), "/var/tmp"] {
        let t = TempPath::in_dir(dir.as_ref(), name);
        match FileStore::create(&t.0, IoMode::Direct) {
            Ok(s) => return Some((t, s)),
            Err(StoreError::DirectUnsupported { .. }) => continue,
            Err(e) => panic!("opening {} failed: {e}", t.0.display()),
        }
    }
    eprintln!("note: no file system here accepts O_DIRECT; skipping the O_DIRECT checks");
    None
}

#[test]
fn direct_io_into_pool_frames() {
    let Some((_t, s)) = direct_store("direct") else {
        return;
    };
    assert!(s.is_direct());
    assert_eq!(s.alignment(), 4096);
    let pool = FramePool::new(64 * FRAME_SIZE).unwrap();

    // Write two pages from a folio.
    let mut g = pool.alloc(1).unwrap().lock();
    for (i, b) in g.bytes_mut().unwrap().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    s.write_all_at(0, g.bytes()).unwrap();
    drop(g);
    // A length that is not a multiple of the block size: the store is cut back.
    s.set_len(2 * 4096 - 100).unwrap();
    s.sync().unwrap();

    // Read four pages' worth into an order-2 folio: a short read at the end of the file.
    let mut g = pool.alloc_zeroed(2).unwrap().lock();
    let buf = g.bytes_mut().unwrap();
    let n = s.read_full_at(0, buf).unwrap();
    assert_eq!(n, 2 * 4096 - 100);
    assert!(buf[..n]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i % 251) as u8));
    assert!(buf[n..].iter().all(|&b| b == 0));

    // Unaligned requests are refused before any system call.
    for (off, len, start) in [(100u64, 4096usize, 0usize), (0, 100, 0), (0, 4096, 8)] {
        let e = s.read_at(off, &mut buf[start..start + len]).unwrap_err();
        assert!(
            matches!(e, StoreError::Unaligned { align: 4096, .. }),
            "{e}"
        );
    }
    let e = s.write_at(4096, &buf[1..4097]).unwrap_err();
    assert!(matches!(e, StoreError::Unaligned { op: Op::Write, .. }));
}

#[test]
fn prefer_direct_falls_back_where_refused() {
    // /dev/shm is tmpfs: older kernels refuse O_DIRECT there, newer ones accept it.
    let dir = std::path::Path::new("/dev/shm");
    if !dir.is_dir() {
        eprintln!("note: no /dev/shm; skipping");
        return;
    }
    let t = TempPath::in_dir(dir, "prefer");
    match FileStore::create(&t.0, IoMode::Direct) {
        Ok(s) => {
            eprintln!("note: tmpfs accepts O_DIRECT on this kernel");
            assert!(s.is_direct());
        }
        Err(e) => {
            assert!(matches!(e, StoreError::DirectUnsupported { .. }), "{e}");
            let s = FileStore::create(&t.0, IoMode::PreferDirect).unwrap();
            assert!(!s.is_direct(), "fell back to buffered");
            assert_eq!(s.alignment(), 1);
            s.write_all_at(3, b"x").unwrap();
            assert_eq!(s.len().unwrap(), 4);
        }
    }
}

#[test]
fn concurrent_disjoint_writes_then_reads() {
    let t = TempPath::new("concurrent");
    let s = FileStore::create(&t.0, IoMode::Buffered).unwrap();
    std::thread::scope(|sc| {
        for k in 0..4u8 {
            let s = &s;
            sc.spawn(move || {
                for i in 0..64u64 {
                    let off = (i * 4 + k as u64) * 512;
                    s.write_all_at(off, &[k + 1; 512]).unwrap();
                }
            });
        }
    });
    assert_eq!(s.len().unwrap(), 256 * 512);
    let mut buf = vec![0u8; 256 * 512];
    assert_eq!(s.read_full_at(0, &mut buf).unwrap(), buf.len());
    for (j, chunk) in buf.chunks(512).enumerate() {
        assert!(chunk.iter().all(|&b| b == (j % 4) as u8 + 1));
    }
}

#[test]
fn from_fd_wraps_a_descriptor_and_learns_its_mode() {
    use rustix::fs::{openat, Mode, OFlags, CWD};
    let t = TempPath::new("fromfd");
    std::fs::write(&t.0, b"0123456789").unwrap();
    let fd = openat(CWD, &t.0, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let s = FileStore::from_fd(fd, &t.0).unwrap();
    assert!(!s.is_direct());
    assert_eq!(s.alignment(), 1);
    assert_eq!(s.path(), t.0.as_path());
    assert_eq!(s.len().unwrap(), 10);
    s.write_all_at(10, b"ab").unwrap();
    let mut buf = [0u8; 12];
    assert_eq!(s.read_full_at(0, &mut buf).unwrap(), 12);
    assert_eq!(&buf, b"0123456789ab");
    drop(s);

    // Read-only: reads work, writes fail with the system's error.
    let fd = openat(CWD, &t.0, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let s = FileStore::from_fd(fd, &t.0).unwrap();
    assert_eq!(s.read_full_at(0, &mut buf).unwrap(), 12);
    match s.write_at(0, b"x") {
        Err(StoreError::Io {
            op: Op::Write,
            errno: Some(9),
            ..
        }) => {}
        r => panic!("a write through a read-only descriptor: {r:?}"),
    }

    // O_DIRECT where the file system takes it.
    if let Some((d, _)) = direct_store("fromfd-direct") {
        let fd = openat(
            CWD,
            &d.0,
            OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let s = FileStore::from_fd(fd, &d.0).unwrap();
        assert!(s.is_direct());
        assert_eq!(s.alignment(), 4096);
    }
}
