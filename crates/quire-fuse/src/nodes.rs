//! The inode table: FUSE node ids and the quire dentries behind them.
//!
//! The kernel names a file by a *node id* it learnt from a reply that counts as a lookup (LOOKUP,
//! CREATE, MKNOD, MKDIR, SYMLINK, LINK, and each entry of READDIRPLUS), and keeps a count of
//! those per node; FORGET gives the count back when the kernel drops its inode. Here every such
//! reply takes one counted reference ([`DentryRef`], a lockref get) on the dentry it was about,
//! kept as a raw pointer in the node, and FORGET puts exactly that many references — so the
//! dentries the kernel can still name stay in the cache, and nothing else is pinned by the
//! kernel.
//!
//! A node is one *file* (one backing inode: its [`Identity`]), not one name: a file with two hard
//! links reached by two names is one node with two *aliases* (dentries), as the kernel has one
//! inode for it, and `st_ino` is the same through both names. The node id is the backing inode
//! number where it can be (same device as the root, not 0 or 1, below 2^63), so inode numbers
//! stay stable across remounts as a real file system's do; anything else (files on other
//! devices mounted inside the root, odd numbers) gets a synthetic id above 2^63. The root is
//! node 1 (`FUSE_ROOT_ID`) and is never forgotten.
//!
//! Invariant (checked by [`Nodes::check`]): for every node, the kernel's count equals the sum of
//! the references its aliases hold, and a node whose count falls to zero leaves the table.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use quire::dcache::{Dcache, DcacheConfig, DcacheError, Dentry, DentryRef, Identity};
use rustix::fs::Statx;

/// The root's node id (`FUSE_ROOT_ID`).
pub const ROOT_ID: u64 = 1;

/// Synthetic node ids start here.
const SYNTHETIC: u64 = 1 << 63;

/// Shards of the table (node ids are spread by a multiplicative hash).
const SHARDS: usize = 64;

/// One shard of the table: node id → node.
type Shard = Mutex<HashMap<u64, Arc<Node>>>;

/// One file the kernel knows by a node id.
pub struct Node {
    /// The node id.
    pub id: u64,
    /// The backing file's identity (device, inode number, type) when it was first looked up.
    pub ident: Identity,
    state: Mutex<NodeState>,
}

#[derive(Default)]
struct NodeState {
    /// The kernel's lookup count.
    lookups: u64,
    /// Dentries this node was reached by, each with the references held on it for the kernel.
    aliases: Vec<Alias>,
}

struct Alias {
    d: NonNull<Dentry>,
    refs: u64,
}

// SAFETY: an alias pointer is a counted reference to a dentry (given up with `into_raw`), which is
// only turned back into a `DentryRef` by the table that owns it; dentries are `Sync`.
unsafe impl Send for Alias {}

impl Node {
    /// The kernel's lookup count now.
    pub fn lookups(&self) -> u64 {
        self.state.lock().lookups
    }

    /// References held on this node's dentries for the kernel.
    pub fn alias_refs(&self) -> u64 {
        self.state.lock().aliases.iter().map(|a| a.refs).sum()
    }

    /// Whether any of this node's names is still in its directory (false once every name it
    /// was reached by has been unlinked or renamed over).
    pub fn has_name(&self) -> bool {
        // SAFETY: each alias pointer is kept alive by the references the alias holds.
        self.state
            .lock()
            .aliases
            .iter()
            .any(|a| unsafe { a.d.as_ref() }.is_hashed())
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("ident", &self.ident)
            .field("lookups", &self.lookups())
            .finish()
    }
}

/// The table: node id → [`Node`], over one [`Dcache`].
pub struct Nodes {
    shards: Box<[Shard]>,
    /// (device, inode) → synthetic id, for files whose inode number cannot be the id.
    synthetic: Mutex<HashMap<(u64, u64), u64>>,
    next_synthetic: AtomicU64,
    root: Arc<Node>,
    root_dev: u64,
    /// Declared last: dropped after the nodes' references were given back (see `Drop`).
    dcache: Dcache,
}

impl Nodes {
    /// A table over the directory `root`, whose dentry cache is made with `config`.
    pub fn new(root: &Path, config: DcacheConfig) -> Result<Nodes, DcacheError> {
        let dcache = Dcache::new(root, config)?;
        let ident = dcache.root().identity().expect("the root exists");
        Ok(Nodes {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            synthetic: Mutex::new(HashMap::new()),
            next_synthetic: AtomicU64::new(SYNTHETIC),
            root: Arc::new(Node {
                id: ROOT_ID,
                ident,
                state: Mutex::new(NodeState::default()),
            }),
            root_dev: ident.dev,
            dcache,
        })
    }

    /// The dentry cache.
    pub fn dcache(&self) -> &Dcache {
        &self.dcache
    }

    /// The root node.
    pub fn root(&self) -> Arc<Node> {
        self.root.clone()
    }

    fn shard(&self, id: u64) -> &Shard {
        let h = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    /// The node id for a file.
    fn id_of(&self, ident: &Identity) -> u64 {
        if ident.dev == self.root_dev && ident.ino > ROOT_ID && ident.ino < SYNTHETIC {
            return ident.ino;
        }
        *self
            .synthetic
            .lock()
            .entry((ident.dev, ident.ino))
            .or_insert_with(|| self.next_synthetic.fetch_add(1, Ordering::Relaxed))
    }

    /// The node id of the file with inode number `ino` on device `dev` (for directory
    /// entries' `d_ino`).
    pub fn id_for(&self, dev: u64, ino: u64) -> u64 {
        self.id_of(&Identity {
            dev,
            ino,
            kind: quire::dcache::FileKind::Other,
        })
    }

    /// The node with id `id`, if the kernel may know it.
    pub fn get(&self, id: u64) -> Option<Arc<Node>> {
        if id == ROOT_ID {
            return Some(self.root.clone());
        }
        self.shard(id).lock().get(&id).cloned()
    }

    /// Nodes in the table (the root not counted).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether the table holds no node but the root.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A reference to a dentry of `node` — one still in its directory if there is one — or
    /// `None` if the node has none (the root always has its own).
    pub fn dentry(&self, node: &Node) -> Option<DentryRef<'_>> {
        if node.id == ROOT_ID {
            return Some(self.dcache.root());
        }
        let st = node.state.lock();
        // SAFETY: each alias pointer is kept alive by the references the alias holds.
        let a = st
            .aliases
            .iter()
            .find(|a| unsafe { a.d.as_ref() }.is_hashed())
            .or_else(|| st.aliases.first())?;
        // SAFETY: `a.d` came from `into_raw` on a reference of this cache, and the alias still
        // holds it; we take it back only to take another reference, then give it up again.
        let held = unsafe { self.dcache.ref_from_raw(a.d) };
        let out = held.dget();
        let _ = held.into_raw();
        Some(out)
    }

    /// Looks `name` up in the directory `parent` (with a fresh `statx`), and counts one kernel
    /// lookup on the node it names.
    pub fn lookup(&self, parent: &Node, name: &OsStr) -> Result<(Arc<Node>, Statx), DcacheError> {
        let dir = self
            .dentry(parent)
            .ok_or_else(|| DcacheError::NotFound { path: name.into() })?;
        let (d, st) = self.dcache.lookup_stat(&dir, name)?;
        Ok((self.remember(d), st))
    }

    /// Counts one kernel lookup of the file `d` names, keeping the reference `d` as the
    /// kernel's; returns its node.
    pub fn remember(&self, d: DentryRef<'_>) -> Arc<Node> {
        let ident = d.identity().expect("a positive entry");
        let id = self.id_of(&ident);
        let node = {
            let mut shard = self.shard(id).lock();
            let node = shard
                .entry(id)
                .or_insert_with(|| {
                    Arc::new(Node {
                        id,
                        ident,
                        state: Mutex::new(NodeState::default()),
                    })
                })
                .clone();
            // Under the shard lock, so a concurrent forget cannot drop the node in between.
            let mut st = node.state.lock();
            st.lookups += 1;
            let ptr = d.into_raw();
            match st.aliases.iter_mut().find(|a| a.d == ptr) {
                Some(a) => a.refs += 1,
                None => st.aliases.push(Alias { d: ptr, refs: 1 }),
            }
            drop(st);
            node
        };
        node
    }

    /// Gives back `n` of the kernel's lookups of node `id` (FORGET): puts exactly `n` of the
    /// references held for it (on names that were removed first), and drops the node when its
    /// count reaches zero. Unknown ids and the root are ignored; a count larger than the node's
    /// is clamped (the kernel never sends one).
    pub fn forget(&self, id: u64, n: u64) {
        if id == ROOT_ID || n == 0 {
            return;
        }
        let mut drop_refs: Vec<NonNull<Dentry>> = Vec::new();
        {
            let mut shard = self.shard(id).lock();
            let Some(node) = shard.get(&id) else {
                return;
            };
            let mut st = node.state.lock();
            let n = n.min(st.lookups);
            st.lookups -= n;
            let mut left = n;
            // Removed names first: the kernel is done with them sooner.
            st.aliases.sort_by_key(|a| {
                // SAFETY: each alias pointer is kept alive by its references.
                unsafe { a.d.as_ref() }.is_hashed()
            });
            for a in st.aliases.iter_mut() {
                let k = a.refs.min(left);
                for _ in 0..k {
                    drop_refs.push(a.d);
                }
                a.refs -= k;
                left -= k;
                if left == 0 {
                    break;
                }
            }
            st.aliases.retain(|a| a.refs > 0);
            let gone = st.lookups == 0;
            drop(st);
            if gone {
                let node = shard.remove(&id).expect("present");
                if node.id >= SYNTHETIC {
                    self.synthetic
                        .lock()
                        .remove(&(node.ident.dev, node.ident.ino));
                }
            }
        }
        for d in drop_refs {
            // SAFETY: each pointer is one reference the node held, given up here once.
            drop(unsafe { self.dcache.ref_from_raw(d) });
        }
    }

    /// Checks the table's invariant: every node's kernel count equals the references its
    /// aliases hold, and is positive. Returns the first violation.
    pub fn check(&self) -> Result<(), String> {
        for shard in self.shards.iter() {
            for (id, node) in shard.lock().iter() {
                let st = node.state.lock();
                let refs: u64 = st.aliases.iter().map(|a| a.refs).sum();
                if st.lookups == 0 || refs != st.lookups {
                    return Err(format!(
                        "node {id}: {} lookups, {refs} references held",
                        st.lookups
                    ));
                }
            }
        }
        Ok(())
    }

    /// Gives back every kernel lookup (the kernel is gone: unmounted).
    pub fn forget_all(&self) {
        let ids: Vec<(u64, u64)> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .values()
                    .map(|n| (n.id, n.lookups()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (id, n) in ids {
            self.forget(id, n);
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.forget_all();
    }
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes")
            .field("nodes", &self.len())
            .field("dcache", &self.dcache)
            .finish()
    }
}
