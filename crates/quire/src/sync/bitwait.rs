//! Waiting on bits of a flag word (in progress).
