//! The mount as a POSIX file system, acting for other users the way a conformance suite does:
//! each test runs a scenario — scripts of calls made by root and by unprivileged users, each in
//! a child process that dropped to that user — once on a `quire mount --allow-other` and once
//! on a plain directory of the backing file system, and requires the same outcome for every
//! call (the kernel's own answer is the expectation), plus a few outcomes named outright so
//! that no scenario passes vacuously. Groups: device nodes, the caller's owner and group on
//! everything it creates, time stamps of unlink and rename, the set-group-id bit on chmod and
//! the set-id bits on writes, permissions decided at open, moving a directory, and the
//! permission checks between users. Last, a bounded stress: a directory of the source swapped
//! for a symbolic link to a directory outside, over and over, while calls go through the mount
//! — nothing outside is ever touched.
//!
//! Switching users needs root: without it every test prints `skipped: why`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::as_user::{self, expect, Scenario, User};
use common::{skip, Mount, Scratch};

child_main!();

/// quire's own mount.
const KIND: &[&str] = &[];

include!("common/posix_cases.rs");
