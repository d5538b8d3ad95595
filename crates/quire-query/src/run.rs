//! Running the queries: a DataFusion session over the tables of one scale factor, in the
//! bucket (through a store) or in a local directory (a mount of the bucket), and what each
//! query returned.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use object_store::ObjectStore;
use serde::{Deserialize, Serialize};

use crate::stores::bucket_url;
use crate::tpch::{Query, TABLES};

/// Where the tables are.
pub enum Tables {
    /// In the bucket, read through `store`, under the key prefix.
    Store {
        store: Arc<dyn ObjectStore>,
        prefix: String,
    },
    /// Files in a local directory.
    Local(PathBuf),
}

/// How many partitions DataFusion splits a scan into: one per CPU.
pub fn partitions() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// A session with the eight tables registered.
pub async fn session(tables: &Tables) -> anyhow::Result<SessionContext> {
    let config = SessionConfig::new().with_target_partitions(partitions());
    let ctx = SessionContext::new_with_config(config);
    let base = match tables {
        Tables::Store { store, prefix } => {
            let url = bucket_url();
            ctx.register_object_store(&url, Arc::clone(store));
            format!("{url}/{prefix}")
        }
        Tables::Local(dir) => dir.display().to_string(),
    };
    for t in TABLES {
        ctx.register_parquet(
            t,
            &format!("{base}/{t}.parquet"),
            ParquetReadOptions::default(),
        )
        .await
        .with_context(|| format!("registering {t} at {base}"))?;
    }
    Ok(ctx)
}

/// What one query returned and took.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Answer {
    /// The TPC-H query's number.
    pub number: u32,
    pub seconds: f64,
    pub rows: usize,
    /// A hash of the answer as text: equal answers, equal digests.
    pub digest: String,
}

/// Runs `q` to the end and hashes what it returned.
pub async fn run(ctx: &SessionContext, q: &Query) -> anyhow::Result<Answer> {
    let t0 = Instant::now();
    let batches = ctx
        .sql(q.sql)
        .await
        .with_context(|| format!("planning Q{}", q.number))?
        .collect()
        .await
        .with_context(|| format!("running Q{}", q.number))?;
    let seconds = t0.elapsed().as_secs_f64();
    let rows = batches.iter().map(|b| b.num_rows()).sum();
    let text = pretty_format_batches(&batches)?.to_string();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    Ok(Answer {
        number: q.number,
        seconds,
        rows,
        digest: format!("{:016x}", h.finish()),
    })
}
