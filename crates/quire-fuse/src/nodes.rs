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
//! A node is one *file* (one backing inode: its [`Identity`] and birth time), not one name: a
//! file with two hard links reached by two names is one node with two *aliases* (dentries), as
//! the kernel has one inode for it, and `st_ino` is the same through both names. The node id is
//! the backing inode number where it can be (same device as the root, not 0 or 1, below 2^63),
//! so inode numbers stay stable across remounts as a real file system's do; anything else (files
//! on other devices mounted inside the root, odd numbers) gets a synthetic id above 2^63. The
//! root is node 1 (`FUSE_ROOT_ID`) and is never forgotten.
//!
//! A node id must name one file for as long as the kernel may use it, but the backing file
//! system hands a freed inode number to the next file it makes (ext4 at once), while the kernel
//! learns that the old file is gone only when its FORGET arrives, later. The kernel finds its
//! inode by node id alone (the generation in an entry reply only matters to NFS export): had the
//! new file the old one's id, the kernel would take the old inode for it — sharing its cached
//! attributes and pages with a file that still has open handles, or, if the type differs,
//! marking the old inode bad so its handles fail. So a file whose number is still held by a node
//! for another file (a different type or birth time) gets a synthetic id instead, kept
//! in the table of synthetic ids until the kernel forgets it.
//!
//! Invariant (checked by [`Nodes::check`]): for every node, the kernel's count equals the sum of
//! the references its aliases hold, and a node whose count falls to zero leaves the table.
//!
//! Locks: a shard, then the synthetic table, then a node's state; never the other way.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use quire::dcache::{Dcache, DcacheConfig, DcacheError, Dentry, DentryRef, Identity};
use rustix::fs::{Statx, StatxFlags};

/// The root's node id (`FUSE_ROOT_ID`).
pub const ROOT_ID: u64 = 1;

/// Synthetic node ids start here.
const SYNTHETIC: u64 = 1 << 63;

/// Shards of the table (node ids are spread by a multiplicative hash).
const SHARDS: usize = 64;

/// One shard of the table: node id → node, for ids that are inode numbers.
type Shard = Mutex<HashMap<u64, Arc<Node>>>;

/// Nodes with synthetic ids, and which id each such file has.
#[derive(Default)]
struct Synthetic {
    /// (device, inode number) → the synthetic id of the file that has that number now.
    ids: HashMap<(u64, u64), u64>,
    /// Synthetic id → node.
    nodes: HashMap<u64, Arc<Node>>,
}

impl Synthetic {
    /// The node with a synthetic id that is the file `ident` (born at `born`), if any.
    fn find(&self, key: (u64, u64), ident: &Identity, born: Birth) -> Option<Arc<Node>> {
        let id = self.ids.get(&key)?;
        self.nodes
            .get(id)
            .filter(|n| n.is_file(ident, born))
            .cloned()
    }

    /// A new node for the file `ident`, with the id a listing gave its number if no node has
    /// that id yet, else a new one (which the number names from now on); and whether the
    /// number had no id before.
    fn add(
        &mut self,
        key: (u64, u64),
        ident: Identity,
        born: Birth,
        next: &AtomicU64,
    ) -> (Arc<Node>, bool) {
        let (id, fresh) = match self.ids.get(&key) {
            Some(&id) if !self.nodes.contains_key(&id) => (id, false),
            listed => {
                let fresh = listed.is_none();
                let id = next.fetch_add(1, Ordering::Relaxed);
                self.ids.insert(key, id);
                (id, fresh)
            }
        };
        let node = Node::new(id, ident, born);
        self.nodes.insert(id, node.clone());
        (node, fresh)
    }
}

/// A file's birth time (`statx`'s `stx_btime`), if the file system reports one: with the inode
/// number, it tells a file from a later one given the same number.
pub type Birth = Option<(i64, u32)>;

/// The birth time in `st`, if `statx` filled it in.
pub fn birth_of(st: &Statx) -> Birth {
    (st.stx_mask & StatxFlags::BTIME.bits() != 0)
        .then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec))
}

/// One file the kernel knows by a node id.
pub struct Node {
    /// The node id.
    pub id: u64,
    /// The backing file's identity (device, inode number, type) when it was first looked up.
    pub ident: Identity,
    /// The backing file's birth time, where the file system has one.
    pub born: Birth,
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
    fn new(id: u64, ident: Identity, born: Birth) -> Arc<Node> {
        Arc::new(Node {
            id,
            ident,
            born,
            state: Mutex::new(NodeState::default()),
        })
    }

    /// Whether the file `ident` (born at `born`) is this node's file. Without a birth time on
    /// either side, an inode number of the same type is taken as the same file.
    pub fn is_file(&self, ident: &Identity, born: Birth) -> bool {
        self.ident == *ident && (self.born.is_none() || born.is_none() || self.born == born)
    }

    /// Whether `st` (from `statx` with at least type and inode number) describes this node's
    /// file.
    pub fn is(&self, st: &Statx) -> bool {
        self.is_file(&Identity::from_statx(st), birth_of(st))
    }

    /// Counts one kernel lookup, keeping the dentry reference `d` as the kernel's.
    fn count(&self, d: NonNull<Dentry>) {
        let mut st = self.state.lock();
        st.lookups += 1;
        match st.aliases.iter_mut().find(|a| a.d == d) {
            Some(a) => a.refs += 1,
            None => st.aliases.push(Alias { d, refs: 1 }),
        }
    }

    /// Gives back `n` of the kernel's lookups (clamped to the count), pushing the dentry
    /// references to put onto `put`; true if the count is now zero.
    fn uncount(&self, n: u64, put: &mut Vec<NonNull<Dentry>>) -> bool {
        let mut st = self.state.lock();
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
                put.push(a.d);
            }
            a.refs -= k;
            left -= k;
            if left == 0 {
                break;
            }
        }
        st.aliases.retain(|a| a.refs > 0);
        st.lookups == 0
    }

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
    /// Nodes whose id is their inode number.
    shards: Box<[Shard]>,
    /// Nodes with synthetic ids.
    synthetic: Mutex<Synthetic>,
    /// Entries of `synthetic.ids` for numbers that could be ids themselves (files given a
    /// synthetic id because their number was held): while zero, a free number needs no look
    /// into the synthetic table.
    reissued: AtomicUsize,
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
            synthetic: Mutex::new(Synthetic::default()),
            reissued: AtomicUsize::new(0),
            next_synthetic: AtomicU64::new(SYNTHETIC),
            root: Node::new(ROOT_ID, ident, None),
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

    /// Whether a file on `dev` numbered `ino` may have its number as its node id.
    fn numbered(&self, dev: u64, ino: u64) -> bool {
        dev == self.root_dev && ino > ROOT_ID && ino < SYNTHETIC
    }

    /// The node id the kernel should see as `d_ino` for the file numbered `ino` on device
    /// `dev` in a directory listing: the id its node has or will have.
    pub fn id_for(&self, dev: u64, ino: u64) -> u64 {
        if self.numbered(dev, ino) {
            if self.reissued.load(Ordering::Relaxed) == 0 {
                return ino;
            }
            return self
                .synthetic
                .lock()
                .ids
                .get(&(dev, ino))
                .copied()
                .unwrap_or(ino);
        }
        *self
            .synthetic
            .lock()
            .ids
            .entry((dev, ino))
            .or_insert_with(|| self.next_synthetic.fetch_add(1, Ordering::Relaxed))
    }

    /// The node with id `id`, if the kernel may know it.
    pub fn get(&self, id: u64) -> Option<Arc<Node>> {
        if id == ROOT_ID {
            return Some(self.root.clone());
        }
        if id >= SYNTHETIC {
            return self.synthetic.lock().nodes.get(&id).cloned();
        }
        self.shard(id).lock().get(&id).cloned()
    }

    /// Nodes in the table (the root not counted).
    pub fn len(&self) -> usize {
        let numbered: usize = self.shards.iter().map(|s| s.lock().len()).sum();
        numbered + self.synthetic.lock().nodes.len()
    }

    /// Whether the table holds no node but the root.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Nodes with synthetic ids (files on other devices, and files whose inode number was
    /// still held by a node for a file now gone).
    pub fn synthetic_len(&self) -> usize {
        self.synthetic.lock().nodes.len()
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
        Ok((self.remember(d, &st), st))
    }

    /// Counts one kernel lookup of the file `d` names (`st` its `statx`, for the birth time),
    /// keeping the reference `d` as the kernel's; returns its node.
    pub fn remember(&self, d: DentryRef<'_>, st: &Statx) -> Arc<Node> {
        let ident = d.identity().expect("a positive entry");
        let born = birth_of(st);
        let ptr = d.into_raw();
        let key = (ident.dev, ident.ino);
        if !self.numbered(ident.dev, ident.ino) {
            let mut syn = self.synthetic.lock();
            // Counted under the table's lock, so a concurrent forget cannot drop it in between.
            let node = match syn.find(key, &ident, born) {
                Some(n) => n,
                None => syn.add(key, ident, born, &self.next_synthetic).0,
            };
            node.count(ptr);
            return node;
        }
        let mut shard = self.shard(ident.ino).lock();
        let held = match shard.get(&ident.ino) {
            Some(n) if n.is_file(&ident, born) => {
                n.count(ptr);
                return n.clone();
            }
            Some(_) => true,
            None => false,
        };
        // A synthetic id for this number can only be made under this shard's lock, which is
        // held: if none was counted, there is none for it.
        if held || self.reissued.load(Ordering::Relaxed) > 0 {
            let mut syn = self.synthetic.lock();
            if let Some(n) = syn.find(key, &ident, born) {
                n.count(ptr);
                return n;
            }
            if held {
                // The number still names a node for a file that is gone.
                let (node, fresh) = syn.add(key, ident, born, &self.next_synthetic);
                if fresh {
                    self.reissued.fetch_add(1, Ordering::Relaxed);
                }
                node.count(ptr);
                return node;
            }
        }
        let node = Node::new(ident.ino, ident, born);
        shard.insert(ident.ino, node.clone());
        node.count(ptr);
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
        let mut put: Vec<NonNull<Dentry>> = Vec::new();
        if id >= SYNTHETIC {
            let mut syn = self.synthetic.lock();
            if let Some(node) = syn.nodes.get(&id).cloned() {
                if node.uncount(n, &mut put) {
                    syn.nodes.remove(&id);
                    let key = (node.ident.dev, node.ident.ino);
                    if syn.ids.get(&key) == Some(&id) {
                        syn.ids.remove(&key);
                        if self.numbered(key.0, key.1) {
                            self.reissued.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                }
            }
        } else {
            let mut shard = self.shard(id).lock();
            if let Some(node) = shard.get(&id) {
                if node.uncount(n, &mut put) {
                    shard.remove(&id);
                }
            }
        }
        for d in put {
            // SAFETY: each pointer is one reference the node held, given up here once.
            drop(unsafe { self.dcache.ref_from_raw(d) });
        }
    }

    /// Every node but the root.
    fn all(&self) -> Vec<Arc<Node>> {
        let mut out: Vec<Arc<Node>> = self
            .shards
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect();
        out.extend(self.synthetic.lock().nodes.values().cloned());
        out
    }

    /// Checks the table's invariant: every node's kernel count equals the references its
    /// aliases hold, and is positive; every synthetic id for an inode number names a node.
    /// Returns the first violation.
    pub fn check(&self) -> Result<(), String> {
        fn counts(node: &Node) -> Result<(), String> {
            let st = node.state.lock();
            let refs: u64 = st.aliases.iter().map(|a| a.refs).sum();
            if st.lookups == 0 || refs != st.lookups {
                return Err(format!(
                    "node {}: {} lookups, {refs} references held",
                    node.id, st.lookups
                ));
            }
            Ok(())
        }
        // Each under its table's lock, as forget removes a node whose count fell to zero.
        for shard in self.shards.iter() {
            shard.lock().values().try_for_each(|n| counts(n))?;
        }
        let syn = self.synthetic.lock();
        syn.nodes.values().try_for_each(|n| counts(n))?;
        let mut numbered = 0;
        for (&(dev, ino), id) in &syn.ids {
            if self.numbered(dev, ino) {
                numbered += 1;
                if !syn.nodes.contains_key(id) {
                    return Err(format!("inode {ino}'s synthetic id {id} has no node"));
                }
            }
        }
        let counted = self.reissued.load(Ordering::Relaxed);
        if numbered != counted {
            return Err(format!(
                "{numbered} synthetic ids for inode numbers, {counted} counted"
            ));
        }
        Ok(())
    }

    /// Gives back every kernel lookup (the kernel is gone: unmounted).
    pub fn forget_all(&self) {
        for node in self.all() {
            self.forget(node.id, node.lookups());
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
