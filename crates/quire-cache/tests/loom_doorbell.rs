//! Loom models of the doorbell (`quire::sync::doorbell`, `sync/doorbell.rs`): a sleeper that
//! arms a futex wait with the word it read and other threads that ring it. The kernel's futex
//! is the doorbell's model under `--cfg loom` (the value compared under a mutex; a wake
//! notifies the condition variable). A ring that is lost leaves the sleeper waiting for ever,
//! which loom reports as a deadlock.
//!
//! Each model also runs against the deliberately broken variants
//! (`quire::sync::doorbell::broken`) and must fail there.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom cargo test -p quire-cache --release --test loom_doorbell`
#![cfg(loom)]

use loom::thread;
use quire::sync::doorbell::{broken, Doorbell};
use std::sync::Arc;

mod loom_support;
use loom_support::{fails, model};

/// The sleeper's loop, as the engine's reaper and a thread's ring run it: take a ring, else
/// prepare to sleep and wait on the word with the value read.
fn park(bell: &Doorbell) {
    loop {
        if bell.take() {
            return;
        }
        let Some(val) = bell.prepare_sleep() else {
            continue;
        };
        bell.futex_wait(val);
        bell.woke();
    }
}

/// One ring from another thread ends one park.
fn one_ring(which: usize) {
    broken::set(which);
    let bell = Arc::new(Doorbell::new());
    let ringer = {
        let bell = bell.clone();
        thread::spawn(move || bell.ring())
    };
    park(&bell);
    ringer.join().unwrap();
}

/// Two rounds: a ring ends the first park, a second ringer started after it ends the second
/// (the sleeper's wait of the first round may still be armed with an older word).
fn two_rounds(which: usize) {
    broken::set(which);
    let bell = Arc::new(Doorbell::new());
    let first = {
        let bell = bell.clone();
        thread::spawn(move || bell.ring())
    };
    park(&bell);
    let second = {
        let bell = bell.clone();
        thread::spawn(move || bell.ring())
    };
    park(&bell);
    first.join().unwrap();
    second.join().unwrap();
}

#[test]
fn a_ring_always_ends_the_park() {
    model(|| one_ring(0));
}

#[test]
fn two_rounds_of_rings_end_both_parks() {
    model(|| two_rounds(0));
}

#[test]
fn reading_the_word_after_marking_asleep_loses_a_ring() {
    assert!(fails(|| one_ring(broken::READ_WORD_LATE)));
}

#[test]
fn not_checking_for_a_ring_after_marking_asleep_loses_it() {
    assert!(fails(|| one_ring(broken::NO_RECHECK)));
}
