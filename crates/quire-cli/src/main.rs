//! `quire`: benchmarks and reports for the quire page cache.
#![deny(unsafe_op_in_unsafe_fn)]

mod bench;

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
    }
}
