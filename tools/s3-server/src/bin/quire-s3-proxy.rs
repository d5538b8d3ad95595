//! `quire-s3-proxy`: emulated network link + fault injection in front of an
//! S3 server.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use quire_s3_tools::proxy::{self, ProxyOptions};

/// HTTP/1.1 reverse proxy adding a per-request delay, a shared bandwidth cap
/// on response bodies, and faults switched on through a control endpoint.
#[derive(Debug, Parser)]
#[command(version)]
struct Opt {
    /// Address clients connect to; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,

    /// The S3 server, e.g. 127.0.0.1:9000.
    #[arg(long)]
    upstream: String,

    /// Delay added once per request, before forwarding it (milliseconds).
    #[arg(long, default_value_t = 0.0)]
    delay_ms: f64,

    /// Cap on response-body bandwidth shared by all connections, in Mbit/s
    /// (10^6 bit/s); 0 = unlimited.
    #[arg(long, default_value_t = 0.0)]
    bandwidth_mbps: f64,

    /// Write the proxy's port to this file once it accepts connections.
    #[arg(long)]
    port_file: Option<PathBuf>,

    /// Address of the control endpoint; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    control_listen: SocketAddr,

    /// Write the control endpoint's port to this file once it accepts connections.
    #[arg(long)]
    control_port_file: Option<PathBuf>,

    /// Log filter (tracing syntax), e.g. "warn", "debug".
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
    if !(opt.delay_ms >= 0.0 && opt.delay_ms.is_finite()) {
        anyhow::bail!("--delay-ms must be a non-negative number");
    }
    if !(opt.bandwidth_mbps >= 0.0 && opt.bandwidth_mbps.is_finite()) {
        anyhow::bail!("--bandwidth-mbps must be a non-negative number");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    rt.block_on(run(opt))
}

async fn run(opt: Opt) -> anyhow::Result<()> {
    let upstream = tokio::net::lookup_host(&opt.upstream)
        .await
        .with_context(|| {
            format!(
                "cannot resolve --upstream {:?} (expected HOST:PORT)",
                opt.upstream
            )
        })?
        .next()
        .with_context(|| format!("--upstream {:?} resolves to no address", opt.upstream))?;
    let proxy = proxy::start(ProxyOptions {
        listen: opt.listen,
        control_listen: opt.control_listen,
        upstream,
        delay: Duration::from_secs_f64(opt.delay_ms / 1000.0),
        bandwidth_mbps: opt.bandwidth_mbps,
    })
    .await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", proxy.addr())?;
        writeln!(out, "control on {}", proxy.control_addr())?;
        out.flush()?;
    }
    if let Some(path) = &opt.control_port_file {
        quire_s3_tools::write_port_file(path, proxy.control_addr().port())?;
    }
    if let Some(path) = &opt.port_file {
        quire_s3_tools::write_port_file(path, proxy.addr().port())?;
    }
    tokio::select! {
        res = proxy.wait() => res,
        res = tokio::signal::ctrl_c() => {
            res.context("cannot listen for ctrl-c")?;
            Ok(())
        }
    }
}
