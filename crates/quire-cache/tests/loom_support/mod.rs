//! Shared by the loom models (`tests/loom_*.rs`): the builder they all use, and the check that
//! a model explored more than one execution.
//!
//! Why the count is checked: loom's partial-order reduction remembers one last access per
//! object. When a thread loads a word and then stores it (a writer that reads the head under
//! its lock, say), its own load replaces an earlier load by another thread as the object's last
//! access, the store's race with that earlier load goes unnoticed, and the model can finish
//! after one execution with nothing checked (tokio-rs/loom#392 and #166). quire's XArray
//! models once did exactly that. The cure is in how a model is written — the thread
//! that only reads is the spawned one, so that in loom's first execution it runs after the
//! writes, and each of its loads races the last store it read — and this check keeps a model
//! from silently degrading again.

#![allow(dead_code)] // each model file uses part of this

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The builder of every model: `LOOM_MAX_PREEMPTIONS` if set, else a bound of 3.
pub fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b
}

/// Model-checks `f` and returns how many executions loom explored.
pub fn explore(f: impl Fn() + Sync + Send + 'static) -> usize {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    builder().check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    runs.load(Ordering::Relaxed)
}

/// Model-checks `f`, asserting that loom explored at least `min` executions (2 or more: one
/// execution is a plain run, and says nothing about the races the model is for).
#[track_caller]
pub fn model_at_least(min: usize, f: impl Fn() + Sync + Send + 'static) -> usize {
    assert!(min >= 2, "a model must explore more than one execution");
    let runs = explore(f);
    eprintln!("loom: {runs} executions");
    assert!(
        runs >= min,
        "the model explored {runs} execution(s), fewer than {min}: loom missed its races \
         (see tests/loom_support/mod.rs)"
    );
    runs
}

/// Model-checks `f`, asserting that loom explored more than one execution.
#[track_caller]
pub fn model(f: impl Fn() + Sync + Send + 'static) -> usize {
    model_at_least(2, f)
}

/// Whether model-checking `f` fails (for the deliberately broken variants: each must).
pub fn fails(f: impl Fn() + Sync + Send + 'static) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder().check(f))).is_err()
}
