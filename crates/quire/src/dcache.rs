//! The dentry cache (issue 5). Not yet built.
