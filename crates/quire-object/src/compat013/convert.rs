//! The conversions between the data types of object_store 0.13 and 0.14, written once (the macro
//! [`conversions!`]) and instantiated for each direction ([`to014`], [`to013`]).
//!
//! The two versions' types are field for field the same, except that 0.14's `PutResult`,
//! `ListResult` and `GetResult` carry `extensions` (what a store passes back to its caller, such
//! as the HTTP response's). Everything converts exactly, except:
//!
//! - those `extensions`, which 0.13 has no place for: dropped going to 0.13, empty coming from it;
//! - a `GetResultPayload::File` (a local file store's answer) becomes a `Stream` reading the same
//!   range of the same file (`GetResult::into_stream`), since whether `File` exists depends on a
//!   feature of each version;
//! - an error variant the other version lacks (0.14's `JoinError`, which 0.13 has only with its
//!   `tokio` feature) becomes `Generic`, with the original error as its source.
//!
//! `http::Extensions`, `bytes::Bytes`, `chrono::DateTime` and the stream types are the same
//! types in both versions (the same major versions of the same crates), and pass unchanged.

use std::fmt;

/// A value of a kind the other version does not know. Not reached with 0.13.2 and 0.14.2, whose
/// kinds are the same; `#[non_exhaustive]` enums need the arm.
#[derive(Debug)]
pub(crate) struct Unconvertible(pub(crate) String);

impl fmt::Display for Unconvertible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no counterpart in the other object_store version: {}",
            self.0
        )
    }
}

impl std::error::Error for Unconvertible {}

/// The conversions from the types of the crate `$from` to those of `$to`. `$name` names the
/// version the values come from (in an error that has no counterpart); `$($new: $val)` are the
/// fields `$to`'s result structs have and `$from`'s lack.
macro_rules! conversions {
    ($from:ident => $to:ident, $name:literal, { $($new:ident: $val:expr),* }) => {
        use std::borrow::Cow;

        use futures::{StreamExt, TryStreamExt};

        use super::Unconvertible;

        /// A path. Both versions check a path by the same rules (their `path` modules are the
        /// same code), so a valid path of one parses unchanged in the other; the fallback, never
        /// taken, keeps the result a valid path.
        pub(crate) fn path(p: &::$from::path::Path) -> ::$to::path::Path {
            ::$to::path::Path::parse(p.as_ref())
                .unwrap_or_else(|_| ::$to::path::Path::from(p.as_ref()))
        }

        pub(crate) fn opt_path(p: Option<&::$from::path::Path>) -> Option<::$to::path::Path> {
            p.map(path)
        }

        pub(crate) fn get_range(r: ::$from::GetRange) -> ::$to::GetRange {
            match r {
                ::$from::GetRange::Bounded(r) => ::$to::GetRange::Bounded(r),
                ::$from::GetRange::Offset(o) => ::$to::GetRange::Offset(o),
                ::$from::GetRange::Suffix(n) => ::$to::GetRange::Suffix(n),
            }
        }

        pub(crate) fn get_options(o: ::$from::GetOptions) -> ::$to::GetOptions {
            let ::$from::GetOptions {
                if_match,
                if_none_match,
                if_modified_since,
                if_unmodified_since,
                range,
                version,
                head,
                extensions,
            } = o;
            ::$to::GetOptions {
                if_match,
                if_none_match,
                if_modified_since,
                if_unmodified_since,
                range: range.map(get_range),
                version,
                head,
                extensions,
            }
        }

        pub(crate) fn meta(m: ::$from::ObjectMeta) -> ::$to::ObjectMeta {
            let ::$from::ObjectMeta {
                location,
                last_modified,
                size,
                e_tag,
                version,
            } = m;
            ::$to::ObjectMeta {
                location: path(&location),
                last_modified,
                size,
                e_tag,
                version,
            }
        }

        pub(crate) fn attribute(
            a: &::$from::Attribute,
        ) -> Result<::$to::Attribute, Unconvertible> {
            use ::$from::Attribute as A;
            use ::$to::Attribute as B;
            Ok(match a {
                A::ContentDisposition => B::ContentDisposition,
                A::ContentEncoding => B::ContentEncoding,
                A::ContentLanguage => B::ContentLanguage,
                A::ContentType => B::ContentType,
                A::CacheControl => B::CacheControl,
                A::StorageClass => B::StorageClass,
                A::Metadata(key) => B::Metadata(Cow::clone(key)),
                other => return Err(Unconvertible(format!("attribute {other:?}"))),
            })
        }

        pub(crate) fn attributes(
            a: &::$from::Attributes,
        ) -> Result<::$to::Attributes, Unconvertible> {
            let mut out = ::$to::Attributes::with_capacity(a.len());
            for (k, v) in a {
                out.insert(attribute(k)?, ::$to::AttributeValue::from(v.to_string()));
            }
            Ok(out)
        }

        /// Tags. A tag set is its form-encoded text, which only `push` writes: decoding it and
        /// pushing the pairs again writes the same text.
        pub(crate) fn tags(t: &::$from::TagSet) -> ::$to::TagSet {
            let mut out = ::$to::TagSet::default();
            for (k, v) in form_urlencoded::parse(t.encoded().as_bytes()) {
                out.push(&k, &v);
            }
            out
        }

        /// A payload: the same `Bytes` (no copy of the data).
        pub(crate) fn payload(p: ::$from::PutPayload) -> ::$to::PutPayload {
            p.into_iter().collect()
        }

        pub(crate) fn put_mode(m: ::$from::PutMode) -> ::$to::PutMode {
            match m {
                ::$from::PutMode::Overwrite => ::$to::PutMode::Overwrite,
                ::$from::PutMode::Create => ::$to::PutMode::Create,
                ::$from::PutMode::Update(::$from::UpdateVersion { e_tag, version }) => {
                    ::$to::PutMode::Update(::$to::UpdateVersion { e_tag, version })
                }
            }
        }

        pub(crate) fn put_options(o: ::$from::PutOptions) -> Result<::$to::PutOptions, Unconvertible> {
            let ::$from::PutOptions {
                mode,
                tags: t,
                attributes: a,
                extensions,
            } = o;
            Ok(::$to::PutOptions {
                mode: put_mode(mode),
                tags: tags(&t),
                attributes: attributes(&a)?,
                extensions,
            })
        }

        pub(crate) fn put_multipart_options(
            o: ::$from::PutMultipartOptions,
        ) -> Result<::$to::PutMultipartOptions, Unconvertible> {
            let ::$from::PutMultipartOptions {
                tags: t,
                attributes: a,
                extensions,
            } = o;
            Ok(::$to::PutMultipartOptions {
                tags: tags(&t),
                attributes: attributes(&a)?,
                extensions,
            })
        }

        pub(crate) fn put_result(r: ::$from::PutResult) -> ::$to::PutResult {
            let ::$from::PutResult { e_tag, version, .. } = r;
            ::$to::PutResult {
                e_tag,
                version,
                $($new: $val,)*
            }
        }

        pub(crate) fn list_result(r: ::$from::ListResult) -> ::$to::ListResult {
            let ::$from::ListResult {
                common_prefixes,
                objects,
                ..
            } = r;
            ::$to::ListResult {
                common_prefixes: common_prefixes.iter().map(path).collect(),
                objects: objects.into_iter().map(meta).collect(),
                $($new: $val,)*
            }
        }

        /// A GET's answer. Its payload becomes a stream of the same bytes (`into_stream` reads a
        /// `File` payload in chunks), whose errors convert as they come.
        pub(crate) fn get_result(
            mut r: ::$from::GetResult,
        ) -> Result<::$to::GetResult, Unconvertible> {
            let attributes = attributes(&r.attributes)?;
            let meta = meta(r.meta.clone());
            let range = r.range.clone();
            r.attributes = Default::default();
            let stream = r.into_stream().map_err(error).boxed();
            Ok(::$to::GetResult {
                payload: ::$to::GetResultPayload::Stream(stream),
                meta,
                range,
                attributes,
                $($new: $val,)*
            })
        }

        pub(crate) fn copy_options(o: ::$from::CopyOptions) -> ::$to::CopyOptions {
            let ::$from::CopyOptions { mode, extensions } = o;
            ::$to::CopyOptions {
                mode: match mode {
                    ::$from::CopyMode::Overwrite => ::$to::CopyMode::Overwrite,
                    ::$from::CopyMode::Create => ::$to::CopyMode::Create,
                },
                extensions,
            }
        }

        pub(crate) fn rename_options(o: ::$from::RenameOptions) -> ::$to::RenameOptions {
            let ::$from::RenameOptions {
                target_mode,
                extensions,
            } = o;
            ::$to::RenameOptions {
                target_mode: match target_mode {
                    ::$from::RenameTargetMode::Overwrite => ::$to::RenameTargetMode::Overwrite,
                    ::$from::RenameTargetMode::Create => ::$to::RenameTargetMode::Create,
                },
                extensions,
            }
        }

        /// A path error, or the error back where the other version has no such variant.
        pub(crate) fn path_error(
            e: ::$from::path::Error,
        ) -> Result<::$to::path::Error, ::$from::path::Error> {
            use ::$from::path::Error as A;
            use ::$to::path::Error as B;
            Ok(match e {
                A::EmptySegment { path } => B::EmptySegment { path },
                // The part in error has no public constructor: the other version's own check
                // of the same text makes it (the same code finds the same first bad part).
                A::BadSegment { path, source } => match ::$to::path::Path::parse(&path) {
                    Err(B::BadSegment {
                        path: again,
                        source: found,
                    }) if again == path && found.to_string() == source.to_string() => {
                        B::BadSegment { path, source: found }
                    }
                    _ => return Err(A::BadSegment { path, source }),
                },
                A::Canonicalize { path, source } => B::Canonicalize { path, source },
                A::InvalidPath { path } => B::InvalidPath { path },
                A::NonUnicode { path, source } => B::NonUnicode { path, source },
                A::PrefixMismatch { path, prefix } => B::PrefixMismatch { path, prefix },
                other => return Err(other),
            })
        }

        /// An error: each variant to its counterpart, with its source; one without a
        /// counterpart becomes `Generic`, the whole error its source.
        pub(crate) fn error(e: ::$from::Error) -> ::$to::Error {
            use ::$from::Error as A;
            use ::$to::Error as B;
            match e {
                A::Generic { store, source } => B::Generic { store, source },
                A::NotFound { path, source } => B::NotFound { path, source },
                A::InvalidPath { source } => match path_error(source) {
                    Ok(source) => B::InvalidPath { source },
                    Err(source) => B::Generic {
                        store: $name,
                        source: Box::new(A::InvalidPath { source }),
                    },
                },
                A::NotSupported { source } => B::NotSupported { source },
                A::AlreadyExists { path, source } => B::AlreadyExists { path, source },
                A::Precondition { path, source } => B::Precondition { path, source },
                A::NotModified { path, source } => B::NotModified { path, source },
                A::NotImplemented {
                    operation,
                    implementer,
                } => B::NotImplemented {
                    operation,
                    implementer,
                },
                A::PermissionDenied { path, source } => B::PermissionDenied { path, source },
                A::Unauthenticated { path, source } => B::Unauthenticated { path, source },
                A::UnknownConfigurationKey { store, key } => {
                    B::UnknownConfigurationKey { store, key }
                }
                other => B::Generic {
                    store: $name,
                    source: Box::new(other),
                },
            }
        }
    };
}

/// From object_store 0.13 to 0.14.
pub(crate) mod to014 {
    conversions!(object_store_013 => object_store, "object_store 0.13", {
        extensions: Default::default()
    });
}

/// From object_store 0.14 to 0.13.
pub(crate) mod to013 {
    conversions!(object_store => object_store_013, "object_store 0.14", {});
}
