//! The mount's own state: the nodes the kernel holds (a path and a kind each) and the open
//! files, and the path arithmetic over both.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::FileType;
use parking_lot::Mutex;

use crate::ObjectHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    File,
    Dir,
}

impl Kind {
    pub(super) fn file_type(self) -> FileType {
        match self {
            Kind::File => FileType::RegularFile,
            Kind::Dir => FileType::Directory,
        }
    }
}

/// A node the kernel holds: a path relative to the backing's prefix.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) path: String,
    pub(super) kind: Kind,
    pub(super) lookups: u64,
    /// The path no longer names this node (unlinked, renamed over, removed).
    pub(super) gone: bool,
    pub(super) mtime: SystemTime,
}

#[derive(Debug, Default)]
pub(super) struct Nodes {
    pub(super) by_ino: HashMap<u64, Node>,
    pub(super) by_path: HashMap<String, u64>,
}

/// A stable node number for `path` of `kind` (never 0 or 1).
pub(super) fn ino_hash(path: &str, kind: Kind) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    kind.hash(&mut h);
    (h.finish() >> 1).max(2)
}

impl Nodes {
    /// One kernel lookup of `path` as `kind`.
    pub(super) fn remember(&mut self, path: &str, kind: Kind, mtime: SystemTime) -> u64 {
        if path.is_empty() {
            return 1;
        }
        if let Some(&ino) = self.by_path.get(path) {
            if let Some(n) = self.by_ino.get_mut(&ino) {
                if n.kind == kind {
                    n.lookups += 1;
                    n.mtime = mtime;
                    return ino;
                }
                // The name is now of another kind: a new node (the kernel would refuse an
                // inode that changed its type).
                n.gone = true;
            }
            self.by_path.remove(path);
        }
        let mut ino = ino_hash(path, kind);
        while self.by_ino.contains_key(&ino) || ino < 2 {
            ino = ino.wrapping_add(1);
        }
        self.by_ino.insert(
            ino,
            Node {
                path: path.to_string(),
                kind,
                lookups: 1,
                gone: false,
                mtime,
            },
        );
        self.by_path.insert(path.to_string(), ino);
        ino
    }

    /// `path` names nothing any more.
    pub(super) fn unname(&mut self, path: &str) {
        if let Some(ino) = self.by_path.remove(path) {
            if let Some(n) = self.by_ino.get_mut(&ino) {
                n.gone = true;
            }
        }
    }
}

/// An open file: one [`ObjectHandle`], shared by every kernel handle of its path.
pub(super) struct Shared {
    pub(super) handle: ObjectHandle,
    pub(super) path: String,
    /// Kernel handles on it.
    pub(super) users: AtomicUsize,
    /// Unlinked or renamed away: nothing more is uploaded.
    pub(super) detached: AtomicBool,
    /// When it was last written, if it was.
    pub(super) written: Mutex<Option<SystemTime>>,
}

#[derive(Default)]
pub(super) struct Handles {
    pub(super) files: HashMap<u64, Arc<Shared>>,
    /// The attached open file of each path.
    pub(super) by_path: HashMap<String, Arc<Shared>>,
}

impl Handles {
    pub(super) fn detach(&mut self, path: &str) {
        if let Some(s) = self.by_path.remove(path) {
            s.detached.store(true, Ordering::Release);
        }
    }

    /// Whether an attached open file lies under directory `path`.
    pub(super) fn any_under(&self, path: &str) -> bool {
        self.by_path.keys().any(|p| is_under(p, path))
    }
}

/// Whether `p` lies (at any depth) under directory `dir` ("" is the root).
pub(super) fn is_under(p: &str, dir: &str) -> bool {
    if dir.is_empty() {
        return !p.is_empty();
    }
    p.len() > dir.len() + 1 && p.starts_with(dir) && p.as_bytes()[dir.len()] == b'/'
}

/// `p`'s name if it lies directly in directory `dir`.
pub(super) fn child_of<'a>(p: &'a str, dir: &str) -> Option<&'a str> {
    let rest = if dir.is_empty() {
        p
    } else {
        p.strip_prefix(dir)?.strip_prefix('/')?
    };
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

pub(super) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn paths_under_and_children() {
        assert!(is_under("a/b", "a"));
        assert!(is_under("a/b/c", "a"));
        assert!(!is_under("ab/c", "a"));
        assert!(!is_under("a", "a"));
        assert!(is_under("a", ""));
        assert_eq!(child_of("a/b", "a"), Some("b"));
        assert_eq!(child_of("a/b/c", "a"), None);
        assert_eq!(child_of("x", ""), Some("x"));
        assert_eq!(child_of("x/y", ""), None);
        assert_eq!(join("", "x"), "x");
        assert_eq!(join("a", "x"), "a/x");
    }

    #[test]
    fn a_name_that_changes_kind_gets_a_new_node() {
        let mut n = Nodes::default();
        let f = n.remember("a", Kind::File, UNIX_EPOCH);
        assert_eq!(n.remember("a", Kind::File, UNIX_EPOCH), f);
        let d = n.remember("a", Kind::Dir, UNIX_EPOCH);
        assert_ne!(f, d);
        assert!(n.by_ino[&f].gone);
        assert!(d >= 2 && f >= 2);
    }
}
