//! Synchronisation primitives that the rest of quire is built from.
//!
//! - [`bitwait`]: lock and wait on single bits of a 64-bit flag word (the folio lock, waiting for
//!   write-back), with a waiters bit so that an uncontended unlock never touches the wait table;
//!   sleeping threads and async waiters (futures, in `bitwait_async`) share one wait table.
//! - [`lockref`]: a spinlock and a reference count in one 64-bit word.
//! - [`rcu`]: the read side of the lock-free lookups (an epoch guard).
//! - `loom` (an internal facade, hidden from this documentation): the atomics every protocol
//!   is written against; `std`'s normally, loom's under `--cfg loom` so that the protocols can
//!   be model-checked.

pub mod bitwait;
mod bitwait_async;
// The loom models' (tests/loom_doorbell.rs); the crate's own otherwise.
#[cfg(any(feature = "bench-internals", loom))]
pub mod doorbell;
#[cfg(not(any(feature = "bench-internals", loom)))]
// Its items are written `pub` for the models.
#[allow(unreachable_pub)]
pub(crate) mod doorbell;
pub mod lockref;
#[doc(hidden)]
pub mod loom;
pub(crate) mod parking;
pub mod rcu;
