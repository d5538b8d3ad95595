//! `quire`: benchmarks of the quire page cache, and `quire mount`/`quire stat` for the FUSE file
//! system over it.
#![deny(unsafe_op_in_unsafe_fn)]

mod bench;
mod mount;

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
    /// Run benchmark suites, each side by side with its "before" (all suites if none is named).
    Bench {
        /// Suites to run (see `quire bench --list`).
        suites: Vec<String>,
        /// Shorter runs and smaller data: the whole run stays under a minute.
        #[arg(long)]
        quick: bool,
        /// Also write every figure as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// List the suites and exit.
        #[arg(long)]
        list: bool,
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
    Mount {
        /// The directory to serve.
        src: PathBuf,
        /// Where to mount it (an existing directory).
        mnt: PathBuf,
        /// quire's memory budget for cached file data (K, M, G suffixes).
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
        /// Which file system to serve (the others are the `fuse` benchmark's comparisons).
        #[arg(long, value_enum, default_value = "quire", hide = true)]
        kind: mount::Kind,
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
            list,
        } => {
            if list {
                for s in bench::SUITES {
                    println!("{:<10} {}", s.name, s.about);
                }
                return Ok(());
            }
            bench::run(&suites, quick, json.as_deref())
        }
        Command::BenchChild { spec } => bench::evict::child_main(&spec),
        Command::Mount {
            src,
            mnt,
            capacity,
            threads,
            foreground,
            allow_other,
            kind,
        } => mount::mount(mount::MountArgs {
            src,
            mnt,
            capacity,
            threads,
            foreground,
            allow_other,
            kind,
        }),
        Command::Stat { mnt } => mount::stat(&mnt),
    }
}
