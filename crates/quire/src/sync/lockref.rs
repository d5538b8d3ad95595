//! Lock and reference count in one word (in progress).
