//! Memory: the frame pool, the buddy allocator and folio descriptors (issue 4, in progress).
