//! Every store of a DataFusion session behind quire's cache: `CachingRegistry` wraps the
//! session's `ObjectStoreRegistry`, so that stores registered later (here the plain S3 store)
//! and those the inner registry makes alike are read through the cache, with no change where
//! they are registered.
//!
//! Serves TPC-H SF 0.01 behind the delaying proxy, runs a join over the plain store and over
//! the same store registered in a session with the caching registry, and checks the answers
//! are equal and that the second run through the cache fetched less. `cargo run --example
//! caching_registry`.

use std::sync::Arc;

use anyhow::ensure;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::execution::object_store::DefaultObjectStoreRegistry;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use object_store::ObjectStore;
use quire_query::net;
use quire_query::stores::{self, CacheBudget, CachingRegistry};

const SQL: &str = "select o_orderpriority, count(*) as n, sum(l_quantity) as qty \
                   from orders join lineitem on l_orderkey = o_orderkey \
                   group by o_orderpriority order by o_orderpriority";

async fn answer(
    ctx: &SessionContext,
    store: Arc<dyn ObjectStore>,
    prefix: &str,
) -> anyhow::Result<String> {
    // Registered as anywhere else: the registry decides what DataFusion reads through.
    ctx.register_object_store(&stores::bucket_url(), store);
    for t in ["orders", "lineitem"] {
        if ctx.table_exist(t)? {
            continue;
        }
        let url = format!("{}/{prefix}/{t}.parquet", stores::bucket_url());
        ctx.register_parquet(t, &url, ParquetReadOptions::default())
            .await?;
    }
    let batches = ctx.sql(SQL).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

fn main() -> anyhow::Result<()> {
    let Some(s) = net::serve(0.01)? else {
        return Ok(());
    };
    let direct = stores::direct(&s.net.endpoint())?;
    let tier = s.scratch.path().join("tier");
    // The registry: every store but the local file system's behind quire's cache.
    let registry = CachingRegistry::new(
        Arc::new(DefaultObjectStoreRegistry::new()),
        move |url, store| {
            if url.scheme() == "file" {
                return store;
            }
            let budget = CacheBudget {
                memory: 64 << 20,
                tier: Some((tier.clone(), 256 << 20)),
            };
            stores::cached(Arc::clone(&store), &budget).unwrap_or_else(|e| {
                eprintln!("{url}: not cached: {e:#}");
                store
            })
        },
    );
    let runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(registry))
        .build_arc()?;
    let cached_ctx = SessionContext::new_with_config_rt(SessionConfig::new(), runtime);
    let rt = tokio::runtime::Runtime::new()?;
    let (want, got, first, second) = rt.block_on(async {
        let want = answer(&SessionContext::new(), Arc::clone(&direct), &s.prefix).await?;
        let c0 = net::proxy_count(&s.net.control())?;
        let got = answer(&cached_ctx, Arc::clone(&direct), &s.prefix).await?;
        let c1 = net::proxy_count(&s.net.control())?;
        let again = answer(&cached_ctx, Arc::clone(&direct), &s.prefix).await?;
        let c2 = net::proxy_count(&s.net.control())?;
        ensure!(again == got, "the second answer differs:\n{again}");
        anyhow::Ok((want, got, c1.since(c0), c2.since(c1)))
    })?;
    drop(rt);
    drop(cached_ctx);
    println!("{got}");
    ensure!(
        got == want,
        "through the registry\n{got}\nthe plain store\n{want}"
    );
    ensure!(
        second.bytes < first.bytes,
        "the second run through the cache fetched {} bytes, the first {}",
        second.bytes,
        first.bytes
    );
    println!(
        "caching_registry: equal answers; first run {} GETs / {} bytes, second {} GETs / {} bytes",
        first.gets, first.bytes, second.gets, second.bytes
    );
    Ok(())
}
