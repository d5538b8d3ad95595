//! Deliberately broken variants of the protocol, for the loom model (`tests/loom_doorbell.rs`)
//! to catch; each is off unless a model turns it on. Never broken outside loom.

/// The sleeper reads `word` after it sets `asleep`: a ring in between bumps the word
/// before it is read, and the wait is armed with the bumped value.
pub const READ_WORD_LATE: usize = 1;
/// The sleeper does not check `notified` after it sets `asleep`.
pub const NO_RECHECK: usize = 2;

crate::sync::loom::broken_switches!();
