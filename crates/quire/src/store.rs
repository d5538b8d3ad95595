//! Backing stores (issue 4, in progress).
