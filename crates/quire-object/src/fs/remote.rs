//! What the mount asks the store: HEADs, LISTs, DELETEs and COPYs, and what a name is.

use std::collections::BTreeMap;
use std::time::SystemTime;

use futures::StreamExt as _;
use object_store::{ObjectMeta, ObjectStoreExt as _};
use quire_fuse::serve::Res;

use crate::counters::Request as Req;

use super::nodes::{child_of, ino_hash, is_under, join, Kind};
use super::{store_err, ListEntry, Listing, ObjectFs};

/// What a name is, as far as the store and this mount know.
#[derive(Clone, Copy, Debug)]
pub(super) struct Found {
    pub(super) kind: Kind,
    pub(super) size: u64,
    pub(super) mtime: SystemTime,
}

impl ObjectFs {
    /// HEAD of `path`: `None` if there is no such object.
    pub(super) fn head(&self, path: &str) -> Res<Option<ObjectMeta>> {
        let key = self.key(path)?;
        let inner = self.inner();
        let r = self.cache.backing().block_on(async move {
            let req = inner.counters.start(Req::Head);
            let r = inner.store.head(&key).await;
            if r.is_ok() || matches!(r, Err(object_store::Error::NotFound { .. })) {
                req.ok();
            }
            r
        });
        match r {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_err(&e)),
        }
    }

    /// Whether the store has any object under directory `path` (one listing page).
    pub(super) fn remote_children(&self, path: &str) -> Res<bool> {
        let key = self.key(path)?;
        let inner = self.inner();
        let r = self
            .cache
            .backing()
            .block_on(async move { any_under(&inner, &key).await });
        r.map_err(|e| store_err(&e))
    }

    /// What `path` is: this mount's open files and directories first, then the store (a HEAD
    /// and a LIST at once; a directory wins over an object of the same name).
    pub(super) fn probe(&self, path: &str) -> Res<Option<Found>> {
        if let Some(s) = self.shared_of(path) {
            let mtime = s.written.lock().unwrap_or_else(SystemTime::now);
            return Ok(Some(Found {
                kind: Kind::File,
                size: s.handle.len(),
                mtime,
            }));
        }
        if self.local_dirs.lock().contains(path) {
            return Ok(Some(Found {
                kind: Kind::Dir,
                size: 0,
                mtime: self.started,
            }));
        }
        let key = self.key(path)?;
        let inner = self.inner();
        let (head, list) = self.cache.backing().block_on(async move {
            let head = async {
                let req = inner.counters.start(Req::Head);
                let r = inner.store.head(&key).await;
                if r.is_ok() || matches!(r, Err(object_store::Error::NotFound { .. })) {
                    req.ok();
                }
                r
            };
            let list = any_under(&inner, &key);
            futures::join!(head, list)
        });
        let is_dir = list.map_err(|e| store_err(&e))?;
        if is_dir || self.handles.lock().any_under(path) {
            return Ok(Some(Found {
                kind: Kind::Dir,
                size: 0,
                mtime: self.started,
            }));
        }
        match head {
            Ok(m) => Ok(Some(Found {
                kind: Kind::File,
                size: m.size,
                mtime: m.last_modified.into(),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_err(&e)),
        }
    }

    /// DELETE of `path`'s object; whether there was one to delete (as far as the store says).
    pub(super) fn delete(&self, path: &str) -> Res<bool> {
        let key = self.key(path)?;
        let inner = self.inner();
        let r = self.cache.backing().block_on(async move {
            let req = inner.counters.start(Req::Delete);
            let r = inner.store.delete(&key).await;
            if r.is_ok() {
                req.ok();
            }
            r
        });
        match r {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(store_err(&e)),
        }
    }

    /// Whether directory `path` has entries: objects under it, or this mount's directories or
    /// open files.
    pub(super) fn dir_has_entries(&self, path: &str) -> Res<bool> {
        if self.local_dirs.lock().iter().any(|d| is_under(d, path)) {
            return Ok(true);
        }
        if self.handles.lock().any_under(path) {
            return Ok(true);
        }
        self.remote_children(path)
    }

    /// The entries of directory `path`: name, type, node number.
    pub(super) fn listing(&self, path: &str, ino: u64) -> Res<Listing> {
        let key = self.key(path)?;
        let inner = self.inner();
        let k = key.clone();
        let listed = self
            .cache
            .backing()
            .block_on(async move {
                let req = inner.counters.start(Req::List);
                let prefix = (!k.is_root()).then_some(&k);
                let r = inner.store.list_with_delimiter(prefix).await;
                if r.is_ok() {
                    req.ok();
                }
                r
            })
            .map_err(|e| store_err(&e))?;
        let dir = Found {
            kind: Kind::Dir,
            size: 0,
            mtime: self.started,
        };
        let mut names: BTreeMap<String, Found> = BTreeMap::new();
        for m in &listed.objects {
            if m.location == key {
                continue;
            }
            if let Some(n) = m.location.filename() {
                if !n.is_empty() {
                    names.entry(n.to_string()).or_insert(Found {
                        kind: Kind::File,
                        size: m.size,
                        mtime: m.last_modified.into(),
                    });
                }
            }
        }
        // A directory wins over an object of the same name.
        for p in &listed.common_prefixes {
            if let Some(n) = p.filename() {
                if !n.is_empty() {
                    names.insert(n.to_string(), dir);
                }
            }
        }
        for d in self.local_dirs.lock().iter() {
            if let Some(n) = child_of(d, path) {
                names.insert(n.to_string(), dir);
            }
        }
        for (p, s) in self.handles.lock().by_path.iter() {
            if let Some(n) = child_of(p, path) {
                // This mount's open file: its size and time are the handle's (READDIRPLUS
                // looks them up again when it answers).
                names.entry(n.to_string()).or_insert(Found {
                    kind: Kind::File,
                    size: s.handle.len(),
                    mtime: s.written.lock().unwrap_or(self.started),
                });
            } else if is_under(p, path) {
                // A file being written deeper down: its first directory shows.
                let rest = if path.is_empty() {
                    p.as_str()
                } else {
                    &p[path.len() + 1..]
                };
                if let Some((first, _)) = rest.split_once('/') {
                    names.insert(first.to_string(), dir);
                }
            }
        }
        let parent_ino = {
            let nodes = self.nodes.lock();
            match path.rsplit_once('/') {
                Some((parent, _)) => nodes.by_path.get(parent).copied().unwrap_or(1),
                None => 1,
            }
        };
        let entry = |name: &str, ino| ListEntry {
            name: name.to_string(),
            ino,
            found: dir,
        };
        let mut out = vec![entry(".", ino), entry("..", parent_ino)];
        let nodes = self.nodes.lock();
        for (name, found) in names {
            let p = join(path, &name);
            let ino = match nodes.by_path.get(&p) {
                Some(&i) if nodes.by_ino.get(&i).is_some_and(|n| n.kind == found.kind) => i,
                _ => ino_hash(&p, found.kind),
            };
            out.push(ListEntry { name, ino, found });
        }
        Ok(out)
    }

    /// Copies `from`'s object to `to` (create-only with `noreplace`), then deletes `from`.
    pub(super) fn copy_delete(&self, from: &str, to: &str, noreplace: bool) -> Res<()> {
        let (fk, tk) = (self.key(from)?, self.key(to)?);
        let inner = self.inner();
        self.cache
            .backing()
            .block_on(async move {
                let req = inner.counters.start(Req::Copy);
                if noreplace {
                    inner.store.copy_if_not_exists(&fk, &tk).await?;
                } else {
                    inner.store.copy(&fk, &tk).await?;
                }
                req.ok();
                let req = inner.counters.start(Req::Delete);
                match inner.store.delete(&fk).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => req.ok(),
                    Err(e) => return Err(e),
                }
                Ok(())
            })
            .map_err(|e| store_err(&e))
    }
}

/// Whether any object lies under `key` (the root: any at all). A marker object (`dir/`) lists
/// as the directory's own key: not a child. Where the store has a paginated listing this asks
/// for two keys; otherwise the listing's first page (up to a thousand keys on S3) comes back
/// whole, which made a lookup of a large directory cost as much as listing it.
async fn any_under(
    inner: &crate::backing::BackingInner,
    key: &object_store::path::Path,
) -> Result<bool, object_store::Error> {
    let req = inner.counters.start(Req::List);
    let found = if let Some(pager) = &inner.pager {
        let prefix =
            (!key.is_root()).then(|| format!("{}{}", key.as_ref(), object_store::path::DELIMITER));
        let opts = object_store::list::PaginatedListOptions {
            delimiter: Some(object_store::path::DELIMITER.into()),
            max_keys: Some(2),
            ..Default::default()
        };
        let page = pager.list_paginated(prefix.as_deref(), opts).await?;
        !page.result.common_prefixes.is_empty()
            || page.result.objects.iter().any(|m| m.location != *key)
    } else {
        let prefix = (!key.is_root()).then_some(key);
        let mut s = inner.store.list(prefix);
        let mut found = false;
        while let Some(m) = s.next().await {
            if m?.location != *key {
                found = true;
                break;
            }
        }
        found
    };
    req.ok();
    Ok(found)
}
