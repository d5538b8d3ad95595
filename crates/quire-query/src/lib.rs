//! TPC-H on DataFusion over the project's S3 server, directly and through quire's cache: the
//! library behind the `quire-query` runner (the `query` benchmark suite) and the engine
//! examples (`examples/`).
//!
//! - [`tpch`]: the tables as Parquet, made in the process by `tpchgen`; the queries.
//! - [`net`]: the S3 server with the tables in its bucket, behind the delaying proxy; the
//!   proxy's counters.
//! - [`stores`]: the stores DataFusion reads through (plain S3, quire-cached) and
//!   [`stores::CachingRegistry`], which caches every store of a session.
//! - [`run`]: a session over the tables, and running a query.

pub mod net;
pub mod run;
pub mod stores;
pub mod tpch;
