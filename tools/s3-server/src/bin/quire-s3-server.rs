//! `quire-s3-server`: S3-protocol test server over a directory.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use quire_s3_tools::server::{self, ServerOptions, DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY};

/// S3-protocol test server: serves DIR, each top-level directory is a bucket.
#[derive(Debug, Parser)]
#[command(version)]
struct Opt {
    /// Directory to serve (created if missing); top-level directories are buckets.
    #[arg(long)]
    root: PathBuf,

    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,

    /// Write the port number to this file once the server accepts connections.
    #[arg(long)]
    port_file: Option<PathBuf>,

    /// Access key id clients must sign requests with (SigV4).
    #[arg(long, default_value = DEFAULT_ACCESS_KEY)]
    access_key: String,

    /// Secret key clients must sign requests with (SigV4).
    #[arg(long, default_value = DEFAULT_SECRET_KEY)]
    secret_key: String,

    /// Create this bucket (directory) before serving; may be repeated.
    #[arg(long = "bucket")]
    buckets: Vec<String>,

    /// Log filter (tracing syntax), e.g. "warn", "info", "s3s=debug".
    #[arg(long, default_value = "warn")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let opt = Opt::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&opt.log)
        .with_context(|| format!("invalid --log filter {:?}", opt.log))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(run(opt))
}

async fn run(opt: Opt) -> anyhow::Result<()> {
    let server = server::start(ServerOptions {
        root: opt.root,
        addr: opt.addr,
        access_key: opt.access_key,
        secret_key: opt.secret_key,
        buckets: opt.buckets,
    })
    .await?;
    let addr = server.addr();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        out.flush()?;
    }
    if let Some(path) = &opt.port_file {
        quire_s3_tools::write_port_file(path, addr.port())?;
    }
    tokio::select! {
        res = server.wait() => res,
        res = tokio::signal::ctrl_c() => {
            res.context("cannot listen for ctrl-c")?;
            Ok(())
        }
    }
}
