//! Events at the slow paths, for the `tracing` feature: an allocation that reclaims memory
//! itself (direct reclaim) or gives up, a write-back error recorded for a file, a writer
//! throttled at the dirty limit or refused there. They go to the [`tracing`] subscriber the
//! program installs, with the module as the target (`quire::vmscan::reclaim`,
//! `quire::filemap::mapping`, `quire::filemap::writeback`), at `debug` for the waits and
//! `warn` for failures.
//!
//! Without the feature the macro below expands to closures that are never called (so that the
//! values still type-check and count as used): nothing is evaluated and nothing is left in
//! the code. The counters of [`crate::stats`] count the same events either way.
//!
//! [`tracing`]: https://docs.rs/tracing

/// `slow_path!(level, "message", field = value, ...)`: an event at `level` (`debug`, `warn`,
/// ...) whose fields are recorded with their `Display` form.
#[cfg(feature = "tracing")]
macro_rules! slow_path {
    ($level:ident, $msg:literal $(, $field:ident = $value:expr)* $(,)?) => {
        ::tracing::$level!($($field = %$value,)* $msg)
    };
}

#[cfg(not(feature = "tracing"))]
macro_rules! slow_path {
    ($level:ident, $msg:literal $(, $field:ident = $value:expr)* $(,)?) => {{
        $(let _ = || {
            let _ = &$value;
        };)*
    }};
}

pub(crate) use slow_path;
