//! Suite `lockref` (in progress).
use super::{Bench, Suite};

pub const SUITE: Suite = Suite {
    name: "lockref",
    about: "(in progress)",
    steps: |_| 0,
    run: |_b: &mut Bench| Ok(()),
};
