//! `FaultyStore`: injected errors and short transfers on chosen ranges, one-shot and persistent,
//! for reads, writes and syncs, with counts; callers that loop (`read_full_at`, `write_all_at`)
//! see exactly the injected behaviour.
#![cfg(not(loom))]

use std::io::ErrorKind;

use quire::store::{Fault, FaultyStore, MemStore, Op, Store, StoreError};

fn store(len: usize) -> FaultyStore<MemStore> {
    let data: Vec<u8> = (0..len).map(|i| (i % 256) as u8).collect();
    FaultyStore::new(MemStore::from_vec(data))
}

#[test]
fn one_shot_read_error_in_range() {
    let s = store(16384);
    let id = s.add(Fault::read_error(4096..8192));
    let mut buf = vec![0u8; 4096];
    // Outside the range: untouched.
    assert_eq!(s.read_at(0, &mut buf).unwrap(), 4096);
    assert_eq!(s.read_at(8192, &mut buf).unwrap(), 4096);
    assert_eq!(s.fired(id), 0);
    // Inside: fails once, with the offset.
    let e = s.read_at(5000, &mut buf).unwrap_err();
    assert_eq!(
        e,
        StoreError::Io {
            op: Op::Read,
            offset: 5000,
            kind: ErrorKind::Other,
            errno: Some(5)
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "read at offset 5000 failed: {}",
            std::io::Error::from_raw_os_error(5)
        )
    );
    assert_eq!(s.fired(id), 1);
    assert_eq!(s.injected(), 1);
    // Then the range reads fine.
    assert_eq!(s.read_at(5000, &mut buf).unwrap(), 4096);
    assert_eq!(buf[0], (5000 % 256) as u8);
    assert_eq!(s.fired(id), 1);
}

#[test]
fn request_spanning_a_bad_range_is_cut_then_fails() {
    let s = store(16384);
    s.add(Fault::read_error(6000..7000).persistent());
    let mut buf = vec![0u8; 4096];
    // Begins before the range: the bytes before it come back (short), no fault fired.
    assert_eq!(s.read_at(4096, &mut buf).unwrap(), 6000 - 4096);
    assert_eq!(s.injected(), 0);
    // A looping caller runs into the error.
    let e = s.read_full_at(4096, &mut buf).unwrap_err();
    assert_eq!(e.offset(), 6000);
    assert_eq!(s.injected(), 1);
    // Persistent: again and again.
    assert!(s.read_at(6500, &mut buf[..10]).is_err());
    assert!(s.read_at(6500, &mut buf[..10]).is_err());
    assert_eq!(s.injected(), 3);
    // But not on writes.
    s.write_all_at(6000, &[1, 2, 3]).unwrap();
}

#[test]
fn short_reads_are_recovered_by_looping_callers() {
    let s = store(10_000);
    let id = s.add(Fault::short_read(0..10_000, 7).times(3));
    let mut buf = vec![0u8; 100];
    assert_eq!(s.read_at(50, &mut buf).unwrap(), 7);
    assert_eq!(s.fired(id), 1);
    let n = s.read_full_at(50, &mut buf).unwrap();
    assert_eq!(n, 100);
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((50 + i) % 256) as u8));
    assert_eq!(s.fired(id), 3, "used up");
    assert_eq!(s.read_at(50, &mut buf).unwrap(), 100);
}

#[test]
fn short_read_of_zero_looks_like_end_of_file() {
    let s = store(10_000);
    s.add(Fault::short_read(100..200, 0));
    let mut buf = vec![0u8; 300];
    assert_eq!(
        s.read_full_at(0, &mut buf).unwrap(),
        100,
        "the caller sees a premature end"
    );
    assert_eq!(s.read_full_at(0, &mut buf).unwrap(), 300, "one-shot");
}

#[test]
fn write_faults_error_and_short_and_zero() {
    let s = store(0);
    let e = s.add(Fault::write_error(0..4096));
    let err = s.write_all_at(0, &[9; 100]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Other);
    assert!(matches!(
        err,
        StoreError::Io {
            op: Op::Write,
            offset: 0,
            ..
        }
    ));
    assert_eq!(s.inner().len().unwrap(), 0, "nothing written");
    assert_eq!(s.fired(e), 1);

    s.add(Fault::short_write(0..100, 10));
    assert_eq!(s.write_at(0, &[1; 50]).unwrap(), 10);
    assert_eq!(s.inner().contents(), vec![1; 10]);

    s.add(Fault::short_write(0..100, 0).persistent());
    let err = s.write_all_at(0, &[2; 50]).unwrap_err();
    assert_eq!(err, StoreError::WriteZero { offset: 0 });
    s.clear();
    s.write_all_at(0, &[3; 50]).unwrap();
    assert_eq!(s.inner().contents(), vec![3; 50]);
}

#[test]
fn both_directions_and_custom_kind() {
    let s = store(8192);
    s.add(
        Fault::read_error(0..4096)
            .both()
            .times(2)
            .with_error(ErrorKind::PermissionDenied),
    );
    let mut b = [0u8; 8];
    assert_eq!(
        s.read_at(0, &mut b).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(
        s.write_at(8, &b).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert!(s.read_at(0, &mut b).is_ok());
    assert_eq!(s.injected(), 2);
}

#[test]
fn sync_errors_and_removal() {
    let s = store(10);
    let id = s.add(Fault::sync_error().times(2));
    assert!(matches!(s.sync(), Err(StoreError::Io { op: Op::Sync, .. })));
    assert!(s.remove(id));
    assert!(!s.remove(id));
    assert_eq!(s.fired(id), 1, "counts survive removal");
    s.sync().unwrap();
    assert_eq!(
        s.inner().sync_count(),
        1,
        "only the real sync reached the store"
    );
}

#[test]
fn aligned_inner_store_gets_aligned_cuts() {
    #[repr(align(4096))]
    struct Pages([u8; 4 * 4096]);
    let s = FaultyStore::new(MemStore::from_vec(vec![5; 4 * 4096]).with_alignment(4096));
    assert_eq!(s.alignment(), 4096);
    // The bad range starts mid-page: the cut is rounded down to a page boundary.
    s.add(Fault::read_error(2 * 4096 + 100..3 * 4096));
    let mut p = Pages([0; 4 * 4096]);
    assert_eq!(s.read_at(0, &mut p.0).unwrap(), 2 * 4096);
    // From the page containing the bad bytes, it fires.
    assert!(s.read_at(2 * 4096, &mut p.0[..4096]).is_err());
    // Short faults round down too.
    s.add(Fault::short_read(0..4 * 4096, 5000));
    assert_eq!(s.read_at(0, &mut p.0).unwrap(), 4096);
}
