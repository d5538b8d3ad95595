//! The XArray (issue 3). Not yet built.
