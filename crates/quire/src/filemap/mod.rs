//! The page cache proper: files, their index of folios, read/write, readahead and write-back
//! (issue 4, in progress). Built so far: write-back error tracking ([`errseq`]) and the
//! readahead window logic ([`readahead`]).

pub mod errseq;
pub mod readahead;
