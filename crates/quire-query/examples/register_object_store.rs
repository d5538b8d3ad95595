//! DataFusion reading Parquet in S3 through quire's cache: one line, the store given to
//! `SessionContext::register_object_store` wrapped by quire-object's cache.
//!
//! Serves TPC-H SF 0.01 from the project's S3 server behind its delaying proxy, runs the same
//! query over the plain store and over the cached one (twice: the second time from the cache)
//! and checks that the answers are equal. `cargo run --example register_object_store`.

use std::sync::Arc;

use anyhow::ensure;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::ObjectStore;
use quire::{CacheConfig, PageCache};
use quire_query::{net, stores};

const SQL: &str = "select l_returnflag, count(*) as n, sum(l_quantity) as qty, \
                   sum(l_extendedprice) as price from lineitem group by l_returnflag \
                   order by l_returnflag";

async fn answer(store: Arc<dyn ObjectStore>, prefix: &str) -> anyhow::Result<String> {
    let ctx = SessionContext::new();
    ctx.register_object_store(&stores::bucket_url(), store);
    let url = format!("{}/{prefix}/lineitem.parquet", stores::bucket_url());
    ctx.register_parquet("lineitem", &url, ParquetReadOptions::default())
        .await?;
    let batches = ctx.sql(SQL).await?.collect().await?;
    Ok(pretty_format_batches(&batches)?.to_string())
}

fn main() -> anyhow::Result<()> {
    let Some(s) = net::serve(0.01)? else {
        return Ok(());
    };
    let direct = stores::direct(&s.net.endpoint())?;
    // The line: the 0.13 store DataFusion takes, behind quire's cache (64 MiB), as a 0.13 store
    // again.
    let cache = PageCache::new(CacheConfig::new(64 << 20))?;
    let cached: Arc<dyn ObjectStore> =
        Arc::new(quire_object::compat013::cached(Arc::clone(&direct), cache)?);
    let rt = tokio::runtime::Runtime::new()?;
    let (want, got, again, gets) = rt.block_on(async {
        let want = answer(Arc::clone(&direct), &s.prefix).await?;
        let got = answer(Arc::clone(&cached), &s.prefix).await?;
        let before = net::proxy_count(&s.net.control())?;
        let again = answer(Arc::clone(&cached), &s.prefix).await?;
        let gets = net::proxy_count(&s.net.control())?.since(before).gets;
        anyhow::Ok((want, got, again, gets))
    })?;
    drop(rt);
    println!("{got}");
    ensure!(
        got == want,
        "the cached store answered\n{got}\nthe plain one\n{want}"
    );
    ensure!(again == want, "the second cached answer differs:\n{again}");
    println!("register_object_store: the cached store's answers equal the plain store's; the second run made {gets} GETs");
    Ok(())
}
