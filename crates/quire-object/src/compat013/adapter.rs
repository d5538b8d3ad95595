//! The two adapters, written once (the macro [`adapter!`]): a store of one version seen through
//! the other version's trait, every method delegated to the same method of the wrapped store.

/// `$name`: an `Arc<dyn $inner::ObjectStore>` as a `$outer::ObjectStore`. Arguments go down
/// through the conversions `$down` (outer to inner), answers come up through `$up`.
macro_rules! adapter {
    ($name:ident: $inner:ident => $outer:ident, down: $down:ident, up: $up:ident,
     $(#[$doc:meta])*) => {
        use std::fmt;
        use std::ops::Range;
        use std::sync::Arc;

        use bytes::Bytes;
        use futures::stream::BoxStream;
        use futures::{FutureExt, StreamExt};

        use ::$outer::path::Path;
        use ::$outer::{
            CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
            PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
            UploadPart,
        };

        use crate::compat013::convert::{$down, $up, Unconvertible};

        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            inner: Arc<dyn ::$inner::ObjectStore>,
        }

        impl $name {
            /// Wraps `inner`.
            pub fn new(inner: Arc<dyn ::$inner::ObjectStore>) -> Self {
                Self { inner }
            }

            /// The wrapped store.
            pub fn inner(&self) -> &Arc<dyn ::$inner::ObjectStore> {
                &self.inner
            }

            /// The wrapped store, unwrapped.
            pub fn into_inner(self) -> Arc<dyn ::$inner::ObjectStore> {
                self.inner
            }
        }

        impl From<Arc<dyn ::$inner::ObjectStore>> for $name {
            fn from(inner: Arc<dyn ::$inner::ObjectStore>) -> Self {
                Self::new(inner)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.inner)
            }
        }

        /// An option the wrapped store's version cannot express.
        fn unsupported(e: Unconvertible) -> ::$outer::Error {
            ::$outer::Error::NotSupported {
                source: Box::new(e),
            }
        }

        #[async_trait::async_trait]
        impl ::$outer::ObjectStore for $name {
            async fn put_opts(
                &self,
                location: &Path,
                payload: PutPayload,
                opts: PutOptions,
            ) -> Result<PutResult> {
                let opts = $down::put_options(opts).map_err(unsupported)?;
                let location = $down::path(location);
                let r = self
                    .inner
                    .put_opts(&location, $down::payload(payload), opts)
                    .await
                    .map_err($up::error)?;
                Ok($up::put_result(r))
            }

            async fn put_multipart_opts(
                &self,
                location: &Path,
                opts: PutMultipartOptions,
            ) -> Result<Box<dyn MultipartUpload>> {
                let opts = $down::put_multipart_options(opts).map_err(unsupported)?;
                let location = $down::path(location);
                let upload = self
                    .inner
                    .put_multipart_opts(&location, opts)
                    .await
                    .map_err($up::error)?;
                Ok(Box::new(Upload(upload)))
            }

            async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
                let location = $down::path(location);
                let r = self
                    .inner
                    .get_opts(&location, $down::get_options(options))
                    .await
                    .map_err($up::error)?;
                $up::get_result(r).map_err(unsupported)
            }

            async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
                let location = $down::path(location);
                self.inner
                    .get_ranges(&location, ranges)
                    .await
                    .map_err($up::error)
            }

            fn delete_stream(
                &self,
                locations: BoxStream<'static, Result<Path>>,
            ) -> BoxStream<'static, Result<Path>> {
                let locations = locations
                    .map(|r| r.map(|p| $down::path(&p)).map_err($down::error))
                    .boxed();
                self.inner
                    .delete_stream(locations)
                    .map(|r| r.map(|p| $up::path(&p)).map_err($up::error))
                    .boxed()
            }

            fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
                let prefix = $down::opt_path(prefix);
                self.inner
                    .list(prefix.as_ref())
                    .map(|r| r.map($up::meta).map_err($up::error))
                    .boxed()
            }

            fn list_with_offset(
                &self,
                prefix: Option<&Path>,
                offset: &Path,
            ) -> BoxStream<'static, Result<ObjectMeta>> {
                let prefix = $down::opt_path(prefix);
                let offset = $down::path(offset);
                self.inner
                    .list_with_offset(prefix.as_ref(), &offset)
                    .map(|r| r.map($up::meta).map_err($up::error))
                    .boxed()
            }

            async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
                let prefix = $down::opt_path(prefix);
                self.inner
                    .list_with_delimiter(prefix.as_ref())
                    .await
                    .map($up::list_result)
                    .map_err($up::error)
            }

            async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
                let (from, to) = ($down::path(from), $down::path(to));
                self.inner
                    .copy_opts(&from, &to, $down::copy_options(options))
                    .await
                    .map_err($up::error)
            }

            async fn rename_opts(
                &self,
                from: &Path,
                to: &Path,
                options: RenameOptions,
            ) -> Result<()> {
                let (from, to) = ($down::path(from), $down::path(to));
                self.inner
                    .rename_opts(&from, &to, $down::rename_options(options))
                    .await
                    .map_err($up::error)
            }
        }

        /// A multipart upload of the wrapped store, as one of `$outer`.
        #[derive(Debug)]
        struct Upload(Box<dyn ::$inner::MultipartUpload>);

        #[async_trait::async_trait]
        impl MultipartUpload for Upload {
            fn put_part(&mut self, data: PutPayload) -> UploadPart {
                self.0
                    .put_part($down::payload(data))
                    .map(|r| r.map_err($up::error))
                    .boxed()
            }

            async fn complete(&mut self) -> Result<PutResult> {
                self.0
                    .complete()
                    .await
                    .map($up::put_result)
                    .map_err($up::error)
            }

            async fn abort(&mut self) -> Result<()> {
                self.0.abort().await.map_err($up::error)
            }
        }
    };
}

pub(crate) mod as014 {
    adapter!(As014: object_store_013 => object_store, down: to013, up: to014,
        /// A store of object_store 0.13 (DataFusion's, say) as an object_store 0.14
        /// [`ObjectStore`](object_store::ObjectStore): what quire-object's [`Backing`](crate::Backing)
        /// and the engines on 0.14 (SlateDB, parquet 60) take.
        ///
        /// Every method of the trait, the provided ones too (`get_ranges`, `list_with_offset`,
        /// `rename_opts`), calls the same method of the wrapped store, so its own versions of
        /// them are kept. What does not cross exactly is said in the [module](crate::compat013).
    );
}

pub(crate) mod as013 {
    adapter!(As013: object_store => object_store_013, down: to014, up: to013,
        /// A store of object_store 0.14 (quire-object's, or any other) as an object_store 0.13
        /// [`ObjectStore`](object_store_013::ObjectStore): what DataFusion 55
        /// (`register_object_store`) takes.
        ///
        /// Every method of the trait, the provided ones too (`get_ranges`, `list_with_offset`,
        /// `rename_opts`), calls the same method of the wrapped store, so its own versions of
        /// them are kept. What does not cross exactly is said in the [module](crate::compat013).
    );
}
