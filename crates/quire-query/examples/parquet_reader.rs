//! arrow-rs parquet's `ParquetObjectReader` (the async reader DataFusion re-exports) over the
//! quire-cached store: the reader takes any `Arc<dyn ObjectStore>`, so the cached one is a
//! drop-in.
//!
//! parquet 59.3 marks `ParquetObjectReader` deprecated (in favour of implementing
//! `AsyncFileReader` over a store); it is still the reader DataFusion 55's parquet ships and what
//! code in the field uses, so this example shows it, the deprecation allowed.
//!
//! Serves TPC-H SF 0.01 behind the delaying proxy, reads `lineitem.parquet` column
//! `l_orderkey` through the plain store and through the cached one, and checks the row counts
//! and the sums are equal. `cargo run --example parquet_reader`.

#![allow(deprecated)] // ParquetObjectReader: see above.

use std::sync::Arc;

use anyhow::{ensure, Context};
use datafusion::arrow::array::{Array, Int64Array};
use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
use datafusion::parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;
use quire_query::{net, stores};

/// Rows and the sum of `l_orderkey` of the file at `key`.
async fn scan(store: Arc<dyn ObjectStore>, key: &str) -> anyhow::Result<(usize, i64)> {
    let reader = ParquetObjectReader::new(store, Path::from(key));
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), ["l_orderkey"]);
    let mut stream = builder.with_projection(mask).build()?;
    let (mut rows, mut sum) = (0usize, 0i64);
    while let Some(batch) = stream.try_next().await? {
        let keys = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .context("l_orderkey is not Int64")?;
        rows += keys.len();
        sum += keys.iter().flatten().sum::<i64>();
    }
    Ok((rows, sum))
}

fn main() -> anyhow::Result<()> {
    let Some(s) = net::serve(0.01)? else {
        return Ok(());
    };
    let direct = stores::direct(&s.net.endpoint())?;
    let cached = stores::cached(
        Arc::clone(&direct),
        &stores::CacheBudget {
            memory: 64 << 20,
            tier: None,
        },
    )?;
    let key = format!("{}/lineitem.parquet", s.prefix);
    let rt = tokio::runtime::Runtime::new()?;
    let (want, got) = rt.block_on(async {
        anyhow::Ok((
            scan(Arc::clone(&direct), &key).await?,
            scan(Arc::clone(&cached), &key).await?,
        ))
    })?;
    drop(rt);
    ensure!(want.0 > 0, "no rows in {key}");
    ensure!(
        got == want,
        "through the cache {got:?}, the plain store {want:?} (rows, sum)"
    );
    println!(
        "parquet_reader: {} rows, sum(l_orderkey) = {}, equal through the cache",
        got.0, got.1
    );
    Ok(())
}
