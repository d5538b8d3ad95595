//! `MemStore` against a plain model (a `Vec<u8>`), and the store contract's edge cases: short
//! reads at the end, holes read as zeros, overflowing offsets, alignment, growth limits, and the
//! synced image.
#![cfg(not(loom))]

use proptest::prelude::*;
use quire::store::{MemStore, Op, Store, StoreError, MAX_OFFSET};

#[derive(Clone, Debug)]
enum Step {
    Write(u64, Vec<u8>),
    Read(u64, usize),
    SetLen(u64),
    Sync,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..20_000, proptest::collection::vec(any::<u8>(), 0..3000))
            .prop_map(|(o, d)| Step::Write(o, d)),
        4 => (0u64..24_000, 0usize..5000).prop_map(|(o, n)| Step::Read(o, n)),
        1 => (0u64..20_000).prop_map(Step::SetLen),
        1 => Just(Step::Sync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn mem_store_matches_model(steps in proptest::collection::vec(step(), 1..60)) {
        let s = MemStore::new();
        let mut model: Vec<u8> = Vec::new();
        let mut synced: Vec<u8> = Vec::new();
        for st in steps {
            match st {
                Step::Write(o, d) => {
                    let n = s.write_at(o, &d).unwrap();
                    prop_assert_eq!(n, d.len());
                    if !d.is_empty() {
                        let end = o as usize + d.len();
                        if model.len() < end { model.resize(end, 0); }
                        model[o as usize..end].copy_from_slice(&d);
                    }
                }
                Step::Read(o, n) => {
                    let mut buf = vec![0xAAu8; n];
                    let got = s.read_full_at(o, &mut buf).unwrap();
                    let avail = model.len().saturating_sub(o as usize).min(n);
                    prop_assert_eq!(got, avail);
                    if got > 0 {
                        prop_assert_eq!(&buf[..got], &model[o as usize..o as usize + got]);
                    }
                    prop_assert!(buf[got..].iter().all(|&b| b == 0xAA), "wrote past the end");
                }
                Step::SetLen(l) => {
                    s.set_len(l).unwrap();
                    model.resize(l as usize, 0);
                }
                Step::Sync => {
                    s.sync().unwrap();
                    synced = model.clone();
                }
            }
            prop_assert_eq!(s.len().unwrap(), model.len() as u64);
        }
        prop_assert_eq!(s.contents(), model);
        prop_assert_eq!(s.synced_contents(), synced);
    }
}

#[test]
fn short_read_at_end_and_zero_past_it() {
    let s = MemStore::from_vec(vec![1, 2, 3, 4, 5]);
    let mut buf = [0u8; 8];
    assert_eq!(s.read_at(3, &mut buf).unwrap(), 2);
    assert_eq!(&buf[..2], &[4, 5]);
    assert_eq!(s.read_at(5, &mut buf).unwrap(), 0);
    assert_eq!(s.read_at(1 << 40, &mut buf).unwrap(), 0);
    // A write past the end leaves a hole of zeros.
    s.write_all_at(8, &[9]).unwrap();
    assert_eq!(s.contents(), vec![1, 2, 3, 4, 5, 0, 0, 0, 9]);
}

#[test]
fn overflowing_offsets_are_errors() {
    let s = MemStore::new();
    let mut buf = [0u8; 16];
    let e = s.read_at(MAX_OFFSET - 8, &mut buf).unwrap_err();
    assert!(
        matches!(e, StoreError::Overflow { op: Op::Read, .. }),
        "{e}"
    );
    let e = s.write_at(u64::MAX, &buf).unwrap_err();
    assert!(matches!(e, StoreError::Overflow { op: Op::Write, .. }));
    assert!(s.set_len(u64::MAX).is_err());
    assert_eq!(s.len().unwrap(), 0, "nothing changed");
}

#[test]
fn growth_past_the_limit_is_an_error_and_loses_nothing() {
    let s = MemStore::new().with_limit(10_000);
    s.write_all_at(0, b"keep").unwrap();
    let e = s.write_at(9_999, &[1, 2]).unwrap_err();
    assert!(
        matches!(e, StoreError::TooLarge { limit: 10_000, .. }),
        "{e}"
    );
    assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
    assert!(s.set_len(1 << 40).is_err());
    assert_eq!(s.contents(), b"keep");
}

#[test]
fn alignment_is_enforced_when_asked() {
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let s = MemStore::new().with_alignment(4096);
    assert_eq!(s.alignment(), 4096);
    let mut p = Page([7; 4096]);
    s.write_all_at(4096, &p.0).unwrap();
    assert!(matches!(
        s.write_at(100, &p.0),
        Err(StoreError::Unaligned { align: 4096, .. })
    ));
    assert!(s.read_at(0, &mut p.0[..100]).is_err());
    assert!(s.read_at(0, &mut p.0[1..]).is_err(), "misaligned buffer");
    assert_eq!(s.read_at(4096, &mut p.0).unwrap(), 4096);
    assert_eq!(p.0[0], 7);
}

#[test]
fn stores_work_through_arc_and_dyn() {
    let s: std::sync::Arc<dyn Store> = std::sync::Arc::new(MemStore::new());
    s.write_all_at(0, b"abc").unwrap();
    let mut b = [0u8; 3];
    assert_eq!(s.read_full_at(0, &mut b).unwrap(), 3);
    assert_eq!(&b, b"abc");
    assert!(!s.is_empty().unwrap());
}
