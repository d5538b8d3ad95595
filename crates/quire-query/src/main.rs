//! `quire-query`: the `query` benchmark's runner — TPC-H on DataFusion over the project's S3
//! server behind its delaying proxy, read directly and through quire's cache.
//!
//! `quire-query bench` makes the tables once (`<target>/query-data/sfF/`), starts the server and
//! the proxy, and runs each variant in child processes of itself (`quire-query client`, one
//! process per variant and per restart), so that each variant's memory and caches are its own:
//!
//! - `direct`: DataFusion on object_store 0.13's S3 client against the proxy;
//! - `quire-store`: the same client behind quire-object's `CachedStore` (memory and disk tier
//!   budgets from `--memory-mib`/`--disk-mib`);
//! - `quire-mount`, `s3fs`, `rclone`: DataFusion on the local files of a mount of the bucket
//!   (`src/mounts.rs`: `quire mount` with the same budgets, found as `$QUIRE_BIN` or the
//!   workspace's `target/release/quire`; the peers as the `object` suite runs them, in a memory
//!   group). A peer that is missing is skipped with the reason;
//! - `local`: DataFusion on the same Parquet files where the test server keeps them, on the
//!   local disk (in the kernel's page cache after the first phase): its `warm_s` alone is
//!   recorded, the floor that no cache in front of S3 can go under — DataFusion's own work.
//!
//! Per variant: `cold_s` (a new process, fresh caches, every query once: the session's set-up,
//! which reads the files' footers, and a mount's start included), `warm_s` (the same queries
//! again in the same process and session), `restart_s` (a second process on the disk tier or
//! disk cache the first left; for a mount, a new daemon on it); the GET requests and response
//! bytes of each phase at the proxy (`cold_gets`, `cold_mib`, …); `peak_rss_mib`, the most
//! resident memory (VmHWM) of the process doing the caching — the DataFusion process itself for
//! the store variants, so it includes the engine's own memory, the daemon for a mount. Every
//! answer is checked against the first variant's (the same rows, the same text).
//!
//! The results are the benchmark's JSON records (suite `query`), printed as a table and, with
//! `--json FILE`, written as `{"results": [...]}`; `quire bench query` runs this and merges them.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

use quire_query::net::{self, Network};
use quire_query::run::{self, Answer, Tables};
use quire_query::stores::{self, CacheBudget};
use quire_query::tpch;

// The `object` suite's memory groups (cgroup v1), shared by `#[path]`: the mount peers run in
// one.
#[path = "../../quire-cli/src/bench/cgroup.rs"]
#[allow(dead_code)]
mod cgroup;
mod mounts;

#[derive(Parser)]
#[command(about = "TPC-H on DataFusion over S3, directly and through quire's cache")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs the benchmark: every variant, cold, warm and after a restart.
    Bench(BenchArgs),
    /// Makes the tables of a scale factor (once) and says where they are.
    Gen {
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
    },
    /// One process of a variant (what `bench` runs; prints its phases as JSON).
    #[command(hide = true)]
    Client(ClientArgs),
}

/// The variants, in the order they run.
const VARIANTS: [&str; 6] = [
    "direct",
    "quire-store",
    "quire-mount",
    "s3fs",
    "rclone",
    "local",
];
/// The variants that mount the bucket.
const MOUNTS: [&str; 3] = ["quire-mount", "s3fs", "rclone"];

#[derive(Parser)]
struct BenchArgs {
    /// The smoke run: scale factor 0.1 (unless --sf says otherwise).
    #[arg(long)]
    quick: bool,
    /// The TPC-H scale factor (default 1; 0.1 with --quick).
    #[arg(long)]
    sf: Option<f64>,
    /// Runs per figure; each figure is the median, with the smallest and largest beside it.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// The variants to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// The queries to run, by TPC-H number, comma-separated (default: the benchmark's set).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<u32>,
    /// quire's memory budget, MiB.
    #[arg(long, default_value_t = 256)]
    memory_mib: u64,
    /// quire's disk tier, MiB.
    #[arg(long, default_value_t = 2048)]
    disk_mib: u64,
    /// Writes the results here as JSON (`{"results": [...]}`).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Where a client process reads the tables from.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Source {
    Direct,
    QuireStore,
    Local,
}

#[derive(Parser)]
struct ClientArgs {
    #[arg(long, value_enum)]
    store: Source,
    /// The proxy (`http://host:port`), for the stores.
    #[arg(long, default_value = "")]
    endpoint: String,
    /// The proxy's control endpoint (`host:port`), for its counters.
    #[arg(long)]
    control: String,
    /// The tables' key prefix in the bucket (`sf1`).
    #[arg(long, default_value = "")]
    prefix: String,
    /// The tables' local directory, for `--store local`.
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long, default_value_t = 256 << 20)]
    memory: u64,
    #[arg(long)]
    tier: Option<PathBuf>,
    #[arg(long, default_value_t = 2 << 30)]
    disk: u64,
    /// The phases to run, in order, each every query once: their names are only labels.
    #[arg(long, value_delimiter = ',', required = true)]
    phases: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    queries: Vec<u32>,
}

/// One phase of a client: every query once.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Phase {
    phase: String,
    seconds: f64,
    gets: u64,
    requests: u64,
    bytes: u64,
    /// The process's VmHWM over the phase, bytes.
    hwm: u64,
    answers: Vec<Answer>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Bench(a) => bench(&a),
        Cmd::Gen { sf } => {
            let root = net::data_root()?;
            let secs = net::prepare(&root, sf)?;
            println!(
                "{} ({})",
                root.join(net::BUCKET).join(net::prefix(sf)).display(),
                if secs > 0.0 {
                    format!("made in {secs:.1} s")
                } else {
                    "already there".into()
                }
            );
            Ok(())
        }
        Cmd::Client(a) => client(&a),
    }
}

/// The largest resident set the process has had since the last [`reset_hwm`], bytes.
fn vm_hwm() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Resets VmHWM to the current resident set (`clear_refs` 5), so that a phase's peak is its own.
fn reset_hwm() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn client(a: &ClientArgs) -> anyhow::Result<()> {
    let queries = tpch::select(&a.queries)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    reset_hwm();
    let c0 = net::proxy_count(&a.control)?;
    let t0 = Instant::now();
    // The store is made (and later dropped) outside the runtime: the cache runs a runtime of
    // its own. Its set-up (opening the disk tier) counts in the first phase.
    let tables = match a.store {
        Source::Direct => Tables::Store {
            store: stores::direct(&a.endpoint)?,
            prefix: a.prefix.clone(),
        },
        Source::QuireStore => Tables::Store {
            store: stores::cached(
                stores::direct(&a.endpoint)?,
                &CacheBudget {
                    memory: a.memory,
                    tier: a.tier.clone().map(|t| (t, a.disk)),
                },
            )?,
            prefix: a.prefix.clone(),
        },
        Source::Local => Tables::Local(a.dir.clone().context("--store local needs --dir")?),
    };
    let setup = t0.elapsed().as_secs_f64();
    let phases = rt.block_on(async {
        let mut out = Vec::new();
        let mut ctx = None;
        for (i, name) in a.phases.iter().enumerate() {
            let (c0, extra) = if i == 0 {
                (c0, setup)
            } else {
                reset_hwm();
                (net::proxy_count(&a.control)?, 0.0)
            };
            if let Tables::Local(dir) = &tables {
                mounts::drop_page_cache(dir)?;
            }
            let t0 = Instant::now();
            if ctx.is_none() {
                ctx = Some(run::session(&tables).await?);
            }
            let ctx = ctx.as_ref().expect("made above");
            let mut answers = Vec::new();
            for q in &queries {
                answers.push(run::run(ctx, q).await?);
            }
            let seconds = t0.elapsed().as_secs_f64() + extra;
            let c = net::proxy_count(&a.control)?.since(c0);
            out.push(Phase {
                phase: name.clone(),
                seconds,
                gets: c.gets,
                requests: c.requests,
                bytes: c.bytes,
                hwm: vm_hwm(),
                answers,
            });
        }
        anyhow::Ok(out)
    })?;
    drop(rt);
    drop(tables);
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", serde_json::to_string(&phases)?)?;
    Ok(())
}

/// One figure of one run, in the benchmark's JSON format (`quire bench`'s `report.rs`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    suite: String,
    case: String,
    variant: String,
    threads: usize,
    metric: String,
    value: f64,
    unit: String,
    better: String,
    runs: usize,
    min: f64,
    median: f64,
    max: f64,
}

/// Folds the runs of each figure into one record: the median, the smallest, the largest.
fn aggregate(samples: &[Record]) -> Vec<Record> {
    let mut groups: Vec<(Record, Vec<f64>)> = Vec::new();
    for s in samples {
        match groups
            .iter_mut()
            .find(|(r, _)| r.variant == s.variant && r.metric == s.metric && r.case == s.case)
        {
            Some((_, v)) => v.push(s.value),
            None => groups.push((s.clone(), vec![s.value])),
        }
    }
    groups
        .into_iter()
        .map(|(mut r, mut v)| {
            v.sort_by(f64::total_cmp);
            let n = v.len();
            let median = if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            };
            r.runs = n;
            r.min = v[0];
            r.max = v[n - 1];
            r.median = median;
            r.value = median;
            r
        })
        .collect()
}

/// What a bench run shares: where, the network, what to check answers against.
struct Ctx<'a> {
    a: &'a BenchArgs,
    sf: f64,
    case: String,
    net: Network,
    scratch: PathBuf,
    /// Where the tables are made (the test server's root).
    root: PathBuf,
    /// The first variant's answers, by query: (rows, digest).
    reference: BTreeMap<u32, (usize, String, &'static str)>,
    samples: Vec<Record>,
    /// Where the mount peers' memory groups are made, if they can be.
    groups: Option<cgroup::MemGroups>,
}

impl Ctx<'_> {
    fn record(&mut self, variant: &str, metric: &str, value: f64, unit: &str) {
        self.samples.push(Record {
            suite: "query".into(),
            case: self.case.clone(),
            variant: variant.into(),
            threads: run::partitions(),
            metric: metric.into(),
            value,
            unit: unit.into(),
            better: "lower".into(),
            runs: 1,
            min: value,
            median: value,
            max: value,
        });
    }

    /// Runs a client process of `variant` for `phases`.
    fn client(&self, store: &str, phases: &str, extra: &[String]) -> anyhow::Result<Vec<Phase>> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args(["client", "--store", store, "--phases", phases])
            .args(["--endpoint", &self.net.endpoint()])
            .args(["--control", &self.net.control()])
            .args(["--prefix", &net::prefix(self.sf)])
            .args(["--memory", &(self.a.memory_mib << 20).to_string()])
            .args(["--disk", &(self.a.disk_mib << 20).to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        if !self.a.queries.is_empty() {
            let q: Vec<String> = self.a.queries.iter().map(u32::to_string).collect();
            cmd.args(["--queries", &q.join(",")]);
        }
        let out = cmd.output().context("starting a client process")?;
        if !out.status.success() {
            bail!("the {store} client failed ({})", out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().context("the client printed nothing")?;
        let phases: Vec<Phase> =
            serde_json::from_str(line).with_context(|| format!("the client printed {line:?}"))?;
        Ok(phases)
    }

    /// Checks a variant's answers against the first variant's.
    fn check(&mut self, variant: &'static str, p: &Phase) -> anyhow::Result<()> {
        for ans in &p.answers {
            match self.reference.get(&ans.number) {
                None => {
                    self.reference
                        .insert(ans.number, (ans.rows, ans.digest.clone(), variant));
                }
                Some((rows, digest, by)) => {
                    if (*rows, digest) != (ans.rows, &ans.digest) {
                        bail!(
                            "{variant} ({}) answered Q{} with {} rows (digest {}); {by} with {rows} rows (digest {digest})",
                            p.phase,
                            ans.number,
                            ans.rows,
                            ans.digest
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The most resident memory of the process doing `variant`'s caching, `hwm` bytes.
    fn record_peak(&mut self, variant: &str, hwm: u64) {
        self.record(
            variant,
            "peak_rss_mib",
            hwm as f64 / (1 << 20) as f64,
            "MiB",
        );
    }

    fn phases(&mut self, variant: &'static str, phases: &[Phase]) -> anyhow::Result<()> {
        for p in phases {
            self.check(variant, p)?;
            let (s, g, m) = match p.phase.as_str() {
                "cold" => ("cold_s", "cold_gets", "cold_mib"),
                "warm" => ("warm_s", "warm_gets", "warm_mib"),
                "restart" => ("restart_s", "restart_gets", "restart_mib"),
                other => bail!("a client phase named {other:?}"),
            };
            self.record(variant, s, p.seconds, "s");
            self.record(variant, g, p.gets as f64, "GETs");
            self.record(variant, m, p.bytes as f64 / (1 << 20) as f64, "MiB");
            let per: Vec<String> = p
                .answers
                .iter()
                .map(|a| format!("Q{} {:.2}", a.number, a.seconds))
                .collect();
            eprintln!(
                "query: {variant} {}: {:.2} s, {} GETs, {:.1} MiB [{}]",
                p.phase,
                p.seconds,
                p.gets,
                p.bytes as f64 / (1 << 20) as f64,
                per.join(", ")
            );
        }
        Ok(())
    }

    /// A mount variant: a fresh mount and a process cold then warm on it; then the daemon
    /// stopped, the kernel's pages of its disk cache dropped, a new daemon on the same disk
    /// cache and a second process. The mount's start counts in the first phase of each.
    fn mount_variant(&mut self, variant: &'static str) -> anyhow::Result<()> {
        let prog = match mounts::find(variant) {
            Ok(p) => p,
            Err(why) => {
                eprintln!("query: {variant}: skipped: {why}");
                return Ok(());
            }
        };
        let cache = self.scratch.join(format!("cache-{variant}"));
        let _ = std::fs::remove_dir_all(&cache);
        let mnt = self.scratch.join("mnt");
        let endpoint = self.net.endpoint();
        let spec = mounts::MountSpec {
            variant,
            prog: &prog,
            endpoint: &endpoint,
            mnt: &mnt,
            cache: &cache,
            scratch: &self.scratch,
            budget: self.a.memory_mib << 20,
            disk: self.a.disk_mib << 20,
            groups: self.groups.as_ref(),
        };
        let dir = mnt.join(net::prefix(self.sf));
        let extra = vec!["--dir".to_string(), dir.display().to_string()];
        let mut hwm = 0;
        let mut all = Vec::new();
        for phases in ["cold,warm", "restart"] {
            if phases == "restart" {
                mounts::drop_page_cache(&cache)?;
            }
            let t0 = Instant::now();
            let mut m = mounts::Mounted::start(&spec)?;
            let started = t0.elapsed().as_secs_f64();
            let mut got = match self.client("local", phases, &extra) {
                Ok(p) => p,
                Err(e) => match m.died() {
                    Some(why) => bail!("the {variant} daemon {why} ({e:#})"),
                    None => return Err(e),
                },
            };
            got[0].seconds += started;
            hwm = hwm.max(mounts::status_bytes(m.pid(), "VmHWM"));
            m.stop()?;
            all.extend(got);
        }
        self.phases(variant, &all)?;
        self.record_peak(variant, hwm);
        let _ = std::fs::remove_dir_all(&cache);
        Ok(())
    }

    /// The floor: a process on the tables' local files, cold then warm; the warm phase alone
    /// is recorded (the cold one reads whatever the kernel's page cache lacks from the disk).
    fn local_variant(&mut self) -> anyhow::Result<()> {
        let dir = self.root.join(net::BUCKET).join(net::prefix(self.sf));
        let extra = vec!["--dir".to_string(), dir.display().to_string()];
        let got = self.client("local", "cold,warm", &extra)?;
        let warm: Vec<Phase> = got.into_iter().filter(|p| p.phase == "warm").collect();
        self.phases("local", &warm)
    }

    /// A store variant: a process cold then warm, then a second process on the disk tier the
    /// first left.
    fn store_variant(&mut self, variant: &'static str) -> anyhow::Result<()> {
        let store = if variant == "direct" {
            "direct"
        } else {
            "quire-store"
        };
        let tier = self.scratch.join(format!("tier-{variant}"));
        let _ = std::fs::remove_dir_all(&tier);
        std::fs::create_dir_all(&tier)?;
        let extra = vec!["--tier".to_string(), tier.display().to_string()];
        let first = self.client(store, "cold,warm", &extra)?;
        let second = self.client(store, "restart", &extra)?;
        self.phases(variant, &first)?;
        self.phases(variant, &second)?;
        let hwm = first
            .iter()
            .chain(&second)
            .map(|p| p.hwm)
            .max()
            .unwrap_or(0);
        self.record_peak(variant, hwm);
        let _ = std::fs::remove_dir_all(&tier);
        Ok(())
    }
}

fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    let sf = a.sf.unwrap_or(if a.quick { 0.1 } else { 1.0 });
    for v in &a.variants {
        if !VARIANTS.contains(&v.as_str()) {
            bail!("no variant {v:?}; the variants are {}", VARIANTS.join(", "));
        }
    }
    tpch::select(&a.queries)?;
    let wants = |v: &str| a.variants.is_empty() || a.variants.iter().any(|w| w == v);
    let write = |records: &[Record]| -> anyhow::Result<()> {
        if let Some(path) = &a.json {
            let v = serde_json::json!({ "suite": "query", "sf": sf, "results": records });
            std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    };
    let tools = match net::tools() {
        Ok(t) => t,
        Err(why) => {
            println!("query: skipped: {why}");
            return write(&[]);
        }
    };
    let root = net::data_root()?;
    let made = net::prepare(&root, sf)?;
    if made > 0.0 {
        eprintln!("query: tables made in {made:.1} s");
    }
    let scratch = tempfile::Builder::new()
        .prefix("quire-query-")
        .tempdir_in(scratch_base())?;
    let net = Network::start(&tools, &root, scratch.path())?;
    eprintln!(
        "query: TPC-H SF {sf} in {} behind {} ms + {} Mbit/s; quire's budget {} MiB, disk tier {} MiB; {} partitions",
        root.join(net::BUCKET).join(net::prefix(sf)).display(),
        net::DELAY_MS,
        net::BANDWIDTH_MBPS,
        a.memory_mib,
        a.disk_mib,
        run::partitions()
    );
    let mut ctx = Ctx {
        a,
        sf,
        case: format!("tpch-{}", tpch::sf_name(sf)),
        net,
        scratch: scratch.path().to_path_buf(),
        root: root.clone(),
        reference: BTreeMap::new(),
        samples: Vec::new(),
        groups: None,
    };
    if MOUNTS.iter().any(|v| wants(v)) {
        match cgroup::MemGroups::new() {
            Ok(g) => ctx.groups = Some(g),
            Err(why) => eprintln!(
                "query: no memory group ({why}): s3fs and rclone run without a memory bound"
            ),
        }
    }
    for _ in 0..a.runs.max(1) {
        for v in VARIANTS {
            if !wants(v) {
                continue;
            }
            match v {
                "direct" | "quire-store" => ctx
                    .store_variant(v)
                    .with_context(|| format!("variant {v}"))?,
                "quire-mount" => ctx
                    .mount_variant(v)
                    .with_context(|| format!("variant {v}"))?,
                "local" => ctx
                    .local_variant()
                    .with_context(|| format!("variant {v}"))?,
                // A peer that cannot run here is not quire's failure: say why and go on.
                _ => {
                    if let Err(e) = ctx.mount_variant(v) {
                        eprintln!("query: {v}: stopped: {e:#}");
                    }
                }
            }
        }
    }
    let records = aggregate(&ctx.samples);
    print_table(&records);
    write(&records)
}

/// Where the scratch directory goes: `/var/tmp` (a disk) where it exists, else the temp dir.
fn scratch_base() -> PathBuf {
    let var_tmp = Path::new("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn print_table(records: &[Record]) {
    let metrics = [
        "cold_s",
        "warm_s",
        "restart_s",
        "cold_gets",
        "cold_mib",
        "warm_gets",
        "restart_gets",
        "restart_mib",
        "peak_rss_mib",
    ];
    print!("{:<12}", "variant");
    for m in metrics {
        print!(" {m:>12}");
    }
    println!();
    let mut variants: Vec<&str> = Vec::new();
    for r in records {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    for v in variants {
        print!("{v:<12}");
        for m in metrics {
            match records.iter().find(|r| r.variant == v && r.metric == m) {
                Some(r) => print!(" {:>12.2}", r.value),
                None => print!(" {:>12}", "-"),
            }
        }
        println!();
    }
}
