//! `CachedStore` against the `ObjectStore` contract, over `object_store::memory::InMemory`.
//!
//! The state machine: random sequences of every call (puts of each mode, with and without
//! attributes; multipart uploads; gets with every range form and every precondition; heads;
//! `get_ranges`; deletes; copies; renames; listings) applied to `CachedStore(InMemory A)` and to
//! a plain `InMemory B`, the model. `InMemory` numbers its ETags by a counter of the writes that
//! succeeded, so A and B, given the same writes, give the same ETags: results are compared
//! whole — bytes, range, size, ETag, attributes — and errors by variant. The cached metadata is
//! also compared with A's own, read directly (`last_modified` differs between A and B).
//! Caches of 64–256 KiB hold a fraction of the objects, so eviction happens as it runs.
//!
//! Then the rest, one case each: an object replaced behind the store's back (immutable, TTL,
//! `CacheHint::Revalidate`, `CacheHint::Bypass`), requests saved, write-through and its limits,
//! a multipart upload read after it completes, the disk tier across a restart.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, TimeZone as _, Utc};
use futures::TryStreamExt as _;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, CopyMode, CopyOptions, GetOptions, GetRange, ObjectStore,
    ObjectStoreExt as _, PutMode, PutMultipartOptions, PutOptions, PutPayload, RenameOptions,
    RenameTargetMode, UpdateVersion,
};
use proptest::prelude::*;
use quire::{CacheConfig, PageCache};
use quire_object::{CacheHint, CachedStore, CachedStoreConfig, DiskTier, WritePolicy};

use common::*;

const KIB: usize = 1 << 10;
const KEYS: &[&str] = &["a", "b", "d/c", "d/e/f", "d/e/g"];
/// An ETag no `InMemory` hands out in a test.
const NEVER: &str = "\"987654321\"";

#[derive(Clone, Debug)]
enum Tag {
    /// The object's ETag now (as its own store says).
    Current,
    Never,
    Star,
    /// `"never", current`.
    List,
}

#[derive(Clone, Debug)]
enum When {
    Past,
    Future,
    /// The object's own `last_modified` (as its own store says).
    Own,
}

#[derive(Clone, Debug)]
enum Cond {
    None,
    IfMatch(Tag),
    IfNoneMatch(Tag),
    IfModifiedSince(When),
    IfUnmodifiedSince(When),
    Both(Tag, When),
}

/// An offset, some relative to the object's size when the call is made.
#[derive(Clone, Debug)]
enum Pos {
    Abs(u64),
    BeforeEnd(u64),
    AfterEnd(u64),
}

impl Pos {
    fn at(&self, size: u64) -> u64 {
        match self {
            Pos::Abs(n) => *n,
            Pos::BeforeEnd(k) => size.saturating_sub(*k),
            Pos::AfterEnd(k) => size + k,
        }
    }
}

#[derive(Clone, Debug)]
enum Rng {
    Bounded(Pos, u64),
    /// `start..end` with `end <= start`: invalid.
    Backwards(Pos, u64),
    Offset(Pos),
    Suffix(u64),
}

#[derive(Clone, Debug)]
enum Mode {
    Overwrite,
    Create,
    UpdateCurrent,
    UpdateNever,
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        key: usize,
        len: usize,
        seed: u64,
        mode: Mode,
        attrs: bool,
    },
    Multipart {
        key: usize,
        parts: Vec<usize>,
        seed: u64,
        attrs: bool,
    },
    Get {
        key: usize,
        range: Option<Rng>,
        cond: Cond,
        head: bool,
    },
    GetRanges {
        key: usize,
        ranges: Vec<(Pos, u64)>,
    },
    Head {
        key: usize,
    },
    Delete {
        key: usize,
    },
    Copy {
        from: usize,
        to: usize,
        create: bool,
    },
    Rename {
        from: usize,
        to: usize,
        create: bool,
    },
    List {
        prefix: Option<&'static str>,
        delimiter: bool,
        offset: Option<usize>,
    },
}

fn pos() -> impl Strategy<Value = Pos> {
    prop_oneof![
        3 => (0u64..320_000).prop_map(Pos::Abs),
        2 => (0u64..70_000).prop_map(Pos::BeforeEnd),
        1 => (0u64..5000).prop_map(Pos::AfterEnd),
        1 => Just(Pos::Abs(0)),
        1 => Just(Pos::BeforeEnd(1)),
        1 => Just(Pos::BeforeEnd(0)),
    ]
}

fn range() -> impl Strategy<Value = Rng> {
    prop_oneof![
        4 => (pos(), 1u64..200_000).prop_map(|(p, l)| Rng::Bounded(p, l)),
        1 => (pos(), 0u64..10).prop_map(|(p, l)| Rng::Backwards(p, l)),
        2 => pos().prop_map(Rng::Offset),
        2 => prop_oneof![0u64..100_000, 250_000u64..400_000].prop_map(Rng::Suffix),
    ]
}

fn tag() -> impl Strategy<Value = Tag> {
    prop_oneof![
        3 => Just(Tag::Current),
        2 => Just(Tag::Never),
        1 => Just(Tag::Star),
        1 => Just(Tag::List),
    ]
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![Just(When::Past), Just(When::Future), Just(When::Own)]
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        6 => Just(Cond::None),
        2 => tag().prop_map(Cond::IfMatch),
        2 => tag().prop_map(Cond::IfNoneMatch),
        1 => when().prop_map(Cond::IfModifiedSince),
        1 => when().prop_map(Cond::IfUnmodifiedSince),
        1 => (tag(), when()).prop_map(|(t, w)| Cond::Both(t, w)),
    ]
}

/// Object sizes: mostly small, some larger than the smallest caches, some empty.
fn len() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        4 => 1usize..20_000,
        3 => 20_000usize..300_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    prop_oneof![
        5 => (key.clone(), len(), any::<u64>(), prop_oneof![
                3 => Just(Mode::Overwrite),
                1 => Just(Mode::Create),
                1 => Just(Mode::UpdateCurrent),
                1 => Just(Mode::UpdateNever),
            ], any::<bool>())
            .prop_map(|(key, len, seed, mode, attrs)| Op::Put { key, len, seed, mode, attrs }),
        1 => (
                key.clone(),
                proptest::collection::vec(0usize..100_000, 1..4),
                any::<u64>(),
                any::<bool>(),
            )
            .prop_map(|(key, parts, seed, attrs)| Op::Multipart { key, parts, seed, attrs }),
        10 => (
                key.clone(),
                proptest::option::weighted(0.8, range()),
                cond(),
                proptest::bool::weighted(0.15),
            )
            .prop_map(|(key, range, cond, head)| Op::Get { key, range, cond, head }),
        4 => (key.clone(), proptest::collection::vec(
                (pos(), prop_oneof![12 => 1u64..70_000, 1 => Just(0u64)]), 1..8))
            .prop_map(|(key, ranges)| Op::GetRanges { key, ranges }),
        2 => key.clone().prop_map(|key| Op::Head { key }),
        1 => key.clone().prop_map(|key| Op::Delete { key }),
        1 => (key.clone(), key.clone(), any::<bool>())
            .prop_map(|(from, to, create)| Op::Copy { from, to, create }),
        1 => (key.clone(), key.clone(), any::<bool>())
            .prop_map(|(from, to, create)| Op::Rename { from, to, create }),
        1 => (prop_oneof![Just(None), Just(Some("d")), Just(Some("d/e"))], any::<bool>(),
              proptest::option::of(key))
            .prop_map(|(prefix, delimiter, offset)| Op::List { prefix, delimiter, offset }),
    ]
}

#[derive(Clone, Debug)]
struct Setup {
    budget: usize,
    write: WritePolicy,
    write_through_max: u64,
    chunk: usize,
    coalesce: u64,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(64 * KIB), Just(128 * KIB), Just(256 * KIB)],
        prop_oneof![Just(WritePolicy::Through), Just(WritePolicy::Invalidate)],
        prop_oneof![Just(64 << 20), Just(100_000u64)],
        prop_oneof![Just(16 * KIB), Just(50_000), Just(MIB)],
        prop_oneof![Just(0u64), Just(4096), Just(1 << 20)],
    )
        .prop_map(
            |(budget, write, write_through_max, chunk, coalesce)| Setup {
                budget,
                write,
                write_through_max,
                chunk,
                coalesce,
            },
        )
}

/// An error's variant, as the contract names it.
fn kind(e: &object_store::Error) -> &'static str {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => "NotFound",
        E::AlreadyExists { .. } => "AlreadyExists",
        E::Precondition { .. } => "Precondition",
        E::NotModified { .. } => "NotModified",
        E::Generic { .. } => "Generic",
        E::NotImplemented { .. } => "NotImplemented",
        E::PermissionDenied { .. } => "PermissionDenied",
        _ => "other",
    }
}

fn same_outcome<T, U>(
    what: &str,
    c: &object_store::Result<T>,
    b: &object_store::Result<U>,
) -> Result<(), TestCaseError> {
    match (c, b) {
        (Ok(_), Ok(_)) => Ok(()),
        (Err(x), Err(y)) => {
            prop_assert_eq!(kind(x), kind(y), "{}: cached {} / model {}", what, x, y);
            Ok(())
        }
        (Ok(_), Err(y)) => Err(TestCaseError::fail(format!("{what}: cached Ok, model {y}"))),
        (Err(x), Ok(_)) => Err(TestCaseError::fail(format!("{what}: cached {x}, model Ok"))),
    }
}

fn attributes(seed: u64) -> Attributes {
    Attributes::from_iter([
        (Attribute::ContentType, format!("text/x-{seed}")),
        (Attribute::CacheControl, "max-age=60".to_string()),
        (Attribute::Metadata("who".into()), format!("w{}", seed % 7)),
    ])
}

fn past() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2001, 1, 1, 0, 0, 0).unwrap()
}

fn future() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2199, 1, 1, 0, 0, 0).unwrap()
}

/// The options of a conditional get, with ETags and dates taken from `own` (the store the
/// call's answer comes from).
async fn cond_opts(own: &dyn ObjectStore, p: &Path, c: &Cond) -> GetOptions {
    let meta = own.head(p).await.ok();
    let current = meta
        .as_ref()
        .and_then(|m| m.e_tag.clone())
        .unwrap_or_else(|| NEVER.to_string());
    let tag = |t: &Tag| match t {
        Tag::Current => current.clone(),
        Tag::Never => NEVER.to_string(),
        Tag::Star => "*".to_string(),
        Tag::List => format!("{NEVER}, {current}"),
    };
    let date = |w: &When| match w {
        When::Past => past(),
        When::Future => future(),
        When::Own => meta.as_ref().map_or_else(past, |m| m.last_modified),
    };
    let mut o = GetOptions::default();
    match c {
        Cond::None => {}
        Cond::IfMatch(t) => o.if_match = Some(tag(t)),
        Cond::IfNoneMatch(t) => o.if_none_match = Some(tag(t)),
        Cond::IfModifiedSince(w) => o.if_modified_since = Some(date(w)),
        Cond::IfUnmodifiedSince(w) => o.if_unmodified_since = Some(date(w)),
        Cond::Both(t, w) => {
            o.if_match = Some(tag(t));
            o.if_modified_since = Some(date(w));
        }
    }
    o
}

struct World {
    c: CachedStore,
    a: Arc<dyn ObjectStore>,
    b: InMemory,
}

impl World {
    fn new(s: &Setup) -> World {
        let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let config = CachedStoreConfig {
            write: s.write,
            write_through_max: s.write_through_max,
            chunk: s.chunk,
            coalesce: s.coalesce,
            ..CachedStoreConfig::default()
        };
        let c = CachedStore::with_config(
            a.clone(),
            PageCache::new(CacheConfig::new(s.budget)).unwrap(),
            config,
        )
        .unwrap();
        World {
            c,
            a,
            b: InMemory::new(),
        }
    }

    /// The model's size of `p` (0 if it has none).
    async fn size(&self, p: &Path) -> u64 {
        self.b.head(p).await.map_or(0, |m| m.size)
    }

    async fn run(&self, op: &Op) -> Result<(), TestCaseError> {
        let (c, b) = (&self.c, &self.b);
        match op {
            Op::Put {
                key,
                len,
                seed,
                mode,
                attrs,
            } => {
                let p = Path::from(KEYS[*key]);
                let data = Bytes::from(pattern(*len, *seed));
                let opts = |own_tag: Option<String>| PutOptions {
                    mode: match mode {
                        Mode::Overwrite => PutMode::Overwrite,
                        Mode::Create => PutMode::Create,
                        Mode::UpdateCurrent => PutMode::Update(UpdateVersion {
                            e_tag: Some(own_tag.unwrap_or_else(|| NEVER.to_string())),
                            version: None,
                        }),
                        Mode::UpdateNever => PutMode::Update(UpdateVersion {
                            e_tag: Some(NEVER.to_string()),
                            version: None,
                        }),
                    },
                    attributes: if *attrs {
                        attributes(*seed)
                    } else {
                        Attributes::new()
                    },
                    ..Default::default()
                };
                let ta = self.a.head(&p).await.ok().and_then(|m| m.e_tag);
                let tb = b.head(&p).await.ok().and_then(|m| m.e_tag);
                let rc = c
                    .put_opts(&p, PutPayload::from(data.clone()), opts(ta))
                    .await;
                let rb = b.put_opts(&p, PutPayload::from(data), opts(tb)).await;
                same_outcome("put", &rc, &rb)?;
                if let (Ok(x), Ok(y)) = (rc, rb) {
                    prop_assert_eq!(x.e_tag, y.e_tag);
                }
            }
            Op::Multipart {
                key,
                parts,
                seed,
                attrs,
            } => {
                let p = Path::from(KEYS[*key]);
                let opts = || PutMultipartOptions {
                    attributes: if *attrs {
                        attributes(*seed)
                    } else {
                        Attributes::new()
                    },
                    ..Default::default()
                };
                let mut uc = c.put_multipart_opts(&p, opts()).await.unwrap();
                let mut ub = b.put_multipart_opts(&p, opts()).await.unwrap();
                for (i, l) in parts.iter().enumerate() {
                    let d = Bytes::from(pattern(*l, seed.wrapping_add(i as u64)));
                    uc.put_part(PutPayload::from(d.clone())).await.unwrap();
                    ub.put_part(PutPayload::from(d)).await.unwrap();
                }
                let (x, y) = (uc.complete().await.unwrap(), ub.complete().await.unwrap());
                prop_assert_eq!(x.e_tag, y.e_tag);
            }
            Op::Get {
                key,
                range,
                cond,
                head,
            } => {
                let p = Path::from(KEYS[*key]);
                let size = self.size(&p).await;
                let r = range.as_ref().map(|r| match r {
                    Rng::Bounded(s, l) => {
                        let s = s.at(size);
                        GetRange::Bounded(s..s + l)
                    }
                    Rng::Backwards(s, l) => {
                        let s = s.at(size);
                        GetRange::Bounded(s..s.saturating_sub(*l))
                    }
                    Rng::Offset(s) => GetRange::Offset(s.at(size)),
                    Rng::Suffix(n) => GetRange::Suffix(*n),
                });
                let mut oc = cond_opts(self.a.as_ref(), &p, cond).await;
                let mut ob = cond_opts(b, &p, cond).await;
                oc.range = r.clone();
                ob.range = r;
                oc.head = *head;
                ob.head = *head;
                let what = format!("get {p} {:?} {cond:?} head {head}", oc.range);
                let rc = c.get_opts(&p, oc).await;
                let rb = b.get_opts(&p, ob).await;
                same_outcome(&what, &rc, &rb)?;
                if let (Ok(x), Ok(y)) = (rc, rb) {
                    prop_assert_eq!(&x.range, &y.range, "{}", what);
                    prop_assert_eq!(x.meta.size, y.meta.size, "{}", what);
                    prop_assert_eq!(&x.meta.e_tag, &y.meta.e_tag, "{}", what);
                    prop_assert_eq!(&x.meta.location, &y.meta.location, "{}", what);
                    prop_assert_eq!(&x.attributes, &y.attributes, "{}", what);
                    // The cached metadata is A's as it is now.
                    let direct = self.a.head(&p).await.unwrap();
                    prop_assert_eq!(&x.meta, &direct, "{}", what);
                    if !head {
                        let (bx, by) = (x.bytes().await, y.bytes().await.unwrap());
                        let bx = bx.map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
                        prop_assert!(
                            bx == by,
                            "{}: bytes differ ({} vs {})",
                            what,
                            bx.len(),
                            by.len()
                        );
                    }
                }
            }
            Op::GetRanges { key, ranges } => {
                let p = Path::from(KEYS[*key]);
                let size = self.size(&p).await;
                let rs: Vec<_> = ranges
                    .iter()
                    .map(|(s, l)| {
                        let s = s.at(size);
                        s..s + l
                    })
                    .collect();
                let what = format!("get_ranges {p} {rs:?} of {size}");
                let rc = c.get_ranges(&p, &rs).await;
                let rb = b.get_ranges(&p, &rs).await;
                same_outcome(&what, &rc, &rb)?;
                if let (Ok(x), Ok(y)) = (rc, rb) {
                    prop_assert!(x == y, "{}: bytes differ", what);
                }
            }
            Op::Head { key } => {
                let p = Path::from(KEYS[*key]);
                let rc = c.head(&p).await;
                let rb = b.head(&p).await;
                same_outcome("head", &rc, &rb)?;
                if let (Ok(x), Ok(y)) = (rc, rb) {
                    prop_assert_eq!(
                        (&x.location, x.size, &x.e_tag),
                        (&y.location, y.size, &y.e_tag)
                    );
                    prop_assert_eq!(&x, &self.a.head(&p).await.unwrap());
                }
            }
            Op::Delete { key } => {
                let p = Path::from(KEYS[*key]);
                let rc = c.delete(&p).await;
                let rb = b.delete(&p).await;
                same_outcome("delete", &rc, &rb)?;
            }
            Op::Copy { from, to, create } => {
                let (f, t) = (Path::from(KEYS[*from]), Path::from(KEYS[*to]));
                let opts = || {
                    CopyOptions::new().with_mode(if *create {
                        CopyMode::Create
                    } else {
                        CopyMode::Overwrite
                    })
                };
                let rc = c.copy_opts(&f, &t, opts()).await;
                let rb = b.copy_opts(&f, &t, opts()).await;
                same_outcome(&format!("copy {f} {t} create {create}"), &rc, &rb)?;
            }
            Op::Rename { from, to, create } => {
                let (f, t) = (Path::from(KEYS[*from]), Path::from(KEYS[*to]));
                let opts = || {
                    RenameOptions::new().with_target_mode(if *create {
                        RenameTargetMode::Create
                    } else {
                        RenameTargetMode::Overwrite
                    })
                };
                let rc = c.rename_opts(&f, &t, opts()).await;
                let rb = b.rename_opts(&f, &t, opts()).await;
                same_outcome(&format!("rename {f} {t} create {create}"), &rc, &rb)?;
            }
            Op::List {
                prefix,
                delimiter,
                offset,
            } => {
                let prefix = prefix.map(Path::from);
                let brief = |v: Vec<object_store::ObjectMeta>| {
                    v.into_iter()
                        .map(|m| (m.location, m.size, m.e_tag))
                        .collect::<Vec<_>>()
                };
                if *delimiter {
                    let x = c.list_with_delimiter(prefix.as_ref()).await.unwrap();
                    let y = b.list_with_delimiter(prefix.as_ref()).await.unwrap();
                    prop_assert_eq!(&x.common_prefixes, &y.common_prefixes);
                    prop_assert_eq!(brief(x.objects), brief(y.objects));
                } else {
                    let (x, y) = match offset {
                        Some(o) => {
                            let o = Path::from(KEYS[*o]);
                            (
                                c.list_with_offset(prefix.as_ref(), &o),
                                b.list_with_offset(prefix.as_ref(), &o),
                            )
                        }
                        None => (c.list(prefix.as_ref()), b.list(prefix.as_ref())),
                    };
                    let x: Vec<_> = x.try_collect().await.unwrap();
                    let y: Vec<_> = y.try_collect().await.unwrap();
                    prop_assert_eq!(brief(x), brief(y));
                }
            }
        }
        Ok(())
    }

    /// Every key reads the same whole through the store as from the model.
    async fn check_all(&self) -> Result<(), TestCaseError> {
        for k in KEYS {
            let p = Path::from(*k);
            let rc = self.c.get(&p).await;
            let rb = self.b.get(&p).await;
            same_outcome(&format!("final get {p}"), &rc, &rb)?;
            if let (Ok(x), Ok(y)) = (rc, rb) {
                prop_assert_eq!(x.bytes().await.unwrap(), y.bytes().await.unwrap());
            }
        }
        let s = self.c.stats();
        prop_assert_eq!(s.reads, s.hits + s.misses, "{}", s);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        max_shrink_iters: 2000,
        ..ProptestConfig::default()
    })]

    /// Every call through the store answers as the model does.
    #[test]
    fn the_store_answers_as_the_inner_store_does(
        setup in setup(),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let w = World::new(&setup);
        rt().block_on(async {
            for (i, op) in ops.iter().enumerate() {
                w.run(op).await.map_err(|e| TestCaseError::fail(format!("op {i} {op:?}: {e}")))?;
            }
            w.check_all().await
        })?;
    }
}

// ---------------------------------------------------------------------------------------------

fn store(inner: &Arc<dyn ObjectStore>, budget: usize, config: CachedStoreConfig) -> CachedStore {
    CachedStore::with_config(
        inner.clone(),
        PageCache::new(CacheConfig::new(budget)).unwrap(),
        config,
    )
    .unwrap()
}

/// Puts `data` at `key` on `store` directly (behind the cache's back, if it has one).
async fn aput(store: &Arc<dyn ObjectStore>, key: &str, data: &[u8]) {
    store
        .put(&Path::from(key), PutPayload::from(data.to_vec()))
        .await
        .unwrap();
}

async fn read(s: &dyn ObjectStore, p: &Path, opts: GetOptions) -> object_store::Result<Bytes> {
    s.get_opts(p, opts).await?.bytes().await
}

fn hinted(h: CacheHint) -> GetOptions {
    let mut o = GetOptions::default();
    o.extensions.insert(h);
    o
}

/// Replaced behind the store's back, immutable (the default): cached bytes may still be
/// served, but a read that misses gets the new version whole, after one retry.
#[test]
fn a_replaced_object_is_read_whole_at_the_first_miss() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = pattern(3 * MIB, 1);
    let new = pattern(3 * MIB, 2);
    put(&a, "obj", &old);
    // Small chunks: a get of the whole object is many reads of the cache.
    let s = store(
        &a,
        8 * MIB,
        CachedStoreConfig {
            chunk: 64 * KIB,
            ..CachedStoreConfig::default()
        },
    );
    let p = Path::from("obj");
    rt().block_on(async {
        let head = s.get_range(&p, 0..100_000).await.unwrap();
        assert_eq!(&head[..], &old[..100_000]);
        aput(&a, "obj", &new).await;
        // Cached, of the old version: served, as documented for immutable objects.
        let again = s.get_range(&p, 0..100_000).await.unwrap();
        assert_eq!(&again[..], &old[..100_000]);
        assert_eq!(s.stats().replaced, 0);
        // A miss: the old version's GET is refused, the read is retried on the new one.
        let far = s
            .get_range(&p, 2 * MIB as u64..3 * MIB as u64)
            .await
            .unwrap();
        assert_eq!(&far[..], &new[2 * MIB..]);
        let st = s.stats();
        assert_eq!(st.replaced, 1, "{st}");
        // Three reads, the retried one counted once.
        assert_eq!((st.reads, st.hits, st.misses), (3, 1, 2), "{st}");
        // From then on the store is at the new version: the old cached bytes are gone.
        let all = s.get(&p).await.unwrap();
        assert_eq!(all.meta.e_tag, a.head(&p).await.unwrap().e_tag);
        assert_eq!(&all.bytes().await.unwrap()[..], &new[..]);
        let rs = s
            .get_ranges(&p, &[0..10, MIB as u64..MIB as u64 + 10])
            .await
            .unwrap();
        assert_eq!(&rs[0][..], &new[..10]);
        assert_eq!(&rs[1][..], &new[MIB..MIB + 10]);
        // get_ranges finds a replacement the same way, and counts one read: a range cached
        // of the old version and one missing come back both of the new version.
        let mut cc = CacheConfig::new(8 * MIB);
        cc.readahead_max = 0;
        let s =
            CachedStore::with_config(a.clone(), PageCache::new(cc).unwrap(), Default::default())
                .unwrap();
        s.get_range(&p, 0..10).await.unwrap();
        let newer = pattern(3 * MIB, 5);
        aput(&a, "obj", &newer).await;
        let before = s.stats();
        let far = 3 * MIB as u64 - 100;
        let rs = s.get_ranges(&p, &[0..10, far..far + 100]).await.unwrap();
        assert!(rs[0][..] == newer[..10] && rs[1][..] == newer[far as usize..]);
        let st = s.stats();
        assert_eq!(st.replaced, before.replaced + 1, "{st}");
        assert_eq!(st.reads, before.reads + 1, "{st}");
        assert_eq!(st.reads, st.hits + st.misses, "{st}");
    });
}

/// A whole-object get whose first chunk is cached and whose later chunks miss, after the
/// object was replaced behind the store's back: never the old version's bytes followed by the
/// new one's; and the refused GET moves the store to the new version, so that the next get
/// gives it whole (not the same error again, forever).
#[test]
fn a_replaced_object_is_never_served_as_a_mix() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = pattern(MIB, 3);
    let new = pattern(MIB, 4);
    put(&a, "obj", &old);
    let mut cc = CacheConfig::new(8 * MIB);
    // No readahead: only what is read is cached.
    cc.readahead_max = 0;
    let s = CachedStore::with_config(
        a.clone(),
        PageCache::new(cc).unwrap(),
        CachedStoreConfig {
            chunk: 64 * KIB,
            ..CachedStoreConfig::default()
        },
    )
    .unwrap();
    let p = Path::from("obj");
    rt().block_on(async {
        // The first chunk cached, of the old version.
        s.get_range(&p, 0..64 * KIB as u64).await.unwrap();
        aput(&a, "obj", &new).await;
        // Its first chunk is served from the cache before the miss finds the object replaced:
        // an error, or one version whole.
        match s.get(&p).await.unwrap().bytes().await {
            Ok(b) => assert!(
                b[..] == old[..] || b[..] == new[..],
                "a get of a replaced object gave bytes of neither version whole"
            ),
            Err(e) => assert_eq!(kind(&e), "Precondition", "{e}"),
        }
        // Whatever that gave, the next get gives the new version whole.
        let r = s.get(&p).await.unwrap();
        assert_eq!(r.meta.e_tag, a.head(&p).await.unwrap().e_tag);
        let b = r.bytes().await.expect("the get after the refused GET");
        assert!(b[..] == new[..], "the new version");
    });
}

/// With a TTL, the metadata is checked again (one HEAD) once it is older: the new version's
/// bytes, cached ones of the old version dropped.
#[test]
fn after_the_ttl_a_read_gives_the_new_version() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    put(&a, "obj", &pattern(200_000, 5));
    let s = store(
        &a,
        4 * MIB,
        CachedStoreConfig {
            ttl: Some(Duration::from_millis(150)),
            ..CachedStoreConfig::default()
        },
    );
    let p = Path::from("obj");
    rt().block_on(async {
        assert_eq!(
            &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
            &pattern(200_000, 5)[..]
        );
        let heads = s.stats().meta_requests;
        assert_eq!(heads, 1);
        aput(&a, "obj", &pattern(150_000, 6)).await;
        // Within the TTL: the cached version, no request.
        let b = s.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(&b[..], &pattern(200_000, 5)[..]);
        assert_eq!(s.stats().meta_requests, heads);
        tokio::time::sleep(Duration::from_millis(250)).await;
        let r = s.get(&p).await.unwrap();
        assert_eq!(r.meta.size, 150_000);
        assert_eq!(&r.bytes().await.unwrap()[..], &pattern(150_000, 6)[..]);
        assert_eq!(s.stats().meta_requests, heads + 1, "{}", s.stats());
        assert_eq!(
            s.stats().replaced,
            0,
            "revalidated, not found by a refused GET"
        );
    });
}

/// `CacheHint::Revalidate` checks the version at once; `CacheHint::Bypass` reads the inner
/// store and fills nothing.
#[test]
fn hints_revalidate_at_once_and_bypass_the_cache() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    put(&a, "obj", &pattern(300_000, 7));
    put(&a, "other", &pattern(300_000, 8));
    let s = store(&a, 4 * MIB, CachedStoreConfig::default());
    let (p, q) = (Path::from("obj"), Path::from("other"));
    rt().block_on(async {
        read(&s, &p, GetOptions::default()).await.unwrap();
        aput(&a, "obj", &pattern(300_000, 9)).await;
        let st = s.stats();
        let b = read(&s, &p, hinted(CacheHint::Revalidate)).await.unwrap();
        assert_eq!(&b[..], &pattern(300_000, 9)[..]);
        let now = s.stats();
        assert_eq!(now.meta_requests, st.meta_requests + 1, "{now}");
        // Revalidating an unchanged object keeps its bytes: no GET.
        let b = read(&s, &p, hinted(CacheHint::Revalidate)).await.unwrap();
        assert_eq!(&b[..], &pattern(300_000, 9)[..]);
        assert_eq!(s.stats().get_requests, now.get_requests, "{}", s.stats());

        // Bypass: the inner store's answer, nothing of it cached.
        let st = s.stats();
        let mut o = hinted(CacheHint::Bypass);
        o.range = Some(GetRange::Bounded(1000..5000));
        let r = s.get_opts(&q, o).await.unwrap();
        assert_eq!(r.range, 1000..5000);
        assert_eq!(
            &r.bytes().await.unwrap()[..],
            &pattern(300_000, 8)[1000..5000]
        );
        let now = s.stats();
        assert_eq!(now.bypassed, st.bypassed + 1);
        assert_eq!(
            (
                now.get_requests,
                now.meta_requests,
                now.reads,
                now.bytes_fetched
            ),
            (
                st.get_requests,
                st.meta_requests,
                st.reads,
                st.bytes_fetched
            ),
            "a bypassed read goes through no cache: {now}"
        );
        // So the next plain read of the same bytes misses.
        let b = s.get_range(&q, 1000..5000).await.unwrap();
        assert_eq!(&b[..], &pattern(300_000, 8)[1000..5000]);
        let after = s.stats();
        assert_eq!(after.misses, now.misses + 1, "{after}");
        assert!(after.get_requests > now.get_requests, "{after}");
    });
}

/// A second read of cached bytes sends nothing; heads are answered from the cached metadata.
#[test]
fn cached_reads_and_heads_send_no_request() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let data = pattern(2 * MIB + 123, 10);
    put(&a, "obj", &data);
    let s = store(&a, 16 * MIB, CachedStoreConfig::default());
    let p = Path::from("obj");
    rt().block_on(async {
        let b = s.get(&p).await.unwrap().bytes().await.unwrap();
        assert!(b[..] == data[..]);
        let first = s.stats();
        assert_eq!(
            (first.reads, first.misses, first.hits),
            (1, 1, 0),
            "{first}"
        );
        assert_eq!(first.meta_requests, 1);
        assert!(first.get_requests >= 1);
        assert_eq!(first.bytes_fetched, data.len() as u64, "{first}");
        for _ in 0..3 {
            let b = s.get_range(&p, 100..1_500_000).await.unwrap();
            assert_eq!(&b[..], &data[100..1_500_000]);
            let m = s.head(&p).await.unwrap();
            assert_eq!(m.size, data.len() as u64);
        }
        let rs = s.get_ranges(&p, &[200..300, 1000..900_000]).await.unwrap();
        assert_eq!(&rs[1][..], &data[1000..900_000]);
        let now = s.stats();
        assert_eq!(now.get_requests, first.get_requests, "{now}");
        assert_eq!(now.bytes_fetched, first.bytes_fetched, "{now}");
        assert_eq!(now.meta_requests, 1, "{now}");
        assert_eq!((now.reads, now.hits, now.heads), (5, 4, 3), "{now}");
        assert_eq!(now.heads_cached, 3, "{now}");
        assert_eq!(now.requests_saved(), 4 + 3, "{now}");
        // A head of an object not seen yet is a request, not one saved.
        aput(&a, "other", &data[..10]).await;
        assert_eq!(s.head(&Path::from("other")).await.unwrap().size, 10);
        let last = s.stats();
        assert_eq!((last.heads, last.heads_cached), (4, 3), "{last}");
        assert_eq!(last.requests_saved(), 4 + 3, "{last}");
    });
}

/// Write-through: a put's bytes are cached (the next read sends no GET); with
/// `WritePolicy::Invalidate`, or past `write_through_max`, they are not.
#[test]
fn write_through_and_its_limits() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let p = Path::from("w");
    let small = pattern(500_000, 11);
    let big = pattern(1_500_000, 12);
    rt().block_on(async {
        let s = store(
            &a,
            8 * MIB,
            CachedStoreConfig {
                write_through_max: MIB as u64,
                ..CachedStoreConfig::default()
            },
        );
        s.put(&p, small.clone().into()).await.unwrap();
        assert_eq!(s.stats().written_through, 1);
        let g = s.stats().get_requests;
        assert_eq!(
            &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
            &small[..]
        );
        assert_eq!(s.stats().get_requests, g, "{}", s.stats());
        assert_eq!(s.stats().hits, 1, "{}", s.stats());
        // Larger than write_through_max: not cached, read fresh.
        s.put(&p, big.clone().into()).await.unwrap();
        assert_eq!(s.stats().written_through, 1);
        assert_eq!(
            &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
            &big[..]
        );
        assert!(s.stats().get_requests > g, "{}", s.stats());
        assert_eq!(s.stats().misses, 1, "{}", s.stats());

        let s = store(
            &a,
            8 * MIB,
            CachedStoreConfig {
                write: WritePolicy::Invalidate,
                ..CachedStoreConfig::default()
            },
        );
        s.get(&p).await.unwrap().bytes().await.unwrap();
        s.put(&p, small.clone().into()).await.unwrap();
        assert_eq!(s.stats().written_through, 0);
        let g = s.stats().get_requests;
        assert_eq!(
            &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
            &small[..]
        );
        assert!(s.stats().get_requests > g, "{}", s.stats());
    });
}

/// A multipart upload through the store: its object is read fresh after `complete`, not the
/// version cached before.
#[test]
fn a_multipart_upload_is_read_fresh_after_complete() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = pattern(700_000, 13);
    put(&a, "m", &old);
    let s = store(&a, 8 * MIB, CachedStoreConfig::default());
    let p = Path::from("m");
    rt().block_on(async {
        assert_eq!(
            &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
            &old[..]
        );
        let parts: Vec<Vec<u8>> = (0..3).map(|i| pattern(300_000, 20 + i)).collect();
        let mut u = s.put_multipart(&p).await.unwrap();
        for d in &parts {
            u.put_part(d.clone().into()).await.unwrap();
        }
        // Until complete, the old version.
        assert_eq!(
            &s.get(&p).await.unwrap().bytes().await.unwrap()[..],
            &old[..]
        );
        let r = u.complete().await.unwrap();
        let got = s.get(&p).await.unwrap();
        assert_eq!(got.meta.e_tag, r.e_tag);
        assert_eq!(&got.bytes().await.unwrap()[..], &parts.concat()[..]);
    });
}

/// A disk tier kept across a restart: a new store over the same directory reads what the
/// first one read with no GETs, only the metadata requests.
#[test]
fn the_disk_tier_serves_a_new_store_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let objs: Vec<(Path, Vec<u8>)> = (0..3)
        .map(|i| {
            let d = pattern(3 * MIB + 1000 * i, 30 + i as u64);
            put(&a, &format!("t/{i}"), &d);
            (Path::from(format!("t/{i}")), d)
        })
        .collect();
    let open = || {
        let tier = DiskTier::open(dir.path(), 64 * MIB as u64).unwrap();
        let s = CachedStore::with_tier(
            a.clone(),
            PageCache::new(CacheConfig::new(2 * MIB)).unwrap(),
            CachedStoreConfig::default(),
            tier.clone(),
        )
        .unwrap();
        (s, tier)
    };
    rt().block_on(async {
        let (s, tier) = open();
        for (p, d) in &objs {
            assert_eq!(&s.get(p).await.unwrap().bytes().await.unwrap()[..], &d[..]);
        }
        assert!(s.stats().get_requests > 0);
        tier.drain();
        drop(s);
        drop(tier);

        let (s, tier) = open();
        for (p, d) in &objs {
            assert_eq!(&s.get(p).await.unwrap().bytes().await.unwrap()[..], &d[..]);
            let rs = s
                .get_ranges(p, &[5..10, 2 * MIB as u64..2 * MIB as u64 + 4096])
                .await
                .unwrap();
            assert_eq!(&rs[1][..], &d[2 * MIB..2 * MIB + 4096]);
        }
        let st = s.stats();
        let t = tier.stats();
        assert_eq!(t.corrupt, 0, "{t:?}");
        assert_eq!(st.get_requests, 0, "after a restart: {st}; {t:?}");
        assert_eq!(st.meta_requests, objs.len() as u64, "{st}");
    });
}

/// A store dropped inside an async context — a task of the caller's runtime, as an engine
/// holding an `Arc<dyn ObjectStore>` drops it — does not panic (its own runtime shuts down
/// without blocking).
#[test]
fn the_store_can_be_dropped_inside_a_runtime() {
    let a: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    put(&a, "obj", &pattern(100_000, 50));
    let p = Path::from("obj");
    rt().block_on(async {
        let s = store(&a, MIB, CachedStoreConfig::default());
        s.get(&p).await.unwrap().bytes().await.unwrap();
        drop(s);
    });
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let a2 = a.clone();
    multi
        .block_on(async move {
            tokio::spawn(async move {
                let s: Arc<dyn ObjectStore> =
                    Arc::new(store(&a2, MIB, CachedStoreConfig::default()));
                s.get(&Path::from("obj"))
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
            })
            .await
        })
        .expect("the task dropping the store");
}
