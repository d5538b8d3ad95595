//! `quire`: benchmarks of the quire page cache, and `quire mount`/`quire stat` for the FUSE file
//! system over it.
#![deny(unsafe_op_in_unsafe_fn)]

mod bench;
mod mount;
mod s3_tools;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "quire",
    version,
    about = "The Linux page cache, rebuilt as a Rust library"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run benchmark suites, each side by side with its "before" (all suites if none is named,
    /// except `query`, which runs only when named: it builds DataFusion).
    Bench {
        /// Suites to run (see `quire bench --list`).
        suites: Vec<String>,
        /// Shorter runs and smaller data: the whole run stays under a minute.
        #[arg(long)]
        quick: bool,
        /// Also write every figure as JSON to this file (rewritten after each suite).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Run each suite N times; every figure is the median of the N, shown with the smallest
        /// and largest.
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        runs: u32,
        /// Draw SVG charts into this directory at the end: before/after bars per suite, and
        /// thread-scaling lines where a case ran at several thread counts.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Run only these variants of the suites (comma-separated, as `quire bench --list`
        /// names them), e.g. `quire bench evict --variants lru-workingset,default`. Each name
        /// must be a variant of a suite that runs; a suite with none of them is left out; a
        /// before/after change is shown only where both of its variants ran.
        #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
        variants: Option<Vec<String>>,
        /// The thread counts of the scaling cases (lockref, xarray's loads, read's hot reads,
        /// dcache), in place of each suite's own, e.g. `--threads 1,2,4,8,16` on a machine with
        /// 16 cores (each suite's own counts suit 2 cores).
        #[arg(long, value_name = "N,...", value_delimiter = ',',
              value_parser = clap::value_parser!(u16).range(1..=1024))]
        threads: Option<Vec<u16>>,
        /// List the suites and their variants, and exit.
        #[arg(long)]
        list: bool,
        /// `evict` only: replay page-access traces through every quire variant, the default
        /// configuration, OPT and the cache libraries a user would pick instead (exact-lru,
        /// arc, 2q, s3-fifo, sieve, w-tinylfu, foyer-lru, moka, quick_cache), instead of the
        /// suite's cases. PATH is a trace file (one page number per line, or libCacheSim's
        /// oracleGeneral binary or csv; `.gz` files are decompressed as read), a directory
        /// (every file in it, by name, but hidden files and *.md), or a pattern of file names
        /// with `*` and `?` (quote it: 'traces/lirs-*').
        #[arg(long, value_name = "PATH")]
        trace: Option<PathBuf>,
        /// The trace's format (default: by extension — .oracleGeneral and .bin binary, .csv
        /// and .tsv csv — else text).
        #[arg(long, value_enum, value_name = "FORMAT", requires = "trace")]
        trace_format: Option<bench::evict::TraceFormat>,
        /// The cache budget of a trace replay (K, M, G suffixes; default: a quarter of the
        /// trace's distinct pages, at least 1 MiB).
        #[arg(long, value_name = "SIZE", requires = "trace", value_parser = mount::parse_size)]
        budget: Option<usize>,
        /// The cache sizes of a trace replay, each trace replayed at each: a percentage of its
        /// distinct pages (0.1%), a number of entries (4096) or bytes (64M, a page per entry),
        /// comma-separated, e.g. `--sizes 0.1%,1%,10%,40%`. A size larger than a trace is
        /// clamped to its distinct pages; a size under 256 entries (1 MiB), or of the same
        /// entries as an earlier size, is left out for that trace. Prints a table per trace and
        /// a summary per size against exact LRU. Not with --budget.
        #[arg(long, value_name = "LIST", requires = "trace", conflicts_with = "budget",
              value_parser = bench::evict::parse_sizes)]
        sizes: Option<bench::evict::TraceSizes>,
        /// A trace replay without readahead: every page is read only when the trace asks for
        /// it, so the variants differ only in what they keep (as OPT and cache libraries are
        /// judged). With readahead, the summary carries a caveat.
        #[arg(long, requires = "trace")]
        no_readahead: bool,
    },
    /// Draw the SVG charts of a stored `quire bench --json` report into DIR (as `--plot` does
    /// at the end of a run): SUITE-before-after.svg and SUITE-scaling.svg per suite.
    Plot {
        /// The JSON report.
        report: PathBuf,
        /// Where to write the charts (created if missing).
        dir: PathBuf,
        /// Only these suites of the report (all of them if none is named).
        suites: Vec<String>,
    },
    /// The kernel's side of a benchmark case, run by `quire bench` in a child process inside a
    /// memory cgroup (not for direct use).
    #[command(hide = true)]
    BenchChild {
        /// The case, as JSON.
        #[arg(long)]
        spec: String,
    },
    /// Mount the directory SRC at MNT through quire (a FUSE file system): served until
    /// unmounted (`umount MNT`) or signalled (SIGINT/SIGTERM: everything is written back, then
    /// unmounted).
    ///
    /// SRC may also be an object store URL: `s3://BUCKET[/PREFIX]`, `gs://BUCKET[/PREFIX]`,
    /// `az://CONTAINER[/PREFIX]`, `file:///DIR`, or `memory:///` (empty, in memory, for tests).
    /// Objects are files, `/`-separated prefixes directories; writes are uploaded at close
    /// and fsync; a file rename is a copy then a delete (not atomic), a directory rename EXDEV;
    /// empty directories live only in the mount. The bucket is checked (one LIST) before
    /// mounting: bad credentials or a missing bucket fail here. Credentials and endpoint come
    /// from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    /// AWS_REGION, AWS_ENDPOINT_URL (an S3-compatible server), AWS_ALLOW_HTTP=true (plain
    /// HTTP); GOOGLE_SERVICE_ACCOUNT / GOOGLE_APPLICATION_CREDENTIALS for gs://;
    /// AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY for az://.
    Mount {
        /// The directory to serve, or an object store URL (s3://, gs://, az://, file:///,
        /// memory:///).
        src: PathBuf,
        /// Where to mount it (an existing directory).
        mnt: PathBuf,
        /// quire's memory budget for cached file data (K, M, G suffixes). Mounting an object
        /// store URL, what grows with the cache: the frames get what their descriptors and the
        /// disk tier's queue leave of it.
        #[arg(long, default_value = "256M", value_parser = mount::parse_size)]
        capacity: usize,
        /// Threads serving requests (default: the number of CPUs, at least 2).
        #[arg(long)]
        threads: Option<usize>,
        /// Stay in the foreground (otherwise the daemon detaches once mounted).
        #[arg(long)]
        foreground: bool,
        /// Let users other than the one mounting use the mount.
        #[arg(long)]
        allow_other: bool,
        /// Let device nodes in the mount be opened as devices (the mount is `nodev` without:
        /// device nodes can be made, listed, renamed and removed, but not opened).
        #[arg(long)]
        dev: bool,
        /// How requests reach the daemon: `uring` (FUSE over io_uring: one ring per CPU, a reply
        /// and the next request in one submission), `classic` (read and write on /dev/fuse), or
        /// `auto`: io_uring where the kernel offers it (Linux 6.14+, its module parameter
        /// enable_uring on), else classic. `quire stat` and the log say which, and why.
        /// Default: auto, or the environment's QUIRE_FUSE_CHANNEL.
        #[arg(long, value_name = "CHANNEL")]
        channel: Option<quire_fuse::ChannelChoice>,
        /// As root: turn the kernel's FUSE over io_uring on
        /// (/sys/module/fuse/parameters/enable_uring) if it is off, and say so. A system
        /// setting is never changed without this.
        #[arg(long)]
        fuse_uring: bool,
        /// How the daemon's threads are scheduled: `idle` (SCHED_IDLE: a program woken by a
        /// reply stays on its CPU, where the normal policy moves it to an idle one, which costs
        /// more than the rest of a cached read), `normal`, or `auto`: idle where the daemon's
        /// scheduling group is its own (detached, with autogroups on; or alone in its cpu
        /// cgroup), else normal, since a SCHED_IDLE daemon sharing a group with busy programs
        /// would wait for them. Object store mounts: normal unless `idle`. `quire stat` (and the
        /// log, with --foreground) says which, and why.
        #[arg(long, value_name = "POLICY", default_value = "auto")]
        sched: quire_fuse::sched::SchedChoice,
        /// Which file system to serve (the others are the `fuse` benchmark's comparisons).
        #[arg(long, value_enum, default_value = "quire", hide = true)]
        kind: mount::Kind,
        /// Object store mounts: where written data waits for its upload (default: the
        /// system's temporary directory).
        #[arg(long, value_name = "DIR")]
        staging: Option<PathBuf>,
        /// Object store mounts: how long a request is retried before it fails, in seconds
        /// (default 60; also the environment's QUIRE_OBJECT_RETRY_TIMEOUT).
        #[arg(long, value_name = "SECS")]
        retry_timeout: Option<f64>,
        /// Object store mounts: a second cache tier on local disk in DIR: clean data evicted
        /// from memory is kept there (checksummed, bounded by --disk-size) and found again
        /// after a restart.
        #[arg(long, value_name = "DIR")]
        disk_cache: Option<PathBuf>,
        /// The disk tier's size bound (K, M, G, T suffixes).
        #[arg(long, default_value = "10G", value_parser = mount::parse_size)]
        disk_size: usize,
    },
    /// Print the live counters of the quire mount at MNT.
    Stat {
        /// The mount point.
        mnt: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench {
            suites,
            quick,
            json,
            runs,
            plot,
            variants,
            threads,
            list,
            trace,
            trace_format,
            budget,
            sizes,
            no_readahead,
        } => {
            if list {
                for s in bench::SUITES.iter().chain(bench::OPT_IN) {
                    let about = if bench::OPT_IN.iter().any(|o| o.name == s.name) {
                        format!("{} [only when named]", s.about)
                    } else {
                        s.about.to_string()
                    };
                    println!("{:<10} {about}", s.name);
                    let vs = bench::variants_of(s, trace.is_some());
                    println!("{:<10} variants: {}", "", vs.join(", "));
                }
                return Ok(());
            }
            let trace = trace.map(|path| bench::evict::TraceArgs {
                path,
                format: trace_format,
                budget: budget.map(|b| b as u64),
                sizes,
                readahead: !no_readahead,
            });
            // Each count once, smallest first (the tables and charts read them in order).
            let threads: Option<Vec<usize>> = threads.map(|t| {
                let mut t: Vec<usize> = t.into_iter().map(usize::from).collect();
                t.sort_unstable();
                t.dedup();
                t
            });
            bench::run(&bench::Options {
                suites: &suites,
                quick,
                runs: runs as usize,
                json: json.as_deref(),
                plot: plot.as_deref(),
                trace: trace.as_ref(),
                variants: variants.as_deref(),
                threads: threads.as_deref(),
            })
        }
        Command::Plot {
            report,
            dir,
            suites,
        } => bench::plot_file(&report, &dir, &suites).map(drop),
        Command::BenchChild { spec } => bench::evict::child_main(&spec),
        Command::Mount {
            src,
            mnt,
            capacity,
            threads,
            foreground,
            allow_other,
            dev,
            channel,
            fuse_uring,
            sched,
            kind,
            staging,
            retry_timeout,
            disk_cache,
            disk_size,
        } => mount::mount(mount::MountArgs {
            src,
            mnt,
            capacity,
            threads,
            foreground,
            allow_other,
            dev,
            channel,
            fuse_uring,
            sched,
            kind,
            staging,
            retry_timeout,
            disk_cache,
            disk_size,
        }),
        Command::Stat { mnt } => mount::stat(&mnt),
    }
}
