//! One object as a quire [`Store`]: reads are ranged GETs pinned to the version the file was
//! opened at; writes land in a local staging file until [`Store::sync`] uploads the whole
//! object (one PUT, or a multipart upload with parts in flight).
//!
//! # Where a byte of the file comes from
//!
//! | range of the file | source |
//! |---|---|
//! | written since the last upload (`staged`) | the staging file |
//! | below `remote_valid` (the object's size at its version, cut by truncations since) | a ranged GET of that version (`If-Match` its ETag) |
//! | the rest, up to `len` | zeros (a file extended by `set_len` or a write past its end) |
//!
//! The page cache asks only for what it lacks, so the staging file holds what was written
//! back (the dirty folios the cache let go of, or all of them at `fsync`), not a copy of the
//! object. An upload reads the three sources in order; the object's unchanged bytes come from
//! the old version, so a file rewritten in place is uploaded whole (object storage has no
//! partial writes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use object_store::path::Path;
use object_store::ObjectStoreExt as _;
use object_store::{GetOptions, GetRange, PutMode, PutOptions, PutPayload, UpdateVersion};
use parking_lot::Mutex;
use quire::store::{Op, ReadRequest, Store, StoreError};

use crate::backing::{errno_error, store_error, BackingInner};
use crate::counters::Request;
use crate::spill::{PageBuf, StagingFile};
use crate::tier::{ObjectId, TierInner};

type Result<T> = std::result::Result<T, StoreError>;

/// A version of an object: what a HEAD, GET or upload reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// The ETag (`None` where the store gives none).
    pub e_tag: Option<String>,
    /// The store's version id, where it keeps versions.
    pub version: Option<String>,
    /// The object's size.
    pub size: u64,
}

impl Version {
    pub(crate) fn of(meta: &object_store::ObjectMeta) -> Version {
        Version {
            e_tag: meta.e_tag.clone(),
            version: meta.version.clone(),
            size: meta.size,
        }
    }
}

/// Written ranges, as start → end, disjoint and not touching.
#[derive(Clone, Debug, Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn insert(&mut self, mut start: u64, mut end: u64) {
        if start >= end {
            return;
        }
        // Merge with every range that overlaps or touches [start, end).
        let touching: Vec<(u64, u64)> = self
            .0
            .range(..=end)
            .rev()
            .take_while(|&(_, &e)| e >= start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    /// Forgets everything at or past `at`.
    fn cut(&mut self, at: u64) {
        let past: Vec<u64> = self.0.range(at..).map(|(&s, _)| s).collect();
        for s in past {
            self.0.remove(&s);
        }
        if let Some((_, e)) = self.0.range_mut(..at).next_back() {
            *e = (*e).min(at);
        }
    }

    /// The range holding `at`, or the start of the next one.
    fn at(&self, at: u64) -> Around {
        if let Some((_, &e)) = self.0.range(..=at).next_back() {
            if e > at {
                return Around::Inside(e);
            }
        }
        Around::Before(self.0.range(at..).next().map(|(&s, _)| s))
    }
}

enum Around {
    /// Inside a range that ends here.
    Inside(u64),
    /// Not inside one; the next starts here (if any).
    Before(Option<u64>),
}

/// A stretch of the file and where its bytes are.
#[derive(Debug)]
enum Seg {
    Staged {
        off: u64,
        len: usize,
        file: Arc<StagingFile>,
    },
    Remote {
        off: u64,
        len: usize,
    },
    Zero {
        len: usize,
    },
}

#[derive(Debug)]
struct State {
    /// The version clean bytes come from; `None` for an object that did not exist when the
    /// file was made.
    remote: Option<Version>,
    /// Bytes of `remote` that are still the file's (its size, cut by truncations since).
    remote_valid: u64,
    /// The file's length.
    len: u64,
    /// Bytes written since the last upload, and the file they are in.
    staged: Ranges,
    staging: Option<Arc<StagingFile>>,
    /// Changed since the last upload (written or resized).
    pending: bool,
    /// Bumped by every change.
    seq: u64,
    /// How far a write-behind multipart upload ([`Stream`]) has claimed the file: its parts
    /// cover `0..stream_sent`.
    stream_sent: u64,
    /// A change below `stream_sent` since the stream started: its parts are no longer the
    /// file's, and `sync` starts over.
    stream_broken: bool,
}

/// A multipart upload started before `sync`, while a writer fills the file from the front
/// (write-behind): each part is sent as soon as the staging file holds all of it, so that at
/// `fsync` only the tail is left to send. Nothing is visible until `sync` completes it; a
/// change below what was sent breaks it (aborted, and `sync` uploads the file the usual way).
struct Stream {
    upload: Box<dyn object_store::MultipartUpload>,
    /// Parts sent cover `0..sent`.
    sent: u64,
    parts: Vec<tokio::task::JoinHandle<Result<()>>>,
}

/// One object as a store. Made by [`crate::ObjectCache`]; see the [module docs](self).
pub struct ObjectFile {
    pub(crate) inner: Arc<FileInner>,
}

pub(crate) struct FileInner {
    pub(crate) backing: Arc<BackingInner>,
    pub(crate) key: Path,
    staging_dir: Option<PathBuf>,
    tier: Option<Arc<TierInner>>,
    state: Mutex<State>,
    /// One upload at a time.
    upload: Mutex<()>,
    stream: Mutex<Option<Stream>>,
    /// The bytes of a version this process just uploaded through
    /// [`CachedStore`](crate::CachedStore), served to the cache's misses instead of GETs while
    /// it fills the file with them (write-through).
    prefill: Mutex<Option<Prefill>>,
}

/// An uploaded version's bytes, as the chunks of its payload.
pub(crate) struct Prefill {
    pub(crate) e_tag: String,
    pub(crate) payload: object_store::PutPayload,
}

impl Prefill {
    /// Copies `dst.len()` bytes at `off` out of the payload; false if it does not hold them.
    fn copy(&self, off: u64, dst: &mut [u8]) -> bool {
        let mut at = 0u64;
        let mut done = 0usize;
        for chunk in self.payload.iter() {
            let end = at + chunk.len() as u64;
            let want = off + done as u64;
            if done < dst.len() && want < end && want >= at {
                let from = (want - at) as usize;
                let n = (chunk.len() - from).min(dst.len() - done);
                dst[done..done + n].copy_from_slice(&chunk[from..from + n]);
                done += n;
            }
            at = end;
        }
        done == dst.len()
    }
}

impl Drop for FileInner {
    /// A write-behind upload never completed is aborted (its parts are not kept by the store).
    fn drop(&mut self) {
        if let Some(mut st) = self.stream.get_mut().take() {
            self.backing.runtime.spawn(async move {
                let _ = st.upload.abort().await;
            });
        }
    }
}

impl std::fmt::Debug for ObjectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectFile")
            .field("key", &self.inner.key.as_ref())
            .field("state", &*self.inner.state.lock())
            .finish()
    }
}

/// The MD5 of a PUT's body.
fn md5_of(payload: &PutPayload) -> [u8; 16] {
    use md5::Digest as _;
    let mut h = md5::Md5::new();
    for chunk in payload {
        h.update(chunk);
    }
    h.finalize().into()
}

/// An upload whose outcome is in doubt: what the object must look like if the upload took
/// effect (see [`FileInner::confirm_upload`]).
struct Uploaded {
    len: u64,
    kind: UploadKind,
}

enum UploadKind {
    /// A single PUT, with its body's MD5: the ETag S3 and GCS give such an object.
    Put { md5: [u8; 16] },
    /// A multipart upload of this many parts (S3 names the count in its ETag, `"…-N"`),
    /// replacing the object of ETag `replaced` (if any), started at `started`.
    Multipart {
        parts: usize,
        replaced: Option<String>,
        started: std::time::SystemTime,
    },
}

impl Uploaded {
    fn is(&self, m: &object_store::ObjectMeta) -> bool {
        let Some(tag) = m.e_tag.as_deref() else {
            return false;
        };
        let bare = tag.trim_matches('"');
        match &self.kind {
            // Only an MD5 ETag tells: an opaque one (Azure's) could be another writer's
            // object of the same length, and taking it for ours would drop our data.
            UploadKind::Put { md5 } => {
                let hex: String = md5.iter().map(|b| format!("{b:02x}")).collect();
                m.size == self.len && bare.eq_ignore_ascii_case(&hex)
            }
            UploadKind::Multipart {
                parts,
                replaced,
                started,
            } => {
                let parts_ok = match bare.rsplit_once('-') {
                    Some((_, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                        n.parse::<usize>().ok() == Some(*parts)
                    }
                    _ => true,
                };
                let skew = Duration::from_secs(15 * 60);
                let since = (*started - skew)
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                m.size == self.len
                    && replaced.as_deref() != Some(tag)
                    && parts_ok
                    && m.last_modified.timestamp() >= since
            }
        }
    }
}

impl ObjectFile {
    /// The file of object `key` at `remote` (`None`: a new object, empty until written).
    pub(crate) fn new(
        backing: Arc<BackingInner>,
        key: Path,
        remote: Option<Version>,
        staging_dir: Option<PathBuf>,
        tier: Option<Arc<TierInner>>,
    ) -> ObjectFile {
        let size = remote.as_ref().map_or(0, |v| v.size);
        ObjectFile {
            inner: Arc::new(FileInner {
                backing,
                key,
                staging_dir,
                tier,
                state: Mutex::new(State {
                    remote,
                    remote_valid: size,
                    len: size,
                    staged: Ranges::default(),
                    staging: None,
                    pending: false,
                    seq: 0,
                    stream_sent: 0,
                    stream_broken: false,
                }),
                upload: Mutex::new(()),
                stream: Mutex::new(None),
                prefill: Mutex::new(None),
            }),
        }
    }
}

impl FileInner {
    /// The version clean bytes come from.
    pub(crate) fn remote(&self) -> Option<Version> {
        self.state.lock().remote.clone()
    }

    /// Whether there are changes not yet uploaded.
    pub(crate) fn pending(&self) -> bool {
        self.state.lock().pending
    }

    /// Pins the file to `remote`, a newer version found by an open, forgetting the old one.
    /// Only for a file without pending changes (the caller checked, under its own lock).
    pub(crate) fn repin(&self, remote: Version) {
        let mut s = self.state.lock();
        s.remote_valid = remote.size;
        s.len = remote.size;
        s.remote = Some(remote);
    }

    /// Serves misses of the version tagged `prefill.e_tag` from `prefill` (`None`: from the
    /// store again).
    pub(crate) fn set_prefill(&self, prefill: Option<Prefill>) {
        *self.prefill.lock() = prefill;
    }

    /// Makes the file a new, empty object's (an open with `O_TRUNC` or a create): its length 0,
    /// uploaded at the next sync even if nothing is written.
    pub(crate) fn truncate_new(&self) {
        let mut s = self.state.lock();
        s.len = 0;
        s.remote_valid = 0;
        s.staged = Ranges::default();
        s.staging = None;
        s.pending = true;
        s.seq += 1;
        s.stream_broken |= s.stream_sent > 0;
    }

    /// Where the bytes of `offset..offset + n` are (clamped to the file's length).
    fn plan(&self, offset: u64, n: usize) -> (Vec<Seg>, Option<String>, u64) {
        let s = self.state.lock();
        let end = s.len.min(offset.saturating_add(n as u64));
        let mut segs = Vec::new();
        let mut at = offset;
        while at < end {
            match s.staged.at(at) {
                Around::Inside(e) => {
                    let e = e.min(end);
                    segs.push(Seg::Staged {
                        off: at,
                        len: (e - at) as usize,
                        file: s
                            .staging
                            .clone()
                            .expect("staged ranges have a staging file"),
                    });
                    at = e;
                }
                Around::Before(next) => {
                    let stop = next.unwrap_or(end).min(end);
                    if at < s.remote_valid {
                        let e = stop.min(s.remote_valid);
                        segs.push(Seg::Remote {
                            off: at,
                            len: (e - at) as usize,
                        });
                        at = e;
                    } else {
                        segs.push(Seg::Zero {
                            len: (stop - at) as usize,
                        });
                        at = stop;
                    }
                }
            }
        }
        let tag = s.remote.as_ref().and_then(|v| v.e_tag.clone());
        let size = s.remote.as_ref().map_or(0, |v| v.size);
        (segs, tag, size)
    }

    /// The file's bytes at `offset..offset + n`, fewer at its end: remote stretches as ranged
    /// GETs of at most `range_size`, all in flight at once.
    ///
    /// With a disk tier and `fill`, a stretch the tier lacks is fetched out to the tier's chunk
    /// boundaries (within the version), and what was fetched goes to the tier: a random reader
    /// brings whole chunks to local disk at the cost of one larger GET per miss, as whole-file
    /// disk caches do, without fetching chunks nobody reads.
    async fn fetch(self: Arc<Self>, offset: u64, n: usize, fill: bool) -> Result<PageBuf> {
        let mut out = PageBuf::zeroed(n);
        let got = self.fetch_into(offset, &mut out, fill).await?;
        out.truncate(got);
        Ok(out)
    }

    /// [`fetch`](Self::fetch) into `out` (the bytes at `offset..offset + out.len()`), fewer at
    /// the file's end: returns how many. Each GET writes its body straight into its part of
    /// `out`, which may be the caller's frames: nothing is held beside them.
    async fn fetch_into(self: Arc<Self>, offset: u64, out: &mut [u8], fill: bool) -> Result<usize> {
        let (segs, tag, size) = self.plan(offset, out.len());
        let total: usize = segs
            .iter()
            .map(|s| match s {
                Seg::Staged { len, .. } | Seg::Remote { len, .. } | Seg::Zero { len } => *len,
            })
            .sum();
        let out = &mut out[..total];
        let filling = fill && self.tier.is_some() && tag.is_some();
        // The GETs to make: (offset, length, the part of it asked for).
        let mut plan: Vec<(u64, usize, Option<Want>)> = Vec::new();
        let mut at = 0usize;
        let step = self.backing.config.range_size.max(4096);
        for seg in segs {
            match seg {
                Seg::Staged { off, len, file } => {
                    file.read_exact_at(&mut out[at..at + len], off)
                        .map_err(|e| io_error(Op::Read, off, &e))?;
                    at += len;
                }
                Seg::Zero { len } => {
                    out[at..at + len].fill(0);
                    at += len;
                }
                Seg::Remote { off, len } => {
                    // Bytes this process just uploaded need no GET.
                    if let (Some(p), Some(t)) = (&*self.prefill.lock(), &tag) {
                        if p.e_tag == *t && p.copy(off, &mut out[at..at + len]) {
                            at += len;
                            continue;
                        }
                    }
                    // What the disk tier has is read in; the rest is fetched. Where the tier
                    // holds some of it, its reads wait on the disk: the runtime's other tasks
                    // (other misses, the network's replies) go on on another thread meanwhile
                    // (every fetch runs on the backing's own multi-threaded runtime, where this
                    // is allowed). Where it holds none, nothing waits and no thread moves.
                    let missing = match (&self.tier, &tag) {
                        (Some(tier), Some(t)) => {
                            let id = self.tier_id(t);
                            let dst = &mut out[at..at + len];
                            if tier.holds_any(id, off, len as u64) {
                                tokio::task::block_in_place(|| from_tier(tier, id, off, dst))
                            } else {
                                from_tier(tier, id, off, dst)
                            }
                        }
                        _ => vec![(off, len)],
                    };
                    for (moff, mlen) in missing {
                        let (lo, hi) = if filling {
                            let c = crate::tier::CHUNK;
                            let hi = (moff + mlen as u64).div_ceil(c) * c;
                            (moff / c * c, hi.min(size).max(moff + mlen as u64))
                        } else {
                            (moff, moff + mlen as u64)
                        };
                        let mut o = lo;
                        while o < hi {
                            let l = (step as u64).min(hi - o) as usize;
                            // The part of this GET the caller asked for, as (file offset,
                            // length), and where it goes in `out`.
                            let want_lo = o.max(moff);
                            let want_hi = (o + l as u64).min(moff + mlen as u64);
                            let want = (want_hi > want_lo).then(|| Want {
                                skip: (want_lo - o) as usize,
                                dst: at + (want_lo - off) as usize,
                                len: (want_hi - want_lo) as usize,
                            });
                            plan.push((o, l, want));
                            o += l as u64;
                        }
                    }
                    at += len;
                }
            }
        }
        // Each GET writes its body where it goes as it arrives: into its own part of `out`
        // (parts that never overlap, carved in the order the plan made them), through a buffer
        // of its own only where it reaches past what was asked for (the disk tier's chunks).
        let id = tag.as_deref().map(|t| self.tier_id(t));
        let mut gets = FuturesUnordered::new();
        let mut rest: &mut [u8] = out;
        let mut carved = 0usize;
        for (get_at, l, want) in plan {
            let dst = want.map(|w| {
                let gap = w
                    .dst
                    .checked_sub(carved)
                    .expect("the GETs' parts come in order");
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(gap);
                let (mine, tail) = tail.split_at_mut(w.len);
                rest = tail;
                carved = w.dst + w.len;
                (w.skip, mine)
            });
            let (this, tag) = (&self, tag.clone());
            gets.push(async move {
                let offer = |b: &[u8]| {
                    if let (true, Some(tier), Some(id)) = (filling, &this.tier, id) {
                        tier.offer(id, get_at, b);
                    }
                };
                match dst {
                    Some((0, mine)) if mine.len() == l => {
                        this.get_range_into(get_at, mine, tag).await?;
                        offer(mine);
                    }
                    dst => {
                        let mut body = vec![0u8; l];
                        this.get_range_into(get_at, &mut body, tag).await?;
                        if let Some((skip, mine)) = dst {
                            mine.copy_from_slice(&body[skip..skip + mine.len()]);
                        }
                        offer(&body);
                    }
                }
                Ok::<_, StoreError>(())
            });
        }
        while let Some(r) = gets.next().await {
            r?;
        }
        Ok(total)
    }

    fn tier_id(&self, e_tag: &str) -> ObjectId {
        ObjectId::of(&self.backing.url, self.key.as_ref(), e_tag)
    }

    /// One ranged GET of exactly `dst.len()` bytes at `off`, of the version tagged `tag`, its
    /// body copied into `dst` piece by piece as it arrives (never held whole beside it).
    async fn get_range_into(&self, off: u64, dst: &mut [u8], tag: Option<String>) -> Result<()> {
        let counters = &self.backing.counters;
        let req = counters.start(Request::Get);
        let len = dst.len();
        let opts = GetOptions {
            range: Some(GetRange::Bounded(off..off + len as u64)),
            if_match: tag,
            ..Default::default()
        };
        let fail = |e: object_store::Error| {
            if matches!(e, object_store::Error::Precondition { .. }) {
                counters.stale();
            }
            store_error(Op::Read, off, &e)
        };
        let mut body = self
            .backing
            .store
            .get_opts(&self.key, opts)
            .await
            .map_err(fail)?
            .into_stream();
        let mut got = 0usize;
        while let Some(piece) = body.next().await {
            let piece = piece.map_err(fail)?;
            if piece.len() > len - got {
                // More than was asked for: not the range requested.
                return Err(errno_error(Op::Read, off + got as u64, libc::EIO));
            }
            dst[got..got + piece.len()].copy_from_slice(&piece);
            got += piece.len();
        }
        if got != len {
            // A body cut short (a dropped connection the client did not notice, a server that
            // sent less): never passed off as the end of the file.
            return Err(errno_error(Op::Read, off + got as u64, libc::EIO));
        }
        counters.read(len);
        req.ok();
        Ok(())
    }

    /// Uploads the file if it changed since the last upload.
    fn upload(self: &Arc<Self>) -> Result<()> {
        let _one = self.upload.lock();
        let (len, remote, seq) = {
            let s = self.state.lock();
            if !s.pending {
                return Ok(());
            }
            (s.len, s.remote.clone(), s.seq)
        };
        let stream = self.take_stream(len);
        let this = self.clone();
        let put = self.backing.block_on(async move {
            if stream.is_none() && len <= this.backing.config.single_put_max {
                this.put_whole(len, remote).await
            } else {
                this.put_multipart(len, remote, stream).await
            }
        })?;
        let mut s = self.state.lock();
        s.remote = Some(Version {
            e_tag: put.e_tag,
            version: put.version,
            size: len,
        });
        s.remote_valid = len;
        if s.seq == seq {
            // Nothing changed while it was uploading: the object is the file.
            s.staged = Ranges::default();
            s.staging = None;
            s.pending = false;
        } else {
            // Changed meanwhile: what is staged is newer than the upload, and what is not is
            // the same in both versions. Upload again at the next sync.
            s.remote_valid = s.remote_valid.min(s.len);
        }
        Ok(())
    }

    fn put_mode(&self, remote: &Option<Version>) -> PutMode {
        if !self.backing.config.conditional_writes {
            return PutMode::Overwrite;
        }
        match remote {
            None => PutMode::Create,
            Some(Version { e_tag: None, .. }) => PutMode::Overwrite,
            Some(v) => PutMode::Update(UpdateVersion {
                e_tag: v.e_tag.clone(),
                version: v.version.clone(),
            }),
        }
    }

    async fn put_whole(
        self: Arc<Self>,
        len: u64,
        remote: Option<Version>,
    ) -> Result<object_store::PutResult> {
        let _room = self.backing.upload_room(len).await;
        let data = self.clone().fetch(0, len as usize, false).await?;
        if data.len() as u64 != len {
            return Err(errno_error(Op::Write, data.len() as u64, libc::EIO));
        }
        let n = data.len();
        let counters = &self.backing.counters;
        let req = counters.start(Request::Put);
        let opts = PutOptions {
            mode: self.put_mode(&remote),
            ..Default::default()
        };
        let payload = PutPayload::from(data.into_bytes());
        let conditional = matches!(opts.mode, PutMode::Update(_));
        let overwrite = matches!(opts.mode, PutMode::Overwrite);
        let r = match self
            .backing
            .store
            .put_opts(&self.key, payload.clone(), opts)
            .await
        {
            // A store without conditional updates (a local directory): the upload overwrites,
            // as documented for servers that refuse them.
            Err(object_store::Error::NotImplemented { .. }) if conditional => {
                self.backing
                    .store
                    .put_opts(&self.key, payload, PutOptions::default())
                    .await
            }
            // A conditional PUT's answer lost and the PUT sent again: the second fails the
            // condition the first one met.
            Err(e) if !overwrite => {
                let done = Uploaded {
                    len,
                    kind: UploadKind::Put {
                        md5: md5_of(&payload),
                    },
                };
                self.confirm_upload(&done, &e).await.ok_or(e)
            }
            r => r,
        }
        .map_err(|e| store_error(Op::Write, 0, &e))?;
        counters.written(n);
        req.ok();
        Ok(r)
    }

    /// A multipart upload: parts fetched in order, each once it has room in the backing's upload
    /// budget, and sent on tasks of their own (so that they finish, and give their room back,
    /// while this one waits for room).
    /// Multipart uploads are not conditional in object_store: the version is checked with a
    /// HEAD before completing (a writer that replaces the object between that HEAD and the
    /// completion is not detected).
    async fn put_multipart(
        self: Arc<Self>,
        len: u64,
        remote: Option<Version>,
        stream: Option<Stream>,
    ) -> Result<object_store::PutResult> {
        let counters = self.backing.counters.clone();
        let store = self.backing.store.clone();
        let req = counters.start(Request::Multipart);
        let started = std::time::SystemTime::now();
        let (mut upload, mut off, sent) = match stream {
            Some(st) => (st.upload, st.sent, st.parts),
            None => (
                store
                    .put_multipart(&self.key)
                    .await
                    .map_err(|e| store_error(Op::Write, 0, &e))?,
                0,
                Vec::new(),
            ),
        };
        let part = self.backing.config.part_size.max(5 << 20) as u64;
        let depth = self.backing.config.parts_in_flight.max(1);
        let mut parts = sent.len();
        let mut running = FuturesUnordered::new();
        let result: Result<()> = async {
            // The write-behind parts already on their way.
            for h in sent {
                h.await
                    .map_err(|_| errno_error(Op::Write, 0, libc::EIO))??;
            }
            while off < len {
                let l = part.min(len - off) as usize;
                let room = self.backing.upload_room(l as u64).await;
                let data = self.clone().fetch(off, l, false).await?;
                if data.len() != l {
                    return Err(errno_error(Op::Write, off + data.len() as u64, libc::EIO));
                }
                let counters = counters.clone();
                let fut = upload.put_part(PutPayload::from(data.into_bytes()));
                let at = off;
                running.push(self.backing.runtime.spawn(async move {
                    let _room = room;
                    let r = counters.start(Request::Part);
                    fut.await.map_err(|e| store_error(Op::Write, at, &e))?;
                    counters.written(l);
                    r.ok();
                    Ok::<(), StoreError>(())
                }));
                off += l as u64;
                parts += 1;
                while running.len() >= depth {
                    if let Some(r) = running.next().await {
                        r.map_err(|_| errno_error(Op::Write, 0, libc::EIO))??;
                    }
                }
            }
            while let Some(r) = running.next().await {
                r.map_err(|_| errno_error(Op::Write, 0, libc::EIO))??;
            }
            if self.backing.config.conditional_writes {
                let now = store.head(&self.key).await;
                let same = match (&remote, now) {
                    (None, Err(object_store::Error::NotFound { .. })) => true,
                    (Some(v), Ok(m)) => v.e_tag.is_none() || v.e_tag == m.e_tag,
                    _ => false,
                };
                if !same {
                    counters.stale();
                    return Err(errno_error(
                        Op::Write,
                        0,
                        if remote.is_none() {
                            libc::EEXIST
                        } else {
                            libc::ESTALE
                        },
                    ));
                }
            }
            Ok(())
        }
        .await;
        for h in running.iter() {
            h.abort();
        }
        drop(running);
        match result {
            Ok(()) => {
                let r = match upload.complete().await {
                    Ok(r) => r,
                    Err(e) => {
                        let done = Uploaded {
                            len,
                            kind: UploadKind::Multipart {
                                parts,
                                replaced: remote.and_then(|v| v.e_tag),
                                started,
                            },
                        };
                        let r = self.confirm_upload(&done, &e).await;
                        r.ok_or_else(|| store_error(Op::Write, 0, &e))?
                    }
                };
                req.ok();
                Ok(r)
            }
            Err(e) => {
                let _ = upload.abort().await;
                Err(e)
            }
        }
    }

    /// After an upload failed: whether it took effect all the same, asked with a HEAD. An
    /// answer can be lost (a timeout, a dropped connection) after the server acted; the client
    /// asks again and the server refuses what it already did. A conditional PUT asked again
    /// fails its own condition (`412`, or "already exists" for a create-only one); a
    /// multipart completion asked again names an upload the server no longer knows (S3:
    /// `NoSuchUpload`; some servers: `AccessDenied`), and an earlier attempt may still be
    /// assembling the object, so there the HEAD is repeated, with backoff, for up to the
    /// backing's retry timeout. What counts as this upload's object: [`Uploaded::is`] — a
    /// single PUT's by its body's MD5; a multipart upload's by its length, its part count
    /// where the ETag names one, an ETag other than the replaced object's and a time no older
    /// than the upload (less 15 minutes of clock skew), which a writer that put an object so
    /// alike in that window would also pass, as it would the HEAD before completing.
    async fn confirm_upload(
        &self,
        done: &Uploaded,
        e: &object_store::Error,
    ) -> Option<object_store::PutResult> {
        let again = matches!(done.kind, UploadKind::Multipart { .. })
            && matches!(
                e,
                object_store::Error::NotFound { .. } | object_store::Error::PermissionDenied { .. }
            );
        let until = std::time::Instant::now() + self.backing.config.retry_timeout;
        let mut wait = self
            .backing
            .config
            .first_backoff
            .max(Duration::from_millis(10));
        loop {
            if let Ok(m) = self.backing.store.head(&self.key).await {
                if done.is(&m) {
                    self.backing.counters.upload_confirmed();
                    return Some(object_store::PutResult {
                        e_tag: m.e_tag,
                        version: m.version,
                        extensions: Default::default(),
                    });
                }
            }
            if !again || std::time::Instant::now() + wait > until {
                return None;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(2));
        }
    }

    /// Takes the write-behind stream for an upload of `len` bytes: `None` (aborted) if a
    /// change broke it or the file is now shorter than what it sent.
    fn take_stream(&self, len: u64) -> Option<Stream> {
        let st = self.stream.lock().take();
        let mut s = self.state.lock();
        let broken = s.stream_broken || len < s.stream_sent;
        s.stream_sent = 0;
        s.stream_broken = false;
        drop(s);
        let mut st = st?;
        if broken {
            self.backing.runtime.spawn(async move {
                for h in st.parts.drain(..) {
                    let _ = h.await;
                }
                let _ = st.upload.abort().await;
            });
            return None;
        }
        Some(st)
    }

    /// Sends the parts of a large file that the staging file now holds whole from the front,
    /// up to `parts_in_flight` at once (see [`Stream`]). Called after each write to the staging
    /// file; a call that finds another one at work returns at once.
    fn write_behind(self: &Arc<Self>) {
        let config = &self.backing.config;
        let part = config.part_size.max(5 << 20) as u64;
        let Some(mut guard) = self.stream.try_lock() else {
            return;
        };
        loop {
            // Claim the next part if the staging file holds it whole.
            let (at, file, room) = {
                let mut s = self.state.lock();
                let at = guard.as_ref().map_or(0, |st| st.sent);
                if s.stream_broken || s.len <= config.single_put_max {
                    return;
                }
                let whole = matches!(s.staged.at(at), Around::Inside(e) if e >= at + part);
                let (Some(file), true) = (s.staging.clone(), whole) else {
                    return;
                };
                if let Some(st) = guard.as_mut() {
                    st.parts.retain(|h| !h.is_finished());
                    if st.parts.len() >= config.parts_in_flight.max(1) {
                        return;
                    }
                }
                // No room in the upload budget: the part goes later, or at `sync`.
                let Some(room) = self.backing.try_upload_room(part) else {
                    return;
                };
                s.stream_sent = at + part;
                (at, file, room)
            };
            if guard.is_none() {
                let this = self.clone();
                let made = self
                    .backing
                    .block_on(async move { this.backing.store.put_multipart(&this.key).await });
                match made {
                    Ok(upload) => {
                        *guard = Some(Stream {
                            upload,
                            sent: 0,
                            parts: Vec::new(),
                        })
                    }
                    Err(_) => {
                        // No write-behind this time: `sync` uploads the usual way.
                        let mut s = self.state.lock();
                        s.stream_sent = 0;
                        return;
                    }
                }
            }
            let st = guard.as_mut().expect("made above");
            let mut data = vec![0u8; part as usize];
            if file.read_exact_at(&mut data, at).is_err() {
                self.state.lock().stream_broken = true;
                return;
            }
            let fut = st.upload.put_part(PutPayload::from(data));
            let counters = self.backing.counters.clone();
            let l = part as usize;
            st.parts.push(self.backing.runtime.spawn(async move {
                let _room = room;
                let r = counters.start(Request::Part);
                fut.await.map_err(|e| store_error(Op::Write, at, &e))?;
                counters.written(l);
                r.ok();
                Ok(())
            }));
            st.sent = at + part;
        }
    }

    fn staging_file(&self, s: &mut State) -> Result<Arc<StagingFile>> {
        if let Some(f) = &s.staging {
            return Ok(f.clone());
        }
        let made = match &self.staging_dir {
            Some(d) => tempfile::tempfile_in(d),
            None => tempfile::tempfile(),
        };
        let f = Arc::new(StagingFile::new(
            made.map_err(|e| io_error(Op::Write, 0, &e))?,
            self.backing.counters.staging_cached.clone(),
        ));
        s.staging = Some(f.clone());
        Ok(f)
    }
}

/// A local file's I/O error (the staging file) as a store error of `op` at `offset`.
fn io_error(op: Op, offset: u64, e: &std::io::Error) -> StoreError {
    StoreError::Io {
        op,
        offset,
        kind: e.kind(),
        errno: e.raw_os_error(),
    }
}

/// The part of a GET the caller asked for: `len` bytes from `skip` into its body, which go to
/// `dst` in the fetch's destination.
#[derive(Clone, Copy)]
struct Want {
    skip: usize,
    dst: usize,
    len: usize,
}

/// Fills from `tier` what it has of `dst` (the file's bytes at `off`); returns the stretches
/// (offset, length) it lacks, in order. The whole pages of a page-aligned `dst` are read
/// straight into it (quire's frames, on the read path: direct from disk where aligned); only a
/// part page, at either end, goes through a page of its own.
fn from_tier(tier: &TierInner, id: ObjectId, off: u64, dst: &mut [u8]) -> Vec<(u64, usize)> {
    const PAGE: u64 = 4096;
    let end = off + dst.len() as u64;
    // dst[..direct] is whole pages from `off`, read in place.
    let direct = if off.is_multiple_of(PAGE) {
        dst.len() / PAGE as usize * PAGE as usize
    } else {
        0
    };
    let (head, tail) = dst.split_at_mut(direct);
    let mut hits: Vec<(u64, u64, bool)> = tier
        .read(id, off, head)
        .into_iter()
        .enumerate()
        .map(|(i, hit)| (off + i as u64 * PAGE, off + (i as u64 + 1) * PAGE, hit))
        .collect();
    if !tail.is_empty() {
        let t_off = off + direct as u64;
        let first = t_off / PAGE * PAGE;
        let last = end.div_ceil(PAGE) * PAGE;
        let mut pages = PageBuf::zeroed((last - first) as usize);
        for (i, hit) in tier.read(id, first, &mut pages).into_iter().enumerate() {
            let p0 = (first + i as u64 * PAGE).max(t_off);
            let p1 = (first + (i as u64 + 1) * PAGE).min(end);
            if hit {
                let src = (p0 - first) as usize..(p1 - first) as usize;
                tail[(p0 - t_off) as usize..(p1 - t_off) as usize].copy_from_slice(&pages[src]);
            }
            hits.push((p0, p1, hit));
        }
    }
    let mut missing: Vec<(u64, usize)> = Vec::new();
    for (p0, p1, hit) in hits {
        if hit {
            continue;
        }
        match missing.last_mut() {
            Some((o, l)) if *o + *l as u64 == p0 => *l += (p1 - p0) as usize,
            _ => missing.push((p0, (p1 - p0) as usize)),
        }
    }
    missing
}

impl Store for ObjectFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let data =
            self.inner
                .backing
                .block_on(self.inner.clone().fetch(offset, buf.len(), true))?;
        buf[..data.len()].copy_from_slice(&data);
        Ok(data.len())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<usize> {
        let mut s = self.inner.state.lock();
        let file = self.inner.staging_file(&mut s)?;
        file.write_all_at(buf, offset)
            .map_err(|e| io_error(Op::Write, offset, &e))?;
        let end = offset + buf.len() as u64;
        s.staged.insert(offset, end);
        s.len = s.len.max(end);
        s.pending = true;
        s.seq += 1;
        s.stream_broken |= offset < s.stream_sent;
        drop(s);
        self.inner.write_behind();
        Ok(buf.len())
    }

    /// Uploads the object if it changed (see the [module docs](self)).
    fn sync(&self) -> Result<()> {
        self.inner.upload()
    }

    fn len(&self) -> Result<u64> {
        Ok(self.inner.state.lock().len)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut s = self.inner.state.lock();
        if len < s.len {
            s.staged.cut(len);
            if let Some(f) = &s.staging {
                f.set_len(len).map_err(|e| io_error(Op::Write, len, &e))?;
            }
            s.remote_valid = s.remote_valid.min(len);
            s.stream_broken |= len < s.stream_sent;
        }
        if len != s.len {
            s.len = len;
            s.pending = true;
            s.seq += 1;
        }
        Ok(())
    }

    fn completes_reads(&self) -> bool {
        true
    }

    fn keeps_evicted(&self) -> bool {
        self.inner.tier.is_some()
    }

    /// Offers the folio to the disk tier if its bytes are exactly the version's: not staged,
    /// inside the version's size (the last folio may run past it, in zeros).
    fn evicted_clean(&self, offset: u64, data: &[u8]) {
        let Some(tier) = &self.inner.tier else {
            return;
        };
        let id = {
            let s = self.inner.state.lock();
            let Some(Version {
                e_tag: Some(tag),
                size,
                ..
            }) = &s.remote
            else {
                return;
            };
            let end = offset + data.len() as u64;
            let whole_version = s.remote_valid == *size && s.len == *size;
            let staged =
                !matches!(s.staged.at(offset), Around::Before(n) if n.is_none_or(|n| n >= end));
            if offset >= s.remote_valid || (end > s.remote_valid && !whole_version) || staged {
                return;
            }
            self.inner.tier_id(tag)
        };
        tier.offer(id, offset, data);
    }

    /// Adjacent requests are fetched together, as ranges of at most `range_size` bytes, each
    /// completing its requests as soon as it arrives. A request alone in its range (a large
    /// folio of readahead, a random read) is fetched straight into its frames.
    fn submit_reads(&self, reqs: Vec<ReadRequest>) {
        let step = self.inner.backing.config.range_size.max(4096) as u64;
        let mut group: Vec<ReadRequest> = Vec::new();
        let mut groups = Vec::new();
        for r in reqs {
            let joins = group.last().is_some_and(|last| {
                last.offset() + last.len() as u64 == r.offset()
                    && r.offset() + r.len() as u64 - group[0].offset() <= step
            });
            if !joins && !group.is_empty() {
                groups.push(std::mem::take(&mut group));
            }
            group.push(r);
        }
        if !group.is_empty() {
            groups.push(group);
        }
        for mut group in groups {
            let inner = self.inner.clone();
            self.inner.backing.runtime.spawn(async move {
                let start = group[0].offset();
                let last = group.last().expect("a group is not empty");
                let n = (last.offset() + last.len() as u64 - start) as usize;
                if group.len() == 1 {
                    let mut r = group.pop().expect("one request");
                    let got = inner.fetch_into(start, r.buf(), true).await;
                    r.complete(got);
                    return;
                }
                match inner.fetch(start, n, true).await {
                    Ok(data) => {
                        for mut r in group {
                            let at = (r.offset() - start) as usize;
                            let have = data.len().saturating_sub(at).min(r.len());
                            r.buf()[..have].copy_from_slice(&data[at..at + have]);
                            r.complete(Ok(have));
                        }
                    }
                    Err(e) => {
                        for r in group {
                            r.complete(Err(e.clone()));
                        }
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Ranges;
    use proptest::prelude::*;

    /// The written ranges against a plain model: a byte per position.
    fn check(r: &Ranges, model: &[bool]) {
        let mut want = Vec::new();
        let mut i = 0;
        while i < model.len() {
            if model[i] {
                let s = i;
                while i < model.len() && model[i] {
                    i += 1;
                }
                want.push((s as u64, i as u64));
            } else {
                i += 1;
            }
        }
        let got: Vec<(u64, u64)> = r.0.iter().map(|(&s, &e)| (s, e)).collect();
        assert_eq!(got, want);
    }

    proptest! {
        #[test]
        fn ranges_match_a_model(ops in proptest::collection::vec((0u64..200, 0u64..40, any::<bool>()), 1..60)) {
            let mut r = Ranges::default();
            let mut model = vec![false; 260];
            for (start, len, cut) in ops {
                if cut {
                    r.cut(start);
                    for b in &mut model[start as usize..] { *b = false; }
                } else {
                    r.insert(start, start + len);
                    for b in &mut model[start as usize..(start + len) as usize] { *b = true; }
                }
                check(&r, &model);
            }
        }
    }
}
