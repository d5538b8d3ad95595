//! The adapters between object_store 0.13 and 0.14 (`quire_object::compat013`, feature
//! `object-store-013`, which this crate's own tests turn on): each adapter over an in-memory
//! store of the other version, every operation through it; the values a wrapped store receives
//! (a probe store records them); its own versions of the provided methods called; each error
//! variant kept; and random sequences of operations giving the same answers, byte for byte,
//! through one adapter, through both, and on the plain store.

use std::sync::Arc;

use proptest::prelude::*;
use quire_object::compat013::{As013, As014};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A value put into an `http::Extensions` (the same type in both versions) to see it cross.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Marker(u32);

/// What of a value of version `$os` the tests compare, as text: the two versions' types derive
/// the same `Debug`, so equal values of the two print the same.
macro_rules! norm {
    ($os:ident) => {
        use ::$os::{Attributes, Error, ObjectMeta, PutOptions};

        /// Attributes in a fixed order (a map's own order is its hasher's).
        pub fn attrs(a: &Attributes) -> Vec<String> {
            let mut v: Vec<String> = a.iter().map(|(k, v)| format!("{k:?}={v:?}")).collect();
            v.sort();
            v
        }

        pub fn put_options(o: &PutOptions) -> String {
            format!(
                "{:?} tags={:?} attrs={:?} ext={:?}",
                o.mode,
                o.tags.encoded(),
                attrs(&o.attributes),
                o.extensions.get::<crate::Marker>()
            )
        }

        pub fn meta(m: &ObjectMeta) -> String {
            format!("{} {} {:?} {:?}", m.location, m.size, m.e_tag, m.version)
        }

        /// With the modification time: for a store compared with itself.
        pub fn full_meta(m: &ObjectMeta) -> String {
            format!("{} {}", meta(m), m.last_modified.to_rfc3339())
        }

        /// The variant (and a path error's), and every message down the chain of sources.
        pub fn error(e: &Error) -> String {
            use ::$os::path::Error as P;
            let variant = match e {
                Error::Generic { store, .. } => format!("Generic({store})"),
                Error::NotFound { .. } => "NotFound".into(),
                Error::InvalidPath { source } => match source {
                    P::EmptySegment { .. } => "InvalidPath/EmptySegment".into(),
                    P::BadSegment { .. } => "InvalidPath/BadSegment".into(),
                    P::Canonicalize { .. } => "InvalidPath/Canonicalize".into(),
                    P::InvalidPath { .. } => "InvalidPath/InvalidPath".into(),
                    P::NonUnicode { .. } => "InvalidPath/NonUnicode".into(),
                    P::PrefixMismatch { .. } => "InvalidPath/PrefixMismatch".into(),
                    _ => "InvalidPath/?".into(),
                },
                Error::NotSupported { .. } => "NotSupported".into(),
                Error::AlreadyExists { .. } => "AlreadyExists".into(),
                Error::Precondition { .. } => "Precondition".into(),
                Error::NotModified { .. } => "NotModified".into(),
                Error::NotImplemented { .. } => "NotImplemented".into(),
                Error::PermissionDenied { .. } => "PermissionDenied".into(),
                Error::Unauthenticated { .. } => "Unauthenticated".into(),
                Error::UnknownConfigurationKey { .. } => "UnknownConfigurationKey".into(),
                _ => "other".into(),
            };
            let mut text = format!("{variant}: {e}");
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(&format!(" <- {s}"));
                source = s.source();
            }
            text
        }
    };
}

mod norm13 {
    norm!(object_store_013);
}
mod norm14 {
    norm!(object_store);
}

/// A store of version `$os` over an in-memory one that records each call it gets, with the
/// options it got, and answers a GET of `fail/<what>` with that error.
macro_rules! probe {
    ($os:ident, $norm:ident) => {
        use std::fmt;
        use std::ops::Range;
        use std::sync::Mutex;

        use bytes::Bytes;
        use futures::stream::BoxStream;

        use ::$os::memory::InMemory;
        use ::$os::path::Path;
        use ::$os::{
            CopyOptions, Error, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
            ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
            Result,
        };

        #[derive(Debug, Default)]
        pub struct Probe {
            pub mem: InMemory,
            pub calls: Mutex<Vec<String>>,
        }

        impl Probe {
            fn record(&self, call: String) {
                self.calls.lock().unwrap().push(call);
            }

            pub fn take(&self) -> Vec<String> {
                std::mem::take(&mut *self.calls.lock().unwrap())
            }
        }

        impl fmt::Display for Probe {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "Probe")
            }
        }

        /// The errors a GET of `fail/<what>` answers with: every variant a store may return
        /// (and each kind of path error), each with a source where it has one.
        pub const FAILURES: &[&str] = &[
            "Generic",
            "NotFound",
            "EmptySegment",
            "BadSegment",
            "Canonicalize",
            "InvalidPathBuf",
            "NonUnicode",
            "PrefixMismatch",
            "NotSupported",
            "AlreadyExists",
            "Precondition",
            "NotModified",
            "NotImplemented",
            "PermissionDenied",
            "Unauthenticated",
            "UnknownConfigurationKey",
        ];

        pub fn failure(what: &str) -> Error {
            use ::$os::path::Error as P;
            let path = format!("fail/{what}");
            let source = || format!("the probe's {what}").into();
            let invalid = |source| Error::InvalidPath { source };
            match what {
                "Generic" => Error::Generic {
                    store: "Probe",
                    source: source(),
                },
                "NotFound" => Error::NotFound {
                    path,
                    source: source(),
                },
                "EmptySegment" => invalid(Path::parse("a//b").unwrap_err()),
                "BadSegment" => invalid(Path::parse("a/../b").unwrap_err()),
                "Canonicalize" => invalid(P::Canonicalize {
                    path: "/no/such".into(),
                    source: std::io::Error::from_raw_os_error(libc_enoent()),
                }),
                "InvalidPathBuf" => invalid(P::InvalidPath {
                    path: "relative".into(),
                }),
                "NonUnicode" => invalid(Path::from_url_path("a/%FF").unwrap_err()),
                "PrefixMismatch" => invalid(P::PrefixMismatch {
                    path: "/x/y".into(),
                    prefix: "/z".into(),
                }),
                "NotSupported" => Error::NotSupported { source: source() },
                "AlreadyExists" => Error::AlreadyExists {
                    path,
                    source: source(),
                },
                "Precondition" => Error::Precondition {
                    path,
                    source: source(),
                },
                "NotModified" => Error::NotModified {
                    path,
                    source: source(),
                },
                "NotImplemented" => Error::NotImplemented {
                    operation: "get_opts".into(),
                    implementer: "Probe".into(),
                },
                "PermissionDenied" => Error::PermissionDenied {
                    path,
                    source: source(),
                },
                "Unauthenticated" => Error::Unauthenticated {
                    path,
                    source: source(),
                },
                "UnknownConfigurationKey" => Error::UnknownConfigurationKey {
                    store: "Probe",
                    key: "nope".into(),
                },
                _ => unreachable!("{what}"),
            }
        }

        fn libc_enoent() -> i32 {
            2
        }

        #[async_trait::async_trait]
        impl ObjectStore for Probe {
            async fn put_opts(
                &self,
                location: &Path,
                payload: PutPayload,
                opts: PutOptions,
            ) -> Result<PutResult> {
                self.record(format!(
                    "put_opts {location} {}",
                    crate::$norm::put_options(&opts)
                ));
                self.mem.put_opts(location, payload, opts).await
            }

            async fn put_multipart_opts(
                &self,
                location: &Path,
                opts: PutMultipartOptions,
            ) -> Result<Box<dyn MultipartUpload>> {
                self.record(format!(
                    "put_multipart_opts {location} tags={:?} attrs={:?} ext={:?}",
                    opts.tags.encoded(),
                    crate::$norm::attrs(&opts.attributes),
                    opts.extensions.get::<crate::Marker>()
                ));
                self.mem.put_multipart_opts(location, opts).await
            }

            async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
                self.record(format!(
                    "get_opts {location} {options:?} ext={:?}",
                    options.extensions.get::<crate::Marker>()
                ));
                if let Some(what) = location.as_ref().strip_prefix("fail/") {
                    return Err(failure(what));
                }
                self.mem.get_opts(location, options).await
            }

            async fn get_ranges(
                &self,
                location: &Path,
                ranges: &[Range<u64>],
            ) -> Result<Vec<Bytes>> {
                self.record(format!("get_ranges {location} {ranges:?}"));
                self.mem.get_ranges(location, ranges).await
            }

            fn delete_stream(
                &self,
                locations: BoxStream<'static, Result<Path>>,
            ) -> BoxStream<'static, Result<Path>> {
                self.record("delete_stream".into());
                self.mem.delete_stream(locations)
            }

            fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
                self.record(format!("list {prefix:?}"));
                self.mem.list(prefix)
            }

            fn list_with_offset(
                &self,
                prefix: Option<&Path>,
                offset: &Path,
            ) -> BoxStream<'static, Result<ObjectMeta>> {
                self.record(format!("list_with_offset {prefix:?} {offset}"));
                self.mem.list_with_offset(prefix, offset)
            }

            async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
                self.record(format!("list_with_delimiter {prefix:?}"));
                self.mem.list_with_delimiter(prefix).await
            }

            async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
                self.record(format!(
                    "copy_opts {from} {to} {:?} ext={:?}",
                    options.mode,
                    options.extensions.get::<crate::Marker>()
                ));
                self.mem.copy_opts(from, to, options).await
            }

            async fn rename_opts(
                &self,
                from: &Path,
                to: &Path,
                options: RenameOptions,
            ) -> Result<()> {
                self.record(format!(
                    "rename_opts {from} {to} {:?} ext={:?}",
                    options.target_mode,
                    options.extensions.get::<crate::Marker>()
                ));
                self.mem.rename_opts(from, to, options).await
            }
        }
    };
}

mod probe13 {
    probe!(object_store_013, norm13);
}
mod probe14 {
    probe!(object_store, norm14);
}

/// The tests of one adapter: `$adapter` makes a store of `$o` from one of `$i`.
macro_rules! suite {
    ($m:ident, $adapter:ident: $i:ident => $o:ident, $ni:ident, $no:ident, $probe:ident) => {
        mod $m {
            use std::sync::Arc;

            use futures::{StreamExt, TryStreamExt};

            use ::$i::ObjectStoreExt as _;
            use ::$o::path::Path;
            use ::$o::ObjectStoreExt as _;
            use ::$o::{
                Attribute, Attributes, CopyMode, CopyOptions, Error, GetOptions, GetRange,
                PutMode, PutMultipartOptions, PutOptions, RenameOptions, RenameTargetMode,
                TagSet, UpdateVersion,
            };

            use super::*;

            type Outer = Arc<dyn ::$o::ObjectStore>;
            type Inner = Arc<dyn ::$i::ObjectStore>;

            /// The adapter over an in-memory store of the other version, and that store.
            fn stores() -> (Outer, Inner) {
                let inner: Inner = Arc::new(::$i::memory::InMemory::new());
                (Arc::new($adapter::new(inner.clone())), inner)
            }

            /// The adapter over a probe store of the other version, and the probe.
            fn probed() -> (Outer, Arc<$probe::Probe>) {
                let probe = Arc::new($probe::Probe::default());
                (Arc::new($adapter::new(probe.clone())), probe)
            }

            fn ip(s: &str) -> ::$i::path::Path {
                ::$i::path::Path::parse(s).unwrap()
            }

            fn p(s: &str) -> Path {
                Path::parse(s).unwrap()
            }

            fn every_attribute() -> Attributes {
                [
                    (Attribute::ContentDisposition, "attachment; filename=\"t.csv\""),
                    (Attribute::ContentEncoding, "gzip"),
                    (Attribute::ContentLanguage, "fr-CH"),
                    (Attribute::ContentType, "text/csv"),
                    (Attribute::CacheControl, "max-age=60"),
                    (Attribute::StorageClass, "STANDARD_IA"),
                    (Attribute::Metadata("owner".into()), "quire"),
                    (Attribute::Metadata(String::from("k é").into()), "v é ✓"),
                ]
                .into_iter()
                .collect()
            }

            fn extensions(n: u32) -> ::$o::Extensions {
                let mut e = ::$o::Extensions::new();
                e.insert(Marker(n));
                e
            }

            #[test]
            fn puts_keep_every_attribute_and_each_mode() {
                rt().block_on(async {
                    let (s, inner) = stores();
                    let k = p("dir/k");
                    let attrs = every_attribute();
                    let put = s
                        .put_opts(&k, "hello".into(), attrs.clone().into())
                        .await
                        .unwrap();
                    let got = s.get(&k).await.unwrap();
                    assert_eq!(got.attributes, attrs);
                    assert_eq!(got.meta.e_tag, put.e_tag);
                    let direct = inner.get(&ip("dir/k")).await.unwrap();
                    assert_eq!($ni::attrs(&direct.attributes), $no::attrs(&attrs));
                    assert_eq!(direct.meta.e_tag, put.e_tag);
                    assert_eq!(&got.bytes().await.unwrap()[..], b"hello");

                    let e = s
                        .put_opts(&k, "again".into(), PutMode::Create.into())
                        .await
                        .unwrap_err();
                    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
                    s.put_opts(&p("dir/new"), "new".into(), PutMode::Create.into())
                        .await
                        .unwrap();

                    let current = UpdateVersion::from(put.clone());
                    let put2 = s
                        .put_opts(&k, "v2".into(), PutMode::Update(current.clone()).into())
                        .await
                        .unwrap();
                    assert_ne!(put2.e_tag, put.e_tag);
                    let e = s
                        .put_opts(&k, "v3".into(), PutMode::Update(current).into())
                        .await
                        .unwrap_err();
                    assert!(matches!(e, Error::Precondition { .. }), "{e}");
                    let now = inner.get(&ip("dir/k")).await.unwrap().bytes().await.unwrap();
                    assert_eq!(&now[..], b"v2");
                    assert_eq!(
                        &inner.get(&ip("dir/new")).await.unwrap().bytes().await.unwrap()[..],
                        b"new"
                    );

                    // A payload of several chunks arrives whole.
                    let chunks = [&b"one "[..], b"two ", b"three"].map(bytes::Bytes::from_static);
                    s.put(&k, chunks.into_iter().collect()).await.unwrap();
                    let now = inner.get(&ip("dir/k")).await.unwrap().bytes().await.unwrap();
                    assert_eq!(&now[..], b"one two three");
                });
            }

            #[test]
            fn conditional_gets_answer_not_modified_and_precondition() {
                rt().block_on(async {
                    let (s, _inner) = stores();
                    let k = p("k");
                    s.put(&k, "0123456789".into()).await.unwrap();
                    let meta = s.head(&k).await.unwrap();
                    let tag = meta.e_tag.clone();
                    let get = |o: GetOptions| {
                        let (s, k) = (s.clone(), k.clone());
                        async move { s.get_opts(&k, o).await }
                    };

                    let ok = get(GetOptions::new().with_if_match(tag.clone())).await.unwrap();
                    assert_eq!(&ok.bytes().await.unwrap()[..], b"0123456789");
                    let e = get(GetOptions::new().with_if_match(Some("\"other\"")))
                        .await
                        .unwrap_err();
                    assert!(matches!(e, Error::Precondition { .. }), "{e}");
                    let e = get(GetOptions::new().with_if_none_match(tag.clone()))
                        .await
                        .unwrap_err();
                    assert!(matches!(e, Error::NotModified { .. }), "{e}");
                    let e = get(GetOptions::new().with_if_modified_since(Some(meta.last_modified)))
                        .await
                        .unwrap_err();
                    assert!(matches!(e, Error::NotModified { .. }), "{e}");
                    let mut before = GetOptions::new();
                    before.if_unmodified_since = Some(Default::default());
                    let e = get(before).await.unwrap_err();
                    assert!(matches!(e, Error::Precondition { .. }), "{e}");
                    let ok = get(GetOptions::new().with_if_none_match(Some("\"other\"")))
                        .await
                        .unwrap();
                    assert_eq!(ok.meta, meta);

                    let head = get(GetOptions::new().with_head(true)).await.unwrap();
                    assert_eq!(head.meta, meta);
                    assert_eq!(head.range, 0..10);
                });
            }

            #[test]
            fn every_range_form_reads_what_the_store_reads() {
                rt().block_on(async {
                    let (s, inner) = stores();
                    s.put(&p("k"), "0123456789".into()).await.unwrap();
                    for (range, want, bytes) in [
                        (GetRange::Bounded(2..5), 2..5, &b"234"[..]),
                        (GetRange::Bounded(7..100), 7..10, b"789"),
                        (GetRange::Offset(6), 6..10, b"6789"),
                        (GetRange::Suffix(3), 7..10, b"789"),
                        (GetRange::Suffix(30), 0..10, b"0123456789"),
                    ] {
                        let r = s
                            .get_opts(&p("k"), GetOptions::new().with_range(Some(range.clone())))
                            .await
                            .unwrap();
                        assert_eq!(r.range, want, "{range:?}");
                        assert_eq!(&r.bytes().await.unwrap()[..], bytes, "{range:?}");
                    }
                    assert_eq!(&s.get_range(&p("k"), 1..3).await.unwrap()[..], b"12");
                    let parts = s.get_ranges(&p("k"), &[0..1, 3..6, 9..10]).await.unwrap();
                    assert_eq!(parts, [&b"0"[..], b"345", b"9"]);

                    // Out of range: the store's own error, the same text.
                    let ours = s
                        .get_opts(&p("k"), GetOptions::new().with_range(Some(20..30)))
                        .await
                        .unwrap_err();
                    let theirs = inner
                        .get_opts(
                            &ip("k"),
                            ::$i::GetOptions::new().with_range(Some(20..30)),
                        )
                        .await
                        .unwrap_err();
                    assert_eq!($no::error(&ours), $ni::error(&theirs));
                    let missing = s.get(&p("nothing")).await.unwrap_err();
                    assert!(matches!(missing, Error::NotFound { .. }), "{missing}");
                    let missing = s.head(&p("nothing")).await.unwrap_err();
                    assert!(matches!(missing, Error::NotFound { .. }), "{missing}");
                });
            }

            #[test]
            fn a_multipart_upload_is_read_back_and_an_aborted_one_leaves_nothing() {
                rt().block_on(async {
                    let (s, inner) = stores();
                    let k = p("big");
                    let opts = PutMultipartOptions {
                        attributes: every_attribute(),
                        ..Default::default()
                    };
                    let mut up = s.put_multipart_opts(&k, opts).await.unwrap();
                    let parts: Vec<Vec<u8>> =
                        (0..3u8).map(|i| vec![b'a' + i; 1000 + i as usize]).collect();
                    for part in &parts {
                        up.put_part(part.clone().into()).await.unwrap();
                    }
                    let done = up.complete().await.unwrap();
                    let got = s.get(&k).await.unwrap();
                    assert_eq!(got.meta.e_tag, done.e_tag);
                    assert_eq!(got.attributes, every_attribute());
                    assert_eq!(got.bytes().await.unwrap().to_vec(), parts.concat());
                    let direct = inner.get(&ip("big")).await.unwrap().bytes().await.unwrap();
                    assert_eq!(direct.to_vec(), parts.concat());

                    let mut up = s.put_multipart(&p("gone")).await.unwrap();
                    up.put_part(vec![1u8; 10].into()).await.unwrap();
                    up.abort().await.unwrap();
                    let e = s.head(&p("gone")).await.unwrap_err();
                    assert!(matches!(e, Error::NotFound { .. }), "{e}");
                });
            }

            #[test]
            fn listings_are_the_stores_own() {
                rt().block_on(async {
                    let (s, inner) = stores();
                    for k in ["a", "d/x", "d/y", "d/e/z", "e/%41 {x}", "f"] {
                        s.put(&p(k), k.to_string().into()).await.unwrap();
                    }
                    let ours = |v: Vec<::$o::ObjectMeta>| {
                        v.iter().map($no::full_meta).collect::<Vec<_>>()
                    };
                    let theirs = |v: Vec<::$i::ObjectMeta>| {
                        v.iter().map($ni::full_meta).collect::<Vec<_>>()
                    };
                    for prefix in [None, Some("d"), Some("d/e"), Some("e"), Some("zz")] {
                        let o = s
                            .list(prefix.map(p).as_ref())
                            .try_collect::<Vec<_>>()
                            .await
                            .unwrap();
                        let i = inner
                            .list(prefix.map(ip).as_ref())
                            .try_collect::<Vec<_>>()
                            .await
                            .unwrap();
                        let (mut o, mut i) = (ours(o), theirs(i));
                        o.sort();
                        i.sort();
                        assert_eq!(o, i, "{prefix:?}");

                        let o = s
                            .list_with_offset(prefix.map(p).as_ref(), &p("d/x"))
                            .try_collect::<Vec<_>>()
                            .await
                            .unwrap();
                        let i = inner
                            .list_with_offset(prefix.map(ip).as_ref(), &ip("d/x"))
                            .try_collect::<Vec<_>>()
                            .await
                            .unwrap();
                        let (mut o, mut i) = (ours(o), theirs(i));
                        o.sort();
                        i.sort();
                        assert_eq!(o, i, "{prefix:?} from d/x");

                        let o = s.list_with_delimiter(prefix.map(p).as_ref()).await.unwrap();
                        let i = inner
                            .list_with_delimiter(prefix.map(ip).as_ref())
                            .await
                            .unwrap();
                        let names = |v: Vec<String>| v;
                        assert_eq!(
                            names(o.common_prefixes.iter().map(|p| p.to_string()).collect()),
                            names(i.common_prefixes.iter().map(|p| p.to_string()).collect()),
                        );
                        assert_eq!(ours(o.objects), theirs(i.objects), "{prefix:?}");
                    }
                    let d = s.list_with_delimiter(Some(&p("d"))).await.unwrap();
                    assert_eq!(d.common_prefixes, [p("d/e")]);
                    let names: Vec<_> = d.objects.iter().map(|m| m.location.to_string()).collect();
                    assert_eq!(names, ["d/x", "d/y"]);
                });
            }

            #[test]
            fn copy_and_rename_in_both_modes() {
                rt().block_on(async {
                    let (s, inner) = stores();
                    let read = |k: &'static str| {
                        let inner = inner.clone();
                        async move {
                            match inner.get(&ip(k)).await {
                                Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
                                Err(::$i::Error::NotFound { .. }) => None,
                                Err(e) => panic!("{k}: {e}"),
                            }
                        }
                    };
                    s.put(&p("a"), "A".into()).await.unwrap();
                    s.put(&p("b"), "B".into()).await.unwrap();

                    s.copy(&p("a"), &p("c")).await.unwrap();
                    assert_eq!(read("c").await.as_deref(), Some(&b"A"[..]));
                    s.copy(&p("b"), &p("c")).await.unwrap();
                    assert_eq!(read("c").await.as_deref(), Some(&b"B"[..]));
                    let e = s.copy_if_not_exists(&p("a"), &p("c")).await.unwrap_err();
                    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
                    let create = CopyOptions::new().with_mode(CopyMode::Create);
                    s.copy_opts(&p("a"), &p("d"), create).await.unwrap();
                    assert_eq!(read("d").await.as_deref(), Some(&b"A"[..]));

                    s.rename(&p("d"), &p("c")).await.unwrap();
                    assert_eq!(read("c").await.as_deref(), Some(&b"A"[..]));
                    assert_eq!(read("d").await, None);
                    let e = s.rename_if_not_exists(&p("b"), &p("c")).await.unwrap_err();
                    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
                    assert_eq!(read("b").await.as_deref(), Some(&b"B"[..]), "kept");
                    let create = RenameOptions::new().with_target_mode(RenameTargetMode::Create);
                    s.rename_opts(&p("b"), &p("e"), create).await.unwrap();
                    assert_eq!(read("e").await.as_deref(), Some(&b"B"[..]));
                    assert_eq!(read("b").await, None);
                    let e = s.copy(&p("nothing"), &p("x")).await.unwrap_err();
                    assert!(matches!(e, Error::NotFound { .. }), "{e}");
                });
            }

            #[test]
            fn delete_stream_deletes_and_passes_errors_through() {
                rt().block_on(async {
                    let (s, inner) = stores();
                    for k in ["a", "b", "c"] {
                        s.put(&p(k), "x".into()).await.unwrap();
                    }
                    let input: Vec<::$o::Result<Path>> = vec![
                        Ok(p("a")),
                        Err(Error::NotFound {
                            path: "z".into(),
                            source: "from the caller".into(),
                        }),
                        Ok(p("b")),
                        Ok(p("missing")),
                    ];
                    let out: Vec<_> = s
                        .delete_stream(futures::stream::iter(input).boxed())
                        .collect()
                        .await;
                    let out: Vec<String> = out
                        .iter()
                        .map(|r| match r {
                            Ok(p) => p.to_string(),
                            Err(e) => $no::error(e),
                        })
                        .collect();
                    assert_eq!(
                        out,
                        [
                            "a",
                            "NotFound: Object at location z not found: from the caller \
                             <- from the caller",
                            "b",
                            "missing"
                        ]
                    );
                    let left: Vec<_> = inner.list(None).try_collect().await.unwrap();
                    let left: Vec<_> = left.iter().map(|m| m.location.to_string()).collect();
                    assert_eq!(left, ["c"]);
                    s.delete(&p("c")).await.unwrap();
                    assert!(inner.list(None).next().await.is_none());
                });
            }

            #[test]
            fn every_error_variant_keeps_its_variant_and_its_source() {
                rt().block_on(async {
                    let (s, _probe) = probed();
                    for what in $probe::FAILURES {
                        let want = $probe::failure(what);
                        let got = s.get(&p(&format!("fail/{what}"))).await.unwrap_err();
                        assert_eq!($no::error(&got), $ni::error(&want), "{what}");
                    }
                });
            }

            #[test]
            fn the_wrapped_stores_own_provided_methods_run() {
                rt().block_on(async {
                    let (s, probe) = probed();
                    s.put(&p("k"), "0123456789".into()).await.unwrap();
                    s.put(&p("j"), "j".into()).await.unwrap();
                    probe.take();

                    let parts = s.get_ranges(&p("k"), &[0..2, 5..7]).await.unwrap();
                    assert_eq!(parts, [&b"01"[..], b"56"]);
                    assert_eq!(probe.take(), ["get_ranges k [0..2, 5..7]"]);

                    let v: Vec<_> = s
                        .list_with_offset(None, &p("j"))
                        .try_collect()
                        .await
                        .unwrap();
                    assert_eq!(v.len(), 1);
                    assert_eq!(probe.take(), ["list_with_offset None j"]);

                    s.rename_opts(&p("k"), &p("m"), RenameOptions::new()).await.unwrap();
                    assert_eq!(probe.take(), ["rename_opts k m Overwrite ext=None"]);
                });
            }

            #[test]
            fn options_reach_the_wrapped_store_unchanged() {
                rt().block_on(async {
                    let (s, probe) = probed();
                    let mut tags = TagSet::default();
                    tags.push("team", "storage & cache");
                    tags.push("a/b=c", " +%é");
                    let opts = PutOptions {
                        mode: PutMode::Update(UpdateVersion {
                            e_tag: Some("\"7\"".into()),
                            version: Some("v7".into()),
                        }),
                        tags: tags.clone(),
                        attributes: every_attribute(),
                        extensions: extensions(1),
                    };
                    let want = format!("put_opts k {}", $no::put_options(&opts));
                    let _ = s.put_opts(&p("k"), "x".into(), opts).await;
                    assert_eq!(probe.take(), [want]);

                    let opts = PutMultipartOptions {
                        tags: tags.clone(),
                        attributes: every_attribute(),
                        extensions: extensions(2),
                    };
                    let want = format!(
                        "put_multipart_opts k tags={:?} attrs={:?} ext=Some(Marker(2))",
                        tags.encoded(),
                        $no::attrs(&every_attribute())
                    );
                    s.put_multipart_opts(&p("k"), opts).await.unwrap().abort().await.unwrap();
                    assert_eq!(probe.take(), [want]);

                    let opts = GetOptions {
                        if_match: Some("\"1\"".into()),
                        if_none_match: Some("\"2\"".into()),
                        if_modified_since: Some(Default::default()),
                        if_unmodified_since: Some(Default::default()),
                        range: Some(GetRange::Suffix(5)),
                        version: Some("v1".into()),
                        head: true,
                        extensions: extensions(3),
                    };
                    let want = format!("get_opts k {opts:?} ext=Some(Marker(3))");
                    let _ = s.get_opts(&p("k"), opts).await;
                    for range in [GetRange::Bounded(1..2), GetRange::Offset(3)] {
                        let _ = s.get_opts(&p("k"), GetOptions::new().with_range(Some(range))).await;
                    }
                    let calls = probe.take();
                    assert_eq!(calls[0], want);
                    assert!(calls[1].contains("range: Some(Bounded(1..2))"), "{}", calls[1]);
                    assert!(calls[2].contains("range: Some(Offset(3))"), "{}", calls[2]);

                    let opts = CopyOptions::new()
                        .with_mode(CopyMode::Create)
                        .with_extensions(extensions(4));
                    let _ = s.copy_opts(&p("a"), &p("b"), opts).await;
                    let opts = RenameOptions::new()
                        .with_target_mode(RenameTargetMode::Create)
                        .with_extensions(extensions(5));
                    let _ = s.rename_opts(&p("a"), &p("b"), opts).await;
                    assert_eq!(
                        probe.take(),
                        [
                            "copy_opts a b Create ext=Some(Marker(4))",
                            "rename_opts a b Create ext=Some(Marker(5))"
                        ]
                    );
                });
            }

            #[test]
            fn display_names_the_adapter_and_the_store() {
                let (s, _) = probed();
                assert_eq!(s.to_string(), concat!(stringify!($adapter), "(Probe)"));
            }
        }
    };
}

suite!(as014, As014: object_store_013 => object_store, norm13, norm14, probe13);
suite!(as013, As013: object_store => object_store_013, norm14, norm13, probe14);

/// 0.14's `JoinError` (a task that panicked): 0.13 has the variant only with its `tokio`
/// feature, so it arrives as `Generic`, the error its source.
#[test]
fn a_join_error_arrives_as_generic_with_the_error_its_source() {
    use object_store_013::ObjectStoreExt as _;

    #[derive(Debug)]
    struct Panics;
    impl std::fmt::Display for Panics {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Panics")
        }
    }
    #[async_trait::async_trait]
    impl object_store::ObjectStore for Panics {
        async fn put_opts(
            &self,
            _: &object_store::path::Path,
            _: object_store::PutPayload,
            _: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            let e = tokio::spawn(async { panic!("on purpose") })
                .await
                .unwrap_err();
            Err(e.into())
        }
        async fn put_multipart_opts(
            &self,
            _: &object_store::path::Path,
            _: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            unimplemented!()
        }
        async fn get_opts(
            &self,
            _: &object_store::path::Path,
            _: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            unimplemented!()
        }
        fn delete_stream(
            &self,
            _: futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::path::Path>>
        {
            unimplemented!()
        }
        fn list(
            &self,
            _: Option<&object_store::path::Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            unimplemented!()
        }
        async fn list_with_delimiter(
            &self,
            _: Option<&object_store::path::Path>,
        ) -> object_store::Result<object_store::ListResult> {
            unimplemented!()
        }
        async fn copy_opts(
            &self,
            _: &object_store::path::Path,
            _: &object_store::path::Path,
            _: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            unimplemented!()
        }
    }

    let s = As013::new(Arc::new(Panics));
    let e = rt().block_on(s.put(&"k".into(), "x".into())).unwrap_err();
    let text = norm13::error(&e);
    assert!(
        text.starts_with("Generic(object_store 0.14): Generic object_store 0.14 error: Error joining spawned task: task ")
            && text.contains("panicked")
            && text.contains(" <- Error joining spawned task: "),
        "{text}"
    );
}

/// A local file store answers a GET with a file (`GetResultPayload::File`), which 0.13 has only
/// with its `fs` feature: it arrives as a stream of the same range of the file.
#[test]
fn a_file_answer_arrives_as_the_same_bytes() {
    use object_store::ObjectStoreExt as _;
    use object_store_013::{ObjectStore as _, ObjectStoreExt as _};

    let dir = tempfile::tempdir().unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    rt().block_on(async {
        let key = object_store::path::Path::from("f.bin");
        local.put(&key, data.clone().into()).await.unwrap();
        let answer = local.get(&key).await.unwrap();
        assert!(
            matches!(answer.payload, object_store::GetResultPayload::File(..)),
            "the local store answers with its file"
        );

        let s = As013::new(Arc::new(local));
        let key = object_store_013::path::Path::from("f.bin");
        let whole = s.get(&key).await.unwrap();
        assert_eq!(whole.range, 0..100_000);
        assert_eq!(whole.bytes().await.unwrap(), data);
        let part = s.get_range(&key, 40_000..40_123).await.unwrap();
        assert_eq!(part, data[40_000..40_123]);
        let tail = s
            .get_opts(
                &key,
                object_store_013::GetOptions::new()
                    .with_range(Some(object_store_013::GetRange::Suffix(10))),
            )
            .await
            .unwrap();
        assert_eq!(tail.range, 99_990..100_000);
        assert_eq!(tail.bytes().await.unwrap(), data[99_990..]);
    });
}

/// `cached`: a 0.13 store behind the cache as a 0.13 store, reads byte for byte the store's,
/// a second read sent nowhere; and a `CacheHint` put in 0.13's options reaches the cache.
#[test]
fn a_cached_013_store_reads_through_the_cache() {
    use object_store_013::{GetOptions, GetRange, ObjectStore, ObjectStoreExt as _};
    use quire::{CacheConfig, PageCache};
    use quire_object::compat013::{cached, As014};
    use quire_object::{CacheHint, CachedStore};

    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let rt = rt();
    let key = object_store_013::path::Path::from("t/part-0.parquet");
    let mem = || PageCache::new(CacheConfig::new(32 << 20)).unwrap();

    let probe = Arc::new(probe13::Probe::default());
    rt.block_on(probe.put(&key, data.clone().into())).unwrap();
    probe.take();
    let s = cached(probe.clone(), mem()).unwrap();
    rt.block_on(async {
        for range in [
            GetRange::Bounded(10..100_000),
            GetRange::Offset(2_000_000),
            GetRange::Suffix(8),
        ] {
            let opts = GetOptions::new().with_range(Some(range.clone()));
            let ours = s.get_opts(&key, opts.clone()).await.unwrap();
            let theirs = probe.mem.get_opts(&key, opts).await.unwrap();
            assert_eq!(ours.range, theirs.range, "{range:?}");
            assert_eq!(ours.bytes().await.unwrap(), theirs.bytes().await.unwrap());
        }
        assert_eq!(s.get(&key).await.unwrap().bytes().await.unwrap(), data);
        assert!(!probe.take().is_empty(), "the first reads reach the store");
        assert_eq!(s.get(&key).await.unwrap().bytes().await.unwrap(), data);
        assert_eq!(s.head(&key).await.unwrap().size, 3_000_000);
        assert_eq!(probe.take(), Vec::<String>::new(), "cached: nothing sent");
    });

    // The long form keeps the CachedStore for its counters.
    let store = CachedStore::new(Arc::new(As014::new(probe.clone())), mem()).unwrap();
    let s = As013::new(Arc::new(store.clone()));
    rt.block_on(async {
        s.get(&key).await.unwrap().bytes().await.unwrap();
        let mut bypass = GetOptions::new().with_range(Some(0..10));
        bypass.extensions.insert(CacheHint::Bypass);
        let r = s.get_opts(&key, bypass).await.unwrap();
        assert_eq!(r.bytes().await.unwrap(), data[..10]);
    });
    let stats = store.stats();
    assert_eq!(stats.bypassed, 1, "{stats}");
    assert!(stats.reads >= 1, "{stats}");
}

/// Keys with the characters a path keeps as they are (`%`, braces, spaces, non-ASCII).
const KEYS: &[&str] = &["a", "b", "d/x", "d/y", "d/e/z", "e/%41 {x}", "e/ü ✓"];
const PREFIXES: &[&str] = &["d", "d/e", "e", "zz"];

#[derive(Debug, Clone)]
enum Op {
    /// `mode`: 0 overwrite, 1 create, 2 update of the current version, 3 of a stale one.
    Put {
        key: usize,
        data: Vec<u8>,
        mode: u8,
    },
    /// `cond`: 0 none, 1 if-match current, 2 if-match stale, 3 if-none-match current,
    /// 4 if-modified-since its time, 5 if-unmodified-since the epoch, 6 head only.
    /// `range`: (0 bounded a..b, 1 offset a, 2 suffix a).
    Get {
        key: usize,
        range: Option<(u8, u64, u64)>,
        cond: u8,
    },
    GetRanges {
        key: usize,
        ranges: Vec<(u64, u64)>,
    },
    Head {
        key: usize,
    },
    Multipart {
        key: usize,
        parts: Vec<Vec<u8>>,
        abort: bool,
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
    Delete {
        keys: Vec<usize>,
    },
    List {
        prefix: Option<usize>,
        offset: Option<usize>,
    },
    ListDelimiter {
        prefix: Option<usize>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let data = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        3 => (key.clone(), data.clone(), 0..4u8).prop_map(|(key, data, mode)| Op::Put { key, data, mode }),
        3 => (key.clone(), proptest::option::of((0..3u8, 0..50u64, 0..50u64)), 0..7u8)
            .prop_map(|(key, range, cond)| Op::Get { key, range, cond }),
        1 => (key.clone(), proptest::collection::vec((0..50u64, 0..50u64), 0..4))
            .prop_map(|(key, ranges)| Op::GetRanges { key, ranges }),
        1 => key.clone().prop_map(|key| Op::Head { key }),
        1 => (key.clone(), proptest::collection::vec(data.clone(), 0..4), any::<bool>())
            .prop_map(|(key, parts, abort)| Op::Multipart { key, parts, abort }),
        1 => (key.clone(), key.clone(), any::<bool>()).prop_map(|(from, to, create)| Op::Copy { from, to, create }),
        1 => (key.clone(), key.clone(), any::<bool>()).prop_map(|(from, to, create)| Op::Rename { from, to, create }),
        1 => proptest::collection::vec(key.clone(), 0..3).prop_map(|keys| Op::Delete { keys }),
        1 => (proptest::option::of(0..PREFIXES.len()), proptest::option::of(key.clone()))
            .prop_map(|(prefix, offset)| Op::List { prefix, offset }),
        1 => proptest::option::of(0..PREFIXES.len()).prop_map(|prefix| Op::ListDelimiter { prefix }),
    ]
}

/// Runs operations on a store of version `$os`, each answer as text (no modification times:
/// the stores compared are different stores).
macro_rules! runner {
    ($os:ident, $norm:ident) => {
        use std::sync::Arc;

        use futures::{StreamExt, TryStreamExt};

        use ::$os::path::Path;
        use ::$os::{
            CopyMode, CopyOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt as _, PutMode,
            PutOptions, RenameOptions, RenameTargetMode, Result, UpdateVersion,
        };

        use crate::{$norm as norm, Op, KEYS, PREFIXES};

        fn text<T>(r: Result<T>, ok: impl FnOnce(T) -> String) -> String {
            match r {
                Ok(v) => format!("ok {}", ok(v)),
                Err(e) => format!("err {}", norm::error(&e)),
            }
        }

        /// A payload of several chunks (as one built from a stream of writes is).
        fn chunked(data: &[u8]) -> ::$os::PutPayload {
            data.chunks(7).map(bytes::Bytes::copy_from_slice).collect()
        }

        fn key(i: usize) -> Path {
            Path::parse(KEYS[i]).unwrap()
        }

        fn prefix(i: Option<usize>) -> Option<Path> {
            i.map(|i| Path::parse(PREFIXES[i]).unwrap())
        }

        pub async fn run(s: &Arc<dyn ObjectStore>, ops: &[Op]) -> Vec<String> {
            let mut out = Vec::new();
            for op in ops {
                out.push(apply(s, op).await);
            }
            // The end state: every object, read whole.
            for i in 0..KEYS.len() {
                out.push(
                    apply(
                        s,
                        &Op::Get {
                            key: i,
                            range: None,
                            cond: 0,
                        },
                    )
                    .await,
                );
            }
            out
        }

        async fn apply(s: &Arc<dyn ObjectStore>, op: &Op) -> String {
            match op {
                Op::Put { key: k, data, mode } => {
                    let current = s.head(&key(*k)).await.ok();
                    let mode = match mode {
                        0 => PutMode::Overwrite,
                        1 => PutMode::Create,
                        2 => PutMode::Update(UpdateVersion {
                            e_tag: current.and_then(|m| m.e_tag),
                            version: None,
                        }),
                        _ => PutMode::Update(UpdateVersion {
                            e_tag: Some("\"stale\"".into()),
                            version: None,
                        }),
                    };
                    let opts = PutOptions {
                        mode,
                        ..Default::default()
                    };
                    let r = s.put_opts(&key(*k), chunked(data), opts).await;
                    text(r, |r| format!("{:?} {:?}", r.e_tag, r.version))
                }
                Op::Get {
                    key: k,
                    range,
                    cond,
                } => {
                    let current = s.head(&key(*k)).await.ok();
                    let mut o = GetOptions::new();
                    match cond {
                        1 => o.if_match = current.and_then(|m| m.e_tag),
                        2 => o.if_match = Some("\"stale\"".into()),
                        3 => o.if_none_match = current.and_then(|m| m.e_tag),
                        4 => o.if_modified_since = current.map(|m| m.last_modified),
                        5 => o.if_unmodified_since = Some(Default::default()),
                        6 => o.head = true,
                        _ => {}
                    }
                    o.range = range.map(|(kind, a, b)| match kind {
                        0 => GetRange::Bounded(a..b),
                        1 => GetRange::Offset(a),
                        _ => GetRange::Suffix(a),
                    });
                    let head = o.head;
                    // A failed date condition's message holds the object's time, which differs
                    // between the stores compared: its variant only.
                    let dated = matches!(cond, 4 | 5);
                    match s.get_opts(&key(*k), o).await {
                        Ok(r) => {
                            let meta = norm::meta(&r.meta);
                            let attrs = norm::attrs(&r.attributes);
                            let range = r.range.clone();
                            let body = if head {
                                "head".to_string()
                            } else {
                                text(r.bytes().await, |b| format!("{:?}", &b[..]))
                            };
                            format!("ok {meta} {attrs:?} {range:?} {body}")
                        }
                        Err(e) if dated => {
                            let e = norm::error(&e);
                            format!("err {}", e.split(':').next().unwrap_or_default())
                        }
                        Err(e) => format!("err {}", norm::error(&e)),
                    }
                }
                Op::GetRanges { key: k, ranges } => {
                    let ranges: Vec<_> = ranges.iter().map(|&(a, b)| a..b).collect();
                    let r = s.get_ranges(&key(*k), &ranges).await;
                    text(r, |v| {
                        format!("{:?}", v.iter().map(|b| &b[..]).collect::<Vec<_>>())
                    })
                }
                Op::Head { key: k } => text(s.head(&key(*k)).await, |m| norm::meta(&m)),
                Op::Multipart {
                    key: k,
                    parts,
                    abort,
                } => {
                    let mut up = match s.put_multipart(&key(*k)).await {
                        Ok(up) => up,
                        Err(e) => return format!("err {}", norm::error(&e)),
                    };
                    for part in parts {
                        if let Err(e) = up.put_part(chunked(part)).await {
                            return format!("err part {}", norm::error(&e));
                        }
                    }
                    if *abort {
                        text(up.abort().await, |_| "aborted".into())
                    } else {
                        text(up.complete().await, |r| {
                            format!("{:?} {:?}", r.e_tag, r.version)
                        })
                    }
                }
                Op::Copy { from, to, create } => {
                    let mode = if *create {
                        CopyMode::Create
                    } else {
                        CopyMode::Overwrite
                    };
                    let o = CopyOptions::new().with_mode(mode);
                    text(s.copy_opts(&key(*from), &key(*to), o).await, |_| {
                        "copied".into()
                    })
                }
                Op::Rename { from, to, create } => {
                    let mode = if *create {
                        RenameTargetMode::Create
                    } else {
                        RenameTargetMode::Overwrite
                    };
                    let o = RenameOptions::new().with_target_mode(mode);
                    text(s.rename_opts(&key(*from), &key(*to), o).await, |_| {
                        "renamed".into()
                    })
                }
                Op::Delete { keys } => {
                    let input: Vec<Result<Path>> = keys.iter().map(|&k| Ok(key(k))).collect();
                    let out: Vec<String> = s
                        .delete_stream(futures::stream::iter(input).boxed())
                        .map(|r| text(r, |p| p.to_string()))
                        .collect()
                        .await;
                    format!("{out:?}")
                }
                Op::List {
                    prefix: pre,
                    offset,
                } => {
                    let pre = prefix(*pre);
                    let r: Result<Vec<_>> = match offset {
                        Some(o) => {
                            s.list_with_offset(pre.as_ref(), &key(*o))
                                .try_collect()
                                .await
                        }
                        None => s.list(pre.as_ref()).try_collect().await,
                    };
                    text(r, |v| {
                        let mut v: Vec<_> = v.iter().map(norm::meta).collect();
                        v.sort();
                        format!("{v:?}")
                    })
                }
                Op::ListDelimiter { prefix: pre } => {
                    let r = s.list_with_delimiter(prefix(*pre).as_ref()).await;
                    text(r, |l| {
                        let dirs: Vec<_> =
                            l.common_prefixes.iter().map(|p| p.to_string()).collect();
                        let objects: Vec<_> = l.objects.iter().map(norm::meta).collect();
                        format!("{dirs:?} {objects:?}")
                    })
                }
            }
        }

        /// Every object with its modification time: for a store and an adapter over it.
        pub async fn full_list(s: &Arc<dyn ObjectStore>) -> Vec<String> {
            let mut v: Vec<String> = s
                .list(None)
                .map_ok(|m| norm::full_meta(&m))
                .try_collect()
                .await
                .unwrap();
            v.sort();
            v
        }
    };
}

mod run13 {
    runner!(object_store_013, norm13);
}
mod run14 {
    runner!(object_store, norm14);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// On a 0.14 store: the plain store, the store as 0.13 (`As013`) and back as 0.14
    /// (`As014` over `As013`) answer every operation the same, byte for byte; and listing the
    /// store through the adapter gives the store's own listing, times included.
    #[test]
    fn operations_through_the_adapters_answer_as_the_plain_store(
        ops in proptest::collection::vec(op(), 1..24)
    ) {
        rt().block_on(async {
            let plain14: Arc<dyn object_store::ObjectStore> =
                Arc::new(object_store::memory::InMemory::new());
            let base14: Arc<dyn object_store::ObjectStore> =
                Arc::new(object_store::memory::InMemory::new());
            let once13: Arc<dyn object_store_013::ObjectStore> =
                Arc::new(As013::new(base14.clone()));
            let twice14: Arc<dyn object_store::ObjectStore> = Arc::new(As014::new(Arc::new(
                As013::new(Arc::new(object_store::memory::InMemory::new())),
            )));
            let want = run14::run(&plain14, &ops).await;
            prop_assert_eq!(&run13::run(&once13, &ops).await, &want);
            prop_assert_eq!(&run14::run(&twice14, &ops).await, &want);
            prop_assert_eq!(run13::full_list(&once13).await, run14::full_list(&base14).await);

            // The same on a 0.13 store.
            let plain13: Arc<dyn object_store_013::ObjectStore> =
                Arc::new(object_store_013::memory::InMemory::new());
            let base13: Arc<dyn object_store_013::ObjectStore> =
                Arc::new(object_store_013::memory::InMemory::new());
            let once14: Arc<dyn object_store::ObjectStore> = Arc::new(As014::new(base13.clone()));
            let twice13: Arc<dyn object_store_013::ObjectStore> = Arc::new(As013::new(Arc::new(
                As014::new(Arc::new(object_store_013::memory::InMemory::new())),
            )));
            let want = run13::run(&plain13, &ops).await;
            prop_assert_eq!(&run14::run(&once14, &ops).await, &want);
            prop_assert_eq!(&run13::run(&twice13, &ops).await, &want);
            prop_assert_eq!(run14::full_list(&once14).await, run13::full_list(&base13).await);
            Ok(())
        })?;
    }
}

/// The probe itself records what it is given (so the tests above that read its records can
/// fail).
#[test]
fn the_probe_records_its_calls() {
    use object_store::{ObjectStore as _, ObjectStoreExt as _};
    let probe = probe14::Probe::default();
    rt().block_on(async {
        probe.put(&"k".into(), "x".into()).await.unwrap();
        let _ = probe.get_ranges(&"k".into(), &[0..1, 2..3]).await;
    });
    let calls = probe.take();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].starts_with("put_opts k Overwrite"), "{calls:?}");
    assert_eq!(calls[1], "get_ranges k [0..1, 2..3]");
}
