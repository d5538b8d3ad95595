//! `quire bench evict --trace PATH [--trace-format F] [--budget SIZE | --sizes LIST]`:
//! page-access traces of the user's own, replayed through every quire variant of the suite
//! ([`QUIRE`]), through `default` (the configuration a user gets without choosing,
//! [`CacheConfig::new`]), through Belady's optimum (`opt`, the ceiling of a cache that keeps
//! every page it reads; below) and through the cache libraries a user would pick instead
//! (`peers.rs`), in place of the suite's cases.
//!
//! # Traces and cells
//!
//! `PATH` is a trace file; a directory, whose regular files are read in name order (hidden
//! files and `*.md` notes left out); or a pattern whose last component holds `*` (any run of
//! characters) or `?` (one), matched against the file names of its directory, in name order
//! ([`trace_files`]). A `.gz` file is decompressed as it is read; its format is that of its
//! name without `.gz` (`x.txt.gz`: text).
//!
//! A cell is one trace at one cache size, in entries of a page. Without `--sizes` a trace has
//! one cell, its budget `--budget` or a quarter of its distinct pages (below). `--sizes` gives
//! every trace a cell per size: a percentage of the trace's distinct pages (rounded down, in
//! integers: at most 6 decimals), a number of entries, or bytes (a page per entry)
//! ([`parse_sizes`]). Each size is resolved against the trace ([`resolve_cells`]): one larger
//! than the trace's distinct pages is clamped to them (a cache that holds every page measures
//! nothing more at a larger size), said on standard error and in the report; then a cell under
//! [`MIN_ENTRIES`] (the entries of [`MIN_BUDGET`]) is left out, and so is a size that comes
//! to the entries of an earlier one (`4096,16M`, `1%,1.0%`: the first is kept), each said on
//! standard error and listed in the report. `--budget` is clamped the same way. In a cell,
//! quire's caches get a budget of its entries × 4096 bytes,
//! OPT and the libraries its entries. The figures of a cell are recorded under case `trace`
//! where `--trace` names one file and there is no `--sizes`, else `trace NAME ENTRIES` (NAME
//! the file name without `.gz` and its extension); `summary.rs` draws a table per trace and the
//! summary against exact LRU from them.
//!
//! # Formats
//!
//! - `text`: one page number (a decimal `u64`) per line; blank lines and lines starting with
//!   `#` are skipped, and whitespace around a number is allowed.
//! - `oracle-general`: libCacheSim's `oracleGeneral` binary, little-endian records of 24 bytes
//!   (`u32` clock time, `u64` object id, `u32` object size, `i64` next access); only the id and
//!   the size are used. Uncompressed: a `.zst` trace must be decompressed first.
//! - `csv`: libCacheSim's csv traces: a header line naming the columns, then one access per
//!   line. The key is the column `obj_id` (or `id`, or `key`), the size the column `obj_size`
//!   (or `size`) if there is one; the other columns are ignored. Fields are separated by
//!   commas, or by tabs where the header has a tab and no comma. Keys may be any text.
//!
//! Without `--trace-format`, `.oracleGeneral` and `.bin` files are read as `oracle-general`,
//! `.csv` and `.tsv` files as `csv`, and anything else as `text`.
//!
//! A trace may expand to at most [`MAX_ACCESSES`] page accesses (2^31: its lines, or its
//! objects' pages summed over its accesses); past that it is refused as it is read
//! ([`TraceError::TooManyAccesses`]) rather than allocated.
//!
//! # From keys to pages
//!
//! Keys are mapped to dense page numbers `0..n` (a hash map), so that the replayed file is
//! exactly as long as the trace's distinct pages. Keys keep their order: the smallest key gets
//! the first pages. So page numbers (`text`) adjacent in the trace stay adjacent, and sequential
//! runs sequential, only the gaps between them closed; and objects whose ids say nothing of
//! where they lie (libCacheSim's are mostly hashes) land in no particular order, rather than in
//! the order first seen, which would make the first misses of a trace look sequential to
//! readahead. Numeric csv keys are numbers (`7` and `007` are one object) and come before the
//! others, which are compared as text.
//!
//! An object (`oracle-general`, `csv`) of `s` bytes covers `ceil(s / 4096)` consecutive pages
//! (at least one; an object whose size changes over the trace gets room for its largest size),
//! and an access to it reads its first `ceil(s / 4096)` pages in order, `s` the size this access
//! names — as a reader reads a whole object. Without a size column every object is one page.
//!
//! # Replay
//!
//! Each variant gets a fresh cache with the budget and one file over a store whose bytes are
//! computed (each 8-byte word is its offset), `n` pages long, that counts what it reads. The
//! pages are read one at a time in trace order by one thread (`read_exact_at` of 4 KiB), every
//! page's bytes checked. The reads go through the ordinary cache, readahead included: a
//! sequential run in the trace is read ahead as it would be for a real reader, and pages read
//! ahead count as read from the store whether or not the trace then uses them.
//!
//! Per variant, in case `trace`:
//! - `hit_ratio`: `1 - pages read from the store / pages asked for`, as in the suite's cases
//!   (and comparable with `opt`'s, which no variant can beat). Pages read ahead and evicted
//!   before use count as read, so where readahead reads more than the trace uses (a budget
//!   smaller than a loop, objects of several pages packed side by side) it goes below 0;
//! - `demand_hit_ratio` (quire): the share of accesses during which the replaying thread read
//!   nothing from the store — its page was cached, or being read ahead by the cache's I/O
//!   threads. Apart from `hit_ratio` it shows what readahead costs and what it saves;
//! - `evicted_pages`, and for quire `reclaim_ns_per_evicted`: the cache's own `reclaim_ns`
//!   counter over its `evictions`, the time in reclaim, direct and background, per page
//!   evicted (not recorded when nothing was evicted).
//!
//! - `accesses_per_s`: the trace's accesses over the wall time of the variant's replay (the
//!   cache's set-up included), for quire's variants and the libraries alike; moka's includes
//!   the `run_pending_tasks()` the replay calls after every insert (`peers.rs`).
//!
//! `opt` is Belady's replacement with forced insertion and room for the cell's entries: every
//! missed page enters the cache, evicting the resident page whose next use is furthest. That is
//! the ceiling of a cache that keeps every page it reads — as a page cache must: quire's
//! variants and the libraries that insert every miss (`peers.rs`) — not of one that may refuse
//! a new entry (the W-TinyLFU admission of foyer's `w-tinylfu` and of `moka`), which can go
//! above it (capacity 1, `A B A`: OPT inserts B and misses three times, refusing B hits once).
//! quire keeps a few frames free (its watermarks' reserve: under 2% of a budget below 4 MiB,
//! where the reader reclaims for itself; at least 16 frames above), so it holds a little less
//! than the budget; OPT and the libraries hold exactly the cell's entries. The
//! libraries' accounting is a simulator's (`peers.rs`): a lookup per access, an insert on a
//! miss. Every figure counts the whole trace: cold misses are misses for all. A one-line
//! summary per variant is printed on standard error as it finishes.
//!
//! Without `--sizes`, the budget is `--budget`, or else a quarter of the trace's distinct pages
//! (rounded up to a page); at least [`MIN_BUDGET`] either way.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use quire::filemap::{CacheConfig, PageCache};
use quire::stats::Event;
use quire::store::{Result as StoreResult, Store};

use super::super::Bench;
use super::peers::{self, PEERS, SEEDED_RUNS};
use super::summary::{CellInfo, SkippedCell};
use super::workload::{opt_hits, CountingStore, SyntheticStore};
use super::{PAGE, QUIRE};

/// The smallest budget a replay takes, as `quire mount --capacity`: below it even the few
/// frames reclaim keeps free are a large share of the cache.
pub const MIN_BUDGET: u64 = 1 << 20;

/// The most page accesses a trace may expand to: 2^31. The replay holds 4 bytes per access
/// (its page), and OPT about 13 more (the next use of each, whether it hit) — 36 GiB at this
/// bound, beyond which no machine the suite runs on would get through; checked as the trace is
/// read, so that a malformed file whose records claim huge objects (an oracleGeneral size of
/// 4 GiB is 2^20 pages per access) is refused before anything of that size is allocated.
pub const MAX_ACCESSES: u64 = 1 << 31;

/// The case name of a replay.
const CASE: &str = "trace";

/// How a trace file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// One page number per line.
    Text,
    /// libCacheSim's oracleGeneral binary records.
    OracleGeneral,
    /// libCacheSim's csv, with a header line.
    Csv,
}

impl TraceFormat {
    /// The format a file's name suggests: `.oracleGeneral`/`.bin` binary, `.csv`/`.tsv` csv,
    /// anything else text.
    pub fn of_path(path: &Path) -> TraceFormat {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "oraclegeneral" | "bin" => TraceFormat::OracleGeneral,
            "csv" | "tsv" => TraceFormat::Csv,
            _ => TraceFormat::Text,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TraceFormat::Text => "text",
            TraceFormat::OracleGeneral => "oracle-general",
            TraceFormat::Csv => "csv",
        }
    }
}

/// What `--trace`, `--trace-format`, `--budget` and `--sizes` asked for.
#[derive(Clone, Debug)]
pub struct TraceArgs {
    /// A file, a directory or a pattern of file names ([`trace_files`]).
    pub path: PathBuf,
    /// The format; `None`: by the file's extension.
    pub format: Option<TraceFormat>,
    /// The budget in bytes; `None`: a quarter of the distinct pages (or `sizes`).
    pub budget: Option<u64>,
    /// The cache sizes of the cells (`--sizes`); `None`: one cell of `budget`.
    pub sizes: Option<TraceSizes>,
    /// Whether the caches read ahead (`--no-readahead` turns it off).
    pub readahead: bool,
}

/// Why a trace could not be read. Every variant names the file; the malformed ones name the
/// line (text, csv) or the record and its byte offset (binary).
#[derive(Debug)]
pub enum TraceError {
    /// The file could not be read.
    Io { file: String, error: io::Error },
    /// A line of a text or csv trace is malformed (lines count from 1).
    Line {
        file: String,
        line: usize,
        problem: String,
    },
    /// A record of a binary trace is malformed (records count from 0).
    Record {
        file: String,
        index: u64,
        offset: u64,
        problem: String,
    },
    /// The trace has no access.
    Empty { file: String },
    /// The trace has more distinct pages than a replay can number (`u32`).
    TooLarge { file: String },
    /// The trace expands to more page accesses than [`MAX_ACCESSES`] (a text trace's lines, an
    /// object trace's pages per access summed).
    TooManyAccesses { file: String },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io { file, error } => write!(f, "{file}: {error}"),
            TraceError::Line {
                file,
                line,
                problem,
            } => write!(f, "{file}:{line}: {problem}"),
            TraceError::Record {
                file,
                index,
                offset,
                problem,
            } => write!(f, "{file}: record {index} (byte {offset}): {problem}"),
            TraceError::Empty { file } => write!(f, "{file}: the trace has no accesses"),
            TraceError::TooLarge { file } => {
                write!(f, "{file}: more than {} distinct pages", u32::MAX)
            }
            TraceError::TooManyAccesses { file } => write!(
                f,
                "{file}: more than {MAX_ACCESSES} page accesses (2^31), more than a replay holds \
                 in memory (its objects' sizes summed over its accesses, 4 KiB a page)"
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A trace made ready to replay.
#[derive(Debug)]
pub struct Trace {
    /// The dense page of each access, in order.
    pub pages: Vec<u32>,
    /// Distinct pages: the replayed file is this many pages long.
    pub distinct: usize,
    /// Lines or records (an object access may read several pages).
    pub requests: usize,
    pub format: TraceFormat,
}

/// Whether `path` names a gzip-compressed file (`.gz`).
fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Reads the trace at `path`, in `format` or the one its name suggests; a `.gz` file is
/// decompressed as it is read, its format taken from its name without `.gz`.
pub fn load(path: &Path, format: Option<TraceFormat>) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let gz = is_gz(path);
    // The name the format is read from: without `.gz`.
    let named = if gz {
        path.with_extension("")
    } else {
        path.to_path_buf()
    };
    let is_zst = named
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("zst"));
    if is_zst && format.is_none() {
        return Err(TraceError::Io {
            file,
            error: io::Error::new(
                io::ErrorKind::InvalidInput,
                "a compressed trace: decompress it first (zstd -d)",
            ),
        });
    }
    let f = File::open(path).map_err(|error| TraceError::Io {
        file: file.clone(),
        error,
    })?;
    let format = format.unwrap_or_else(|| TraceFormat::of_path(&named));
    if gz {
        let inflated = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 16, f));
        parse(BufReader::with_capacity(1 << 20, inflated), &file, format)
    } else {
        parse(BufReader::with_capacity(1 << 20, f), &file, format)
    }
}

/// The trace files `--trace` names: the file itself; every regular file of a directory,
/// sorted by name, but hidden files and its notes (`*.md`); or, where the last component
/// holds `*` or `?` and names no file, the regular files of its directory whose names match
/// it (`*` any run of characters, `?` one), sorted by name.
pub fn trace_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let listed = |dir: &Path, keep: &dyn Fn(&str) -> bool| -> anyhow::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        let entries =
            std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        for e in entries {
            let e = e.map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
            let p = e.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if keep(name) && std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
                files.push(p);
            }
        }
        files.sort();
        Ok(files)
    };
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            let files = listed(path, &|n| !n.starts_with('.') && !n.ends_with(".md"))?;
            ensure!(
                !files.is_empty(),
                "{}: no trace files in it",
                path.display()
            );
            Ok(files)
        }
        Ok(_) => Ok(vec![path.to_path_buf()]),
        Err(e) => {
            let pattern = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !pattern.contains(['*', '?']) {
                bail!("{}: {e}", path.display());
            }
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let files = listed(dir, &|n| glob_match(pattern, n))?;
            ensure!(!files.is_empty(), "{}: no file matches", path.display());
            Ok(files)
        }
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters and `?` for
/// one.
fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    // The last `*` seen, and where in `name` its run ends so far.
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            // Let the last `*` take one more character.
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// A trace's short name in tables and case names: its file name without `.gz` and without
/// its extension (`lirs-cpp.txt.gz`: `lirs-cpp`).
pub fn short_name(path: &Path) -> String {
    let mut p = path.to_path_buf();
    if is_gz(&p) {
        p = p.with_extension("");
    }
    p.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

// ---- sizes --------------------------------------------------------------------------------

/// The smallest cell: the entries of [`MIN_BUDGET`].
pub const MIN_ENTRIES: u64 = MIN_BUDGET / PAGE as u64;

/// Millionths of a percent in a percent: a percentage of `--sizes` is read as a whole number
/// of them, so that `1%` of a trace is the same integer however many distinct pages it has.
const PERCENT: u64 = 1_000_000;

/// Decimals a percentage of `--sizes` may have: one millionth of a percent.
const PERCENT_DECIMALS: usize = 6;

/// One cache size of `--sizes`.
#[derive(Clone, Debug, PartialEq)]
pub enum Size {
    /// A share of the trace's distinct pages in millionths of a percent (`1%`: 1 000 000).
    Percent(u64),
    /// A number of entries (`4096`).
    Entries(u64),
    /// Bytes (`64M`): a page per entry.
    Bytes(u64),
}

/// `--sizes`: each size with the text it was given as.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSizes(pub Vec<(String, Size)>);

impl Size {
    /// Entries a cell of this size asks for in a trace of `distinct` pages (a percentage rounds
    /// down, computed in integers); possibly more than `distinct` ([`resolve_cells`] clamps).
    pub fn entries(&self, distinct: u64) -> u64 {
        match *self {
            Size::Percent(p) => {
                let e = u128::from(distinct) * u128::from(p) / u128::from(100 * PERCENT);
                // At most `distinct`: a percentage is at most 100%.
                u64::try_from(e).unwrap_or(u64::MAX)
            }
            Size::Entries(n) => n,
            Size::Bytes(b) => b / PAGE as u64,
        }
    }
}

/// A percentage of `--sizes` without its `%` (`0.1`, `40`, `1.0`) in millionths of a percent:
/// digits, perhaps a point and at most [`PERCENT_DECIMALS`] more digits.
fn parse_percent(t: &str, whole: &str) -> Result<u64, String> {
    let not = || format!("{whole:?} is not a percentage (e.g. 0.1%)");
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return Err(not());
    }
    if frac.len() > PERCENT_DECIMALS {
        return Err(format!(
            "{whole:?}: a percentage takes at most {PERCENT_DECIMALS} decimals"
        ));
    }
    let out_of_range = || {
        format!("{whole:?}: a percentage of the distinct pages must be above 0% and at most 100%")
    };
    let int: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| out_of_range())?
    };
    let frac: u64 = format!("{frac:0<PERCENT_DECIMALS$}")
        .parse()
        .map_err(|_| not())?;
    let v = int
        .checked_mul(PERCENT)
        .and_then(|i| i.checked_add(frac))
        .ok_or_else(out_of_range)?;
    if v == 0 || v > 100 * PERCENT {
        return Err(out_of_range());
    }
    Ok(v)
}

/// Parses `--sizes`: comma-separated sizes, each a percentage of the distinct pages (`0.1%`,
/// above 0 and at most 100, at most 6 decimals), a number of entries (`4096`) or a byte size
/// with a K, M, G or T suffix (`64M`, at least a page). The same text twice is refused; two
/// sizes that come to the same entries in a trace are told apart there ([`resolve_cells`]).
pub fn parse_sizes(s: &str) -> Result<TraceSizes, String> {
    let mut out: Vec<(String, Size)> = Vec::new();
    for item in s.split(',') {
        let t = item.trim();
        if t.is_empty() {
            return Err(format!(
                "{s:?}: an empty size (sizes are comma-separated, e.g. 0.1%,1%,4096,64M)"
            ));
        }
        let size = if let Some(p) = t.strip_suffix('%') {
            Size::Percent(parse_percent(p.trim(), t)?)
        } else if t.bytes().all(|c| c.is_ascii_digit()) {
            let n: u64 = t
                .parse()
                .map_err(|_| format!("{t:?} is too large a number of entries"))?;
            if n == 0 {
                return Err(format!("{t:?}: a cache of no entries"));
            }
            Size::Entries(n)
        } else {
            let b = crate::mount::parse_size(t).map_err(|e| {
                format!("{e}; a size is a percentage (1%), entries (4096) or bytes (64M)")
            })? as u64;
            if b < PAGE as u64 {
                return Err(format!("{t:?} is less than one page (4096 bytes)"));
            }
            Size::Bytes(b)
        };
        if out.iter().any(|(l, _)| l == t) {
            return Err(format!("{s:?} names {t} twice"));
        }
        out.push((t.to_string(), size));
    }
    Ok(TraceSizes(out))
}

/// A cell of one trace, as [`resolve_cells`] plans it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedCell {
    /// The size as `--sizes` gave it.
    pub label: String,
    /// Entries of its caches.
    pub entries: u64,
    /// The entries the size asked for, where more than the trace's distinct pages: the cell
    /// is clamped to them.
    pub clamped_from: Option<u64>,
}

/// A size a trace has no cell of, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct LeftOut {
    pub label: String,
    pub entries: u64,
    /// The earlier size of the same entries, whose cell stands for both; `None`: under
    /// [`MIN_ENTRIES`].
    pub same_as: Option<String>,
}

/// The cells of a trace of `distinct` pages at `sizes`, in their order, and the sizes left
/// out. A size larger than the trace is clamped to `distinct` entries: a cache that holds
/// every page measures nothing more at any larger size (every access after the first of its
/// page hits), and a larger one would only make the replay allocate for entries never used.
/// Then a size under [`MIN_ENTRIES`] is left out, and so is a size whose entries an earlier
/// size already has (`4096,16M`, `1%,1.0%`, or `40%,1G` on a small trace): its cell would be
/// the same replay, once more, under the same case.
pub fn resolve_cells(sizes: &TraceSizes, distinct: u64) -> (Vec<PlannedCell>, Vec<LeftOut>) {
    let mut cells: Vec<PlannedCell> = Vec::new();
    let mut left = Vec::new();
    for (label, size) in &sizes.0 {
        let asked = size.entries(distinct);
        let entries = asked.min(distinct);
        if entries < MIN_ENTRIES {
            left.push(LeftOut {
                label: label.clone(),
                entries,
                same_as: None,
            });
            continue;
        }
        if let Some(first) = cells.iter().find(|c| c.entries == entries) {
            left.push(LeftOut {
                label: label.clone(),
                entries,
                same_as: Some(first.label.clone()),
            });
            continue;
        }
        cells.push(PlannedCell {
            label: label.clone(),
            entries,
            clamped_from: (asked > entries).then_some(asked),
        });
    }
    (cells, left)
}

/// Reads a trace in `format` from `r`; `file` names it in errors.
pub fn parse(r: impl BufRead, file: &str, format: TraceFormat) -> Result<Trace, TraceError> {
    let trace = match format {
        TraceFormat::Text => parse_text(r, file)?,
        TraceFormat::OracleGeneral => parse_oracle(r, file)?,
        TraceFormat::Csv => parse_csv(r, file)?,
    };
    if trace.pages.is_empty() {
        return Err(TraceError::Empty {
            file: file.to_string(),
        });
    }
    Ok(trace)
}

/// Calls `f` with each line (1-based number, text without its line end) of `r`.
fn lines(
    mut r: impl BufRead,
    file: &str,
    mut f: impl FnMut(usize, &str) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        buf.clear();
        let n = r
            .read_until(b'\n', &mut buf)
            .map_err(|error| TraceError::Io {
                file: file.to_string(),
                error,
            })?;
        if n == 0 {
            return Ok(());
        }
        line += 1;
        let Ok(text) = std::str::from_utf8(&buf) else {
            return Err(TraceError::Line {
                file: file.to_string(),
                line,
                problem: "not UTF-8 text (a binary trace? see --trace-format)".into(),
            });
        };
        f(line, text.trim_end_matches(['\n', '\r']))?;
    }
}

/// Whether a line carries nothing: blank, or a `#` comment.
fn skipped(text: &str) -> bool {
    let t = text.trim();
    t.is_empty() || t.starts_with('#')
}

fn parse_text(r: impl BufRead, file: &str) -> Result<Trace, TraceError> {
    let mut pages = Objects::<u64>::new();
    lines(r, file, |line, text| {
        if skipped(text) {
            return Ok(());
        }
        let t = text.trim();
        let page = t.parse::<u64>().map_err(|_| TraceError::Line {
            file: file.to_string(),
            line,
            problem: format!("{t:?} is not a page number"),
        })?;
        pages.access(page, 1).map_err(|l| l.error(file))
    })?;
    pages.finish(file, TraceFormat::Text)
}

/// Pages an object of `size` bytes covers: at least one.
fn pages_of(size: u64) -> u64 {
    size.div_ceil(PAGE as u64).max(1)
}

/// A bound of [`Objects`] a trace went past.
#[derive(Debug)]
enum Limit {
    /// More objects than a `u32` numbers.
    Objects,
    /// More page accesses than [`MAX_ACCESSES`].
    Accesses,
}

impl Limit {
    fn error(self, file: &str) -> TraceError {
        let file = file.to_string();
        match self {
            Limit::Objects => TraceError::TooLarge { file },
            Limit::Accesses => TraceError::TooManyAccesses { file },
        }
    }
}

/// Objects laid out as consecutive pages in the order of their keys, as the accesses come in.
struct Objects<K> {
    /// The number of each key, in the order first seen.
    ids: HashMap<K, u32>,
    keys: Vec<K>,
    /// Pages of each object: the most any access asked for.
    span: Vec<u64>,
    /// (object, pages) of each access.
    accesses: Vec<(u32, u32)>,
    /// The pages of the accesses so far, summed: at most [`MAX_ACCESSES`].
    pages: u64,
}

impl<K: std::hash::Hash + Ord + Clone> Objects<K> {
    fn new() -> Self {
        Objects {
            ids: HashMap::new(),
            keys: Vec::new(),
            span: Vec::new(),
            accesses: Vec::new(),
            pages: 0,
        }
    }

    /// One access of `pages` pages to `key`; refused where there would be more objects than a
    /// `u32` numbers or more page accesses than [`MAX_ACCESSES`].
    fn access(&mut self, key: K, pages: u64) -> Result<(), Limit> {
        let pages = pages.min(u64::from(u32::MAX));
        self.pages = self
            .pages
            .checked_add(pages)
            .filter(|&p| p <= MAX_ACCESSES)
            .ok_or(Limit::Accesses)?;
        let next = self.span.len();
        let next = u32::try_from(next).map_err(|_| Limit::Objects)?;
        let id = *self.ids.entry(key.clone()).or_insert(next);
        if id == next {
            self.keys.push(key);
            self.span.push(0);
        }
        let span = &mut self.span[id as usize];
        *span = (*span).max(pages);
        self.accesses.push((id, pages as u32));
        Ok(())
    }

    fn finish(self, file: &str, format: TraceFormat) -> Result<Trace, TraceError> {
        let too_large = || TraceError::TooLarge {
            file: file.to_string(),
        };
        // The first page of each object, objects in key order.
        let mut order: Vec<u32> = (0..self.keys.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.keys[a as usize].cmp(&self.keys[b as usize]));
        let mut base = vec![0u32; self.span.len()];
        let mut next = 0u64;
        for &o in &order {
            base[o as usize] = u32::try_from(next).map_err(|_| too_large())?;
            next += self.span[o as usize];
        }
        let distinct = u32::try_from(next).map_err(|_| too_large())? as usize;
        // At most `MAX_ACCESSES` (`access`).
        let mut pages = Vec::with_capacity(self.pages as usize);
        for &(o, k) in &self.accesses {
            let b = base[o as usize];
            pages.extend(b..b + k);
        }
        Ok(Trace {
            pages,
            distinct,
            requests: self.accesses.len(),
            format,
        })
    }
}

/// Bytes in an oracleGeneral record.
const RECORD: usize = 24;

fn parse_oracle(mut r: impl Read, file: &str) -> Result<Trace, TraceError> {
    let mut objects = Objects::<u64>::new();
    let mut rec = [0u8; RECORD];
    let mut index = 0u64;
    loop {
        // Fill one record, noticing the end of the file within it.
        let mut got = 0;
        while got < RECORD {
            match r.read(&mut rec[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(TraceError::Io {
                        file: file.to_string(),
                        error,
                    })
                }
            }
        }
        if got == 0 {
            break;
        }
        if got < RECORD {
            return Err(TraceError::Record {
                file: file.to_string(),
                index,
                offset: index * RECORD as u64,
                problem: format!(
                    "the file ends within the record ({got} of {RECORD} bytes): not an \
                     oracleGeneral trace, or a truncated one"
                ),
            });
        }
        let id = u64::from_le_bytes(rec[4..12].try_into().expect("8 bytes"));
        let size = u32::from_le_bytes(rec[12..16].try_into().expect("4 bytes"));
        objects
            .access(id, pages_of(u64::from(size)))
            .map_err(|l| l.error(file))?;
        index += 1;
    }
    objects.finish(file, TraceFormat::OracleGeneral)
}

/// A csv key: a number where the field is one (so `7` and `007` are one object), else the text.
/// Numbers come before texts, in their order.
#[derive(Clone, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Num(u64),
    Text(String),
}

/// A csv field without surrounding whitespace and double quotes.
fn field(s: &str) -> &str {
    let t = s.trim();
    t.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(t)
        .trim()
}

fn parse_csv(r: impl BufRead, file: &str) -> Result<Trace, TraceError> {
    /// The header's findings: the delimiter, the key column and the size column.
    struct Columns {
        delim: char,
        id: usize,
        size: Option<usize>,
        id_name: String,
    }
    let mut columns: Option<Columns> = None;
    let mut objects = Objects::<Key>::new();
    let bad = |line: usize, problem: String| TraceError::Line {
        file: file.to_string(),
        line,
        problem,
    };
    lines(r, file, |line, text| {
        if skipped(text) {
            return Ok(());
        }
        let Some(c) = &columns else {
            let delim = if !text.contains(',') && text.contains('\t') {
                '\t'
            } else {
                ','
            };
            let names: Vec<String> = text
                .split(delim)
                .map(|n| field(n).to_ascii_lowercase())
                .collect();
            let find = |want: &[&'static str]| {
                want.iter()
                    .find_map(|w| names.iter().position(|n| n == w).map(|i| (i, *w)))
            };
            let Some((id, id_name)) = find(&["obj_id", "id", "key"]) else {
                return Err(bad(
                    line,
                    format!(
                        "the header has no obj_id column (nor id, key): it names {}; a csv \
                         trace starts with a line naming its columns",
                        names.join(", ")
                    ),
                ));
            };
            columns = Some(Columns {
                delim,
                id,
                size: find(&["obj_size", "size"]).map(|(i, _)| i),
                id_name: id_name.to_string(),
            });
            return Ok(());
        };
        let fields: Vec<&str> = text.split(c.delim).collect();
        let need = c.size.map_or(c.id, |s| s.max(c.id)) + 1;
        if fields.len() < need {
            return Err(bad(
                line,
                format!(
                    "{} field(s), but the header names {need} or more (obj_id is field {})",
                    fields.len(),
                    c.id + 1
                ),
            ));
        }
        let id = field(fields[c.id]);
        if id.is_empty() {
            return Err(bad(line, format!("an empty {}", c.id_name)));
        }
        let key = id
            .parse::<u64>()
            .map_or_else(|_| Key::Text(id.to_string()), Key::Num);
        let pages = match c.size {
            None => 1,
            Some(s) => {
                let v = field(fields[s]);
                let size = v
                    .parse::<u64>()
                    .map_err(|_| bad(line, format!("object size {v:?} is not a number")))?;
                pages_of(size)
            }
        };
        objects.access(key, pages).map_err(|l| l.error(file))
    })?;
    if columns.is_none() {
        return Err(TraceError::Empty {
            file: file.to_string(),
        });
    }
    objects.finish(file, TraceFormat::Csv)
}

// ---- replay -------------------------------------------------------------------------------

/// Steps of a replay, for the progress bar: per trace file, reading it, then per size each
/// variant `wants` asks for (`--variants`). A size a trace leaves out ([`resolve_cells`]) is
/// known only once the trace is read: its steps are then taken out ([`run`]).
pub fn steps(args: &TraceArgs, wants: &dyn Fn(&str) -> bool) -> u64 {
    let files = trace_files(&args.path).map_or(1, |f| f.len()) as u64;
    let cells = args.sizes.as_ref().map_or(1, |s| s.0.len()) as u64;
    files * (1 + cells * variants_run(wants))
}

/// The replays of a cell: the quire variants, `default`, `opt` and the peers that `wants`
/// asks for.
fn variants_run(wants: &dyn Fn(&str) -> bool) -> u64 {
    let quire = QUIRE.iter().filter(|v| wants(v.name)).count();
    let own = ["default", "opt"].iter().filter(|v| wants(v)).count();
    let peers = PEERS.iter().filter(|p| wants(p.name())).count();
    (quire + own + peers) as u64
}

/// The replay's store: computed bytes ([`SyntheticStore`]) that counts every byte read
/// ([`CountingStore`]), and apart the reads made by the replaying thread itself, so that an
/// access that had to wait for the store is told from one that found its page (or found it
/// being read ahead by the cache's I/O threads).
struct ReplayStore {
    inner: CountingStore<SyntheticStore>,
    replayer_reads: AtomicU64,
}

thread_local! {
    /// Whether this thread is a replay's own (a thread-local flag rather than a comparison
    /// of thread ids: `thread::current()` takes and drops a reference, two atomic operations
    /// on every read).
    static REPLAYER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Store for ReplayStore {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        if REPLAYER.with(|r| r.get()) {
            self.replayer_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> StoreResult<usize> {
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> StoreResult<()> {
        self.inner.sync()
    }
    fn sync_all(&self) -> StoreResult<()> {
        self.inner.sync_all()
    }
    fn len(&self) -> StoreResult<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> StoreResult<()> {
        self.inner.set_len(len)
    }
}

/// What one variant's replay measured.
struct Outcome {
    /// `1 - pages read / pages asked for`.
    hit_ratio: f64,
    /// The share of accesses during which the replaying thread read nothing from the store.
    demand_hit_ratio: f64,
    evicted: u64,
    reclaim_ns: u64,
    /// How long building the cache and opening the file took (the cache pins its whole budget
    /// for io_uring's fixed buffers, which faults in and zeroes every frame).
    setup: Duration,
    /// How long the accesses took.
    replay: Duration,
}

/// Replays `trace` through a fresh cache configured as `cfg`.
fn replay(cfg: CacheConfig, trace: &Trace) -> anyhow::Result<Outcome> {
    let t0 = Instant::now();
    let cache = PageCache::new(cfg)?;
    let len = trace.distinct as u64 * PAGE as u64;
    let store = Arc::new(ReplayStore {
        inner: CountingStore::new(SyntheticStore::new(len)),
        replayer_reads: AtomicU64::new(0),
    });
    REPLAYER.with(|r| r.set(true));
    let file = cache.open(store.clone())?;
    let before = cache.stats_exact().vmstat;
    let mut buf = vec![0u8; PAGE];
    let mut waited = 0u64;
    let t1 = Instant::now();
    for (i, &p) in trace.pages.iter().enumerate() {
        // An access reads one 8-byte word of its page, a different one at each access (so
        // that the replay looks at every word of the content), and every 64th access the
        // whole page: a page cache's lookup or miss is what is timed, as the libraries'
        // lookups and inserts are, not a 4 KiB copy and its check at every access.
        let whole = i % 64 == 0;
        let at = if whole { 0 } else { (i % (PAGE / 8)) * 8 };
        let off = u64::from(p) * PAGE as u64 + at as u64;
        let dst = if whole { &mut buf[..] } else { &mut buf[..8] };
        let reads = store.replayer_reads.load(Ordering::Relaxed);
        file.read_exact_at(off, dst)?;
        waited += u64::from(store.replayer_reads.load(Ordering::Relaxed) != reads);
        // The computed content: each 8-byte word is its offset. (Every word is compared,
        // without stopping at the first wrong one, by or-ing the differences: a loop the
        // compiler vectorises without 64-bit compares.)
        let wrong = dst.chunks_exact(8).enumerate().fold(0u64, |acc, (k, w)| {
            acc | (u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ (off + 8 * k as u64))
        });
        ensure!(wrong == 0, "access {i}: wrong bytes in page {p}");
    }
    let replay = t1.elapsed();
    let vm = cache.stats_exact().vmstat.since(&before);
    let read_pages = store.inner.bytes_read() / PAGE as u64;
    let asked = trace.pages.len() as f64;
    Ok(Outcome {
        hit_ratio: 1.0 - read_pages as f64 / asked,
        demand_hit_ratio: 1.0 - waited as f64 / asked,
        evicted: vm.get(Event::Evictions),
        reclaim_ns: vm.get(Event::ReclaimNs),
        setup: t1 - t0,
        replay,
    })
}

/// Records one variant's figures and prints its summary line.
fn report(b: &mut Bench, case: &str, variant: &str, o: &Outcome, accesses_per_s: f64) {
    b.record(case, variant, 1, "hit_ratio", o.hit_ratio, "ratio");
    b.record(
        case,
        variant,
        1,
        "demand_hit_ratio",
        o.demand_hit_ratio,
        "ratio",
    );
    b.record(case, variant, 1, "evicted_pages", o.evicted as f64, "pages");
    b.record(case, variant, 1, "accesses_per_s", accesses_per_s, "1/s");
    let per = if o.evicted > 0 {
        let per = o.reclaim_ns as f64 / o.evicted as f64;
        b.record(case, variant, 1, "reclaim_ns_per_evicted", per, "ns");
        format!("{per:.0} ns of reclaim per evicted page")
    } else {
        "nothing evicted".to_string()
    };
    b.note(format!(
        "{case} / {variant}: hit ratio {:.4} (demand {:.4}), {} pages evicted, {per}, \
         {accesses_per_s:.0} accesses/s (the cache built in {} ms, not counted)",
        o.hit_ratio,
        o.demand_hit_ratio,
        o.evicted,
        o.setup.as_millis()
    ));
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The entries of a run without `--sizes`: `--budget` in pages, or a quarter of the distinct
/// pages; with why. A budget above the trace's distinct pages (and [`MIN_ENTRIES`]) is
/// clamped to them, as a size of `--sizes` is ([`resolve_cells`]).
fn default_budget(args: &TraceArgs, distinct: u64) -> anyhow::Result<(u64, String)> {
    let page = PAGE as u64;
    Ok(match args.budget {
        Some(bytes) => {
            if bytes < MIN_BUDGET {
                bail!(
                    "--budget {bytes} is below the smallest budget a replay takes, {}",
                    mib(MIN_BUDGET)
                );
            }
            let entries = bytes.div_ceil(page);
            let most = distinct.max(MIN_ENTRIES);
            if entries > most {
                (
                    most,
                    format!(
                        "--budget, more than the trace's {distinct} distinct pages: clamped to \
                         them (a larger cache holds the same)"
                    ),
                )
            } else if entries * page == bytes {
                (entries, "--budget".into())
            } else {
                (entries, "--budget, rounded up to a page".into())
            }
        }
        None => {
            let quarter = distinct.div_ceil(4);
            if quarter >= MIN_ENTRIES {
                (quarter, "default: a quarter of the distinct pages".into())
            } else {
                (
                    MIN_ENTRIES,
                    format!(
                        "default: a quarter of the distinct pages ({}), raised to the \
                         smallest budget",
                        mib(quarter * page)
                    ),
                )
            }
        }
    })
}

/// The replay of `args`' traces: per trace and cache size (a cell), every variant of
/// [`QUIRE`], `default`, `opt` and every peer ([`PEERS`]). The case of a cell is `trace` where
/// `--trace` names one file and there is no `--sizes` (one cell), else `trace NAME ENTRIES`.
pub fn run(b: &mut Bench, args: &TraceArgs) -> anyhow::Result<()> {
    let files = trace_files(&args.path)?;
    let single = args.sizes.is_none() && files.len() == 1 && files[0] == args.path;
    // Short names, or the whole file names where two traces would share one.
    let mut names: Vec<String> = files.iter().map(|f| short_name(f)).collect();
    if (1..names.len()).any(|i| names[..i].contains(&names[i])) {
        names = files
            .iter()
            .map(|f| {
                f.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into())
            })
            .collect();
    }
    let page = PAGE as u64;
    for (path, name) in files.iter().zip(&names) {
        b.step(&format!("reading {}", path.display()));
        let trace = load(path, args.format)?;
        let distinct = trace.distinct as u64;
        // The cells: (size label, entries, why, entries asked where clamped).
        let mut cells: Vec<(String, u64, String, Option<u64>)> = Vec::new();
        match &args.sizes {
            None => {
                let (entries, why) = default_budget(args, distinct)?;
                cells.push(("budget".into(), entries, why, None));
            }
            Some(sizes) => {
                let (planned, left) = resolve_cells(sizes, distinct);
                b.unplanned_steps(left.len() as u64 * variants_run(&|v| b.wants(v)));
                for l in left {
                    let why = match &l.same_as {
                        None => format!(
                            "under the smallest cell ({MIN_ENTRIES} entries, {})",
                            mib(MIN_BUDGET)
                        ),
                        Some(first) => format!("the same cell as {first}, replayed once"),
                    };
                    b.note(format!(
                        "{CASE} {name}: {} is {} entries, {why}: left out",
                        l.label, l.entries
                    ));
                    b.trace_skipped(SkippedCell {
                        trace: name.clone(),
                        file: path.display().to_string(),
                        size: l.label,
                        capacity: l.entries,
                        same_as: l.same_as,
                    });
                }
                for c in planned {
                    let why = match c.clamped_from {
                        None => format!("--sizes {}", c.label),
                        Some(asked) => {
                            b.note(format!(
                                "{CASE} {name}: {} is {asked} entries, more than the trace's \
                                 {distinct} distinct pages: clamped to them (a larger cache \
                                 holds the same)",
                                c.label
                            ));
                            format!(
                                "--sizes {}, {asked} entries clamped to the distinct pages",
                                c.label
                            )
                        }
                    };
                    cells.push((c.label, c.entries, why, c.clamped_from));
                }
            }
        }
        let budgets: Vec<String> = cells
            .iter()
            .map(|(_, e, why, _)| format!("{} = {e} pages ({why})", mib(e.saturating_mul(page))))
            .collect();
        b.note(format!(
            "{CASE}: {} ({}): {} accesses of 4 KiB ({} requests) over {} distinct pages ({}); \
             budget {}",
            path.display(),
            trace.format.name(),
            trace.pages.len(),
            trace.requests,
            trace.distinct,
            mib(trace.distinct as u64 * page),
            if budgets.is_empty() {
                "none: every size left out".to_string()
            } else {
                budgets.join(", ")
            },
        ));
        for (label, entries, _, clamped_from) in cells {
            let case = if single {
                CASE.to_string()
            } else {
                format!("{CASE} {name} {entries}")
            };
            b.trace_cell(CellInfo {
                case: case.clone(),
                trace: name.clone(),
                file: path.display().to_string(),
                size: label,
                capacity: entries,
                share: entries as f64 / trace.distinct as f64,
                accesses: trace.pages.len() as u64,
                distinct,
                clamped_from,
            });
            replay_cell(b, args, &trace, &case, entries)?;
        }
    }
    Ok(())
}

/// One cell: `trace` through every variant asked for with room for `entries` pages.
fn replay_cell(
    b: &mut Bench,
    args: &TraceArgs,
    trace: &Trace,
    case: &str,
    entries: u64,
) -> anyhow::Result<()> {
    // At most the trace's distinct pages (`resolve_cells`, `default_budget`): 2^44 bytes.
    let budget = entries
        .checked_mul(PAGE as u64)
        .ok_or_else(|| anyhow::anyhow!("{case}: {entries} entries overflow a budget in bytes"))?;
    let readahead = |mut cfg: CacheConfig| {
        if !args.readahead {
            cfg.readahead_max = 0;
        }
        cfg
    };
    let accesses = trace.pages.len() as f64;
    // The accesses alone are timed, as the libraries' are: building a cache is done once,
    // and quire's pins its whole budget (the setup time is in the note line).
    let timed = |cfg: CacheConfig| -> anyhow::Result<(Outcome, f64)> {
        let o = replay(cfg, trace)?;
        let speed = accesses / o.replay.as_secs_f64().max(1e-9);
        Ok((o, speed))
    };
    for v in QUIRE {
        if !b.wants(v.name) {
            continue;
        }
        b.step(&format!("{case} / {}", v.name));
        let (o, speed) = timed(readahead(v.config(budget)))?;
        report(b, case, v.name, &o, speed);
    }
    if b.wants("default") {
        b.step(&format!("{case} / default"));
        let (o, speed) = timed(readahead(CacheConfig::new(budget as usize)))?;
        report(b, case, "default", &o, speed);
    }
    let capacity = entries as usize;
    if b.wants("opt") {
        b.step(&format!("{case} / opt"));
        let hits = opt_hits(&trace.pages, capacity);
        let misses = hits.iter().filter(|&&h| !h).count();
        let ratio = 1.0 - misses as f64 / hits.len() as f64;
        // Every miss inserts a page, and evicts one once the cache is full.
        let evicted = misses.saturating_sub(capacity);
        b.record(case, "opt", 1, "hit_ratio", ratio, "ratio");
        b.record(case, "opt", 1, "evicted_pages", evicted as f64, "pages");
        b.note(format!(
            "{case} / opt: hit ratio {ratio:.4}, {evicted} pages evicted"
        ));
    }
    for p in PEERS {
        if !b.wants(p.name()) {
            continue;
        }
        b.step(&format!("{case} / {}", p.name()));
        let o = match peers::run(*p, &trace.pages, capacity) {
            Ok(o) => o,
            Err(why) => {
                b.note(format!(
                    "{case} / {}: the library panicked ({why}): no figure",
                    p.name()
                ));
                continue;
            }
        };
        b.record(case, p.name(), 1, "hit_ratio", o.hit_ratio, "ratio");
        b.record(case, p.name(), 1, "accesses_per_s", o.accesses_per_s, "1/s");
        let median = if p.randomised() {
            format!(" (median of {SEEDED_RUNS} runs)")
        } else {
            String::new()
        };
        let speed = p
            .timing_note()
            .map_or_else(String::new, |n| format!(" ({n})"));
        b.note(format!(
            "{case} / {}: hit ratio {:.4}{median}, {:.0} accesses/s{speed}",
            p.name(),
            o.hit_ratio,
            o.accesses_per_s
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Result<Trace, TraceError> {
        parse(s.as_bytes(), "t.txt", TraceFormat::Text)
    }

    fn csv(s: &str) -> Result<Trace, TraceError> {
        parse(s.as_bytes(), "t.csv", TraceFormat::Csv)
    }

    fn record(id: u64, size: u32) -> Vec<u8> {
        let mut r = Vec::with_capacity(RECORD);
        r.extend_from_slice(&7u32.to_le_bytes());
        r.extend_from_slice(&id.to_le_bytes());
        r.extend_from_slice(&size.to_le_bytes());
        r.extend_from_slice(&(-1i64).to_le_bytes());
        r
    }

    fn oracle(bytes: &[u8]) -> Result<Trace, TraceError> {
        parse(bytes, "t.oracleGeneral", TraceFormat::OracleGeneral)
    }

    #[test]
    fn text_pages_keep_their_order() {
        let t = text("# a comment\n  100 \n\n101\n7\r\n100\n#\n1000000000000\n").unwrap();
        // 7 < 100 < 101 < 10^12: ranks 0..4, gaps closed, adjacency kept.
        assert_eq!(t.pages, [1, 2, 0, 1, 3]);
        assert_eq!(t.distinct, 4);
        assert_eq!(t.requests, 5);
        assert_eq!(t.format, TraceFormat::Text);
    }

    #[test]
    fn text_errors_name_the_line() {
        let e = text("1\n2\n# c\n12x\n").unwrap_err();
        assert_eq!(e.to_string(), r#"t.txt:4: "12x" is not a page number"#);
        assert!(matches!(e, TraceError::Line { line: 4, .. }));
        let e = text("1\n-3\n").unwrap_err();
        assert!(e.to_string().starts_with("t.txt:2: "), "{e}");
        let e = parse(&b"1\n\xff\xfe\n"[..], "t.txt", TraceFormat::Text).unwrap_err();
        assert!(e.to_string().starts_with("t.txt:2: not UTF-8"), "{e}");
    }

    #[test]
    fn empty_traces_are_refused() {
        for s in ["", "\n\n", "# only a comment\n"] {
            let e = text(s).unwrap_err();
            assert!(matches!(e, TraceError::Empty { .. }), "{s:?}: {e}");
            assert_eq!(e.to_string(), "t.txt: the trace has no accesses");
        }
        assert!(matches!(oracle(&[]), Err(TraceError::Empty { .. })));
        assert!(matches!(csv(""), Err(TraceError::Empty { .. })));
        assert!(matches!(
            csv("time,obj_id\n"),
            Err(TraceError::Empty { .. })
        ));
    }

    #[test]
    fn oracle_general_objects_become_consecutive_pages() {
        let mut bytes = Vec::new();
        // Object 900 of 1 byte, 5 of 10000 bytes (3 pages), 900 again, 5 of 4096 bytes
        // (its first page), 42 of size 0 (one page). In key order: 5 on pages 0..=2, 42 on
        // page 3, 900 on page 4.
        for (id, size) in [(900, 1), (5, 10_000), (900, 4096), (5, 4096), (42, 0)] {
            bytes.extend(record(id, size));
        }
        let t = oracle(&bytes).unwrap();
        assert_eq!(t.pages, [4, 0, 1, 2, 4, 0, 3]);
        assert_eq!(t.distinct, 5);
        assert_eq!(t.requests, 5);
    }

    #[test]
    fn oracle_general_truncated_names_the_record() {
        let mut bytes = record(1, 4096);
        bytes.extend(record(2, 4096));
        bytes.extend(&record(3, 4096)[..10]);
        let e = oracle(&bytes).unwrap_err();
        assert!(
            matches!(
                e,
                TraceError::Record {
                    index: 2,
                    offset: 48,
                    ..
                }
            ),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("t.oracleGeneral: record 2 (byte 48): the file ends"),
            "{msg}"
        );
        assert!(msg.contains("10 of 24 bytes"), "{msg}");
    }

    #[test]
    fn csv_keys_sizes_and_delimiters() {
        let t = csv(
            "time,obj_id,obj_size,next\n1,a,100,0\n2,\"b\",8193,0\n\n3,a,1,0\n4,007,1,0\n5,7,1,0\n",
        )
        .unwrap();
        // 007 and 7 are one object, a number, first: page 0; a: page 1; b: 3 pages (2..=4).
        assert_eq!(t.pages, [1, 2, 3, 4, 1, 0, 0]);
        assert_eq!(t.distinct, 5);
        // Tabs, `id` for the key, no size column: one page per object.
        let t = csv("ID\tsomething\n5\tx\n6\ty\n5\tz\n").unwrap();
        assert_eq!(t.pages, [0, 1, 0]);
        // `key` and `size`.
        let t = csv("key,size\nk1,5000\n").unwrap();
        assert_eq!(t.pages, [0, 1]);
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = csv("time,size\n1,2\n").unwrap_err();
        assert!(matches!(e, TraceError::Line { line: 1, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("t.csv:1: the header has no obj_id column"),
            "{e}"
        );
        let e = csv("# c\nobj_id,obj_size\n1,4096\n2\n").unwrap_err();
        assert!(e.to_string().starts_with("t.csv:4: 1 field(s)"), "{e}");
        let e = csv("obj_id,obj_size\n1,4096\n2,big\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"t.csv:3: object size "big" is not a number"#
        );
        let e = csv("obj_id,obj_size\n ,1\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:2: an empty obj_id");
    }

    #[test]
    fn formats_by_extension() {
        let f = |p: &str| TraceFormat::of_path(Path::new(p));
        assert_eq!(f("a/w.oracleGeneral"), TraceFormat::OracleGeneral);
        assert_eq!(f("w.bin"), TraceFormat::OracleGeneral);
        assert_eq!(f("w.csv"), TraceFormat::Csv);
        assert_eq!(f("w.txt"), TraceFormat::Text);
        assert_eq!(f("trace"), TraceFormat::Text);
        let e = load(Path::new("/nonexistent/x.oracleGeneral.zst"), None).unwrap_err();
        assert!(e.to_string().contains("decompress"), "{e}");
        let e = load(Path::new("/nonexistent/x.txt"), None).unwrap_err();
        assert!(matches!(e, TraceError::Io { .. }), "{e}");
    }

    /// A fresh directory under the system's temporary one, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let p =
                std::env::temp_dir().join(format!("quire-trace-unit-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn sizes_parse_and_resolve() {
        let s = parse_sizes("0.1%,1%, 40% ,4096,64M,1.0%,.5%").unwrap();
        let labels: Vec<&str> = s.0.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["0.1%", "1%", "40%", "4096", "64M", "1.0%", ".5%"]);
        assert_eq!(s.0[0].1, Size::Percent(100_000));
        assert_eq!(s.0[1].1, Size::Percent(1_000_000));
        assert_eq!(s.0[3].1, Size::Entries(4096));
        assert_eq!(s.0[4].1, Size::Bytes(64 << 20));
        assert_eq!(s.0[5].1, s.0[1].1);
        assert_eq!(s.0[6].1, Size::Percent(500_000));
        // Percentages round down, as the table of `../shared/traces/README.md` counts them
        // (arc-P3 at 0.1%, cloudphysics-obj at 1%, lirs-cpp at 40%).
        assert_eq!(s.0[0].1.entries(762_543), 762);
        assert_eq!(s.0[1].1.entries(48_974), 489);
        assert_eq!(s.0[2].1.entries(1223), 489);
        assert_eq!(s.0[3].1.entries(10), 4096);
        assert_eq!(s.0[4].1.entries(10), 16384);
        assert_eq!(parse_sizes("100%").unwrap().0[0].1.entries(7), 7);
        let p = |t: &str| parse_sizes(t).unwrap().0[0].1.clone();
        assert_eq!(p("0.000001%"), Size::Percent(1));
        assert_eq!(p("100.000000%"), Size::Percent(100 * PERCENT));
        assert_eq!(p("18446744073709551615"), Size::Entries(u64::MAX));
    }

    #[test]
    fn percentages_resolve_in_integers() {
        // distinct × p / 100 in floating point lands just under the whole number for these:
        // integers give the whole number.
        let p = |t: &str| parse_sizes(t).unwrap().0[0].1.clone();
        for (distinct, size, want) in [
            (3_000_000_000, "0.7%", 21_000_000),
            (3_000_000_000, "33.3%", 999_000_000),
            (4_000_000_000, "8.2%", 328_000_000),
            (u64::from(u32::MAX), "100%", u64::from(u32::MAX)),
            (u64::from(u32::MAX), "0.000001%", 42),
            (999, "0.1%", 0),
            (1000, "0.1%", 1),
        ] {
            assert_eq!(p(size).entries(distinct), want, "{size} of {distinct}");
        }
    }

    fn cells_of(sizes: &str, distinct: u64) -> (Vec<PlannedCell>, Vec<LeftOut>) {
        resolve_cells(&parse_sizes(sizes).unwrap(), distinct)
    }

    #[test]
    fn sizes_larger_than_the_trace_are_clamped_to_it() {
        // Entries and bytes far beyond any trace, up to the largest a u64 holds: no overflow,
        // and no cache sized by them.
        let (cells, left) = cells_of("18446744073709551615,50%", 2000);
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(
            cells,
            [
                PlannedCell {
                    label: "18446744073709551615".into(),
                    entries: 2000,
                    clamped_from: Some(u64::MAX),
                },
                PlannedCell {
                    label: "50%".into(),
                    entries: 1000,
                    clamped_from: None,
                },
            ]
        );
        let (cells, _) = cells_of("16000000T", 5000);
        assert_eq!(cells[0].entries, 5000);
        assert_eq!(cells[0].clamped_from, Some((16_000_000u64 << 40) / 4096));
    }

    #[test]
    fn sizes_of_the_same_entries_are_one_cell() {
        // 4096 entries and 16 MiB; 1% and 1.0%; 1 GiB (clamped to the 100 000 pages of the
        // trace) and 100%.
        let (cells, left) = cells_of("4096,16M,1%,1.0%,100%,1G,0.1%", 100_000);
        let kept: Vec<(&str, u64)> = cells
            .iter()
            .map(|c| (c.label.as_str(), c.entries))
            .collect();
        assert_eq!(kept, [("4096", 4096), ("1%", 1000), ("100%", 100_000)]);
        let gone: Vec<(&str, u64, Option<&str>)> = left
            .iter()
            .map(|l| (l.label.as_str(), l.entries, l.same_as.as_deref()))
            .collect();
        assert_eq!(
            gone,
            [
                ("16M", 4096, Some("4096")),
                ("1.0%", 1000, Some("1%")),
                ("1G", 100_000, Some("100%")),
                ("0.1%", 100, None),
            ]
        );
        assert_eq!(cells[2].clamped_from, None);
        // Clamped first, then compared: 1G of a 2000-page trace is its 100%.
        let (cells, left) = cells_of("1G,100%", 2000);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].clamped_from, Some(262_144));
        assert_eq!(left[0].same_as.as_deref(), Some("1G"));
        // A trace smaller than the smallest cell: every size left out as too small.
        let (cells, left) = cells_of("100%,1G", 100);
        assert!(cells.is_empty());
        assert!(left.iter().all(|l| l.same_as.is_none() && l.entries == 100));
    }

    #[test]
    fn budgets_beyond_the_trace_are_clamped() {
        let args = |budget: Option<u64>| TraceArgs {
            path: PathBuf::from("t.txt"),
            format: None,
            budget,
            sizes: None,
            readahead: false,
        };
        let (e, why) = default_budget(&args(Some(u64::MAX)), 2000).unwrap();
        assert_eq!(e, 2000);
        assert!(why.contains("clamped"), "{why}");
        // Never below the smallest budget.
        assert_eq!(
            default_budget(&args(Some(1 << 40)), 10).unwrap().0,
            MIN_ENTRIES
        );
        assert_eq!(
            default_budget(&args(Some(2 << 20)), 2000).unwrap(),
            (512, "--budget".to_string())
        );
        assert_eq!(default_budget(&args(None), 2000).unwrap().0, 500);
    }

    #[test]
    fn progress_steps_count_only_what_runs() {
        let args = TraceArgs {
            path: PathBuf::from("/nonexistent/one.txt"),
            format: None,
            budget: None,
            sizes: Some(parse_sizes("1%,10%,40%").unwrap()),
            readahead: false,
        };
        // Reading the file, then 3 sizes × (exact-lru, opt).
        let some = |v: &str| ["exact-lru", "opt", "nope"].contains(&v);
        assert_eq!(steps(&args, &some), 1 + 3 * 2);
        let all = QUIRE.len() as u64 + 2 + PEERS.len() as u64;
        assert_eq!(steps(&args, &|_| true), 1 + 3 * all);
        // Only a quire variant named as `default`: the one replay of `default`.
        assert_eq!(steps(&args, &|v| v == "default"), 1 + 3);
    }

    #[test]
    fn bad_sizes_are_refused_clearly() {
        for (bad, says) in [
            ("", "an empty size"),
            ("1%,,2%", "an empty size"),
            ("1%,", "an empty size"),
            ("abc", "\"abc\" is not a size"),
            ("x%", "\"x%\" is not a percentage"),
            ("%", "\"%\" is not a percentage"),
            (".%", "\".%\" is not a percentage"),
            ("1e1%", "\"1e1%\" is not a percentage"),
            ("NaN%", "\"NaN%\" is not a percentage"),
            ("-1%", "is not a percentage"),
            ("0%", "above 0% and at most 100%"),
            ("0.0000001%", "at most 6 decimals"),
            ("150%", "above 0% and at most 100%"),
            ("100.000001%", "above 0% and at most 100%"),
            ("99999999999999999999%", "above 0% and at most 100%"),
            ("0", "a cache of no entries"),
            ("99999999999999999999", "too large a number of entries"),
            ("12X", "unknown unit"),
            ("1K", "less than one page"),
            ("1%,1%", "names 1% twice"),
        ] {
            let e = parse_sizes(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn traces_that_expand_past_the_bound_are_refused() {
        // 2049 records of a 4 GiB - 1 object: 2^20 pages each, 2^31 + 2^20 pages in all, from
        // a file of 48 KiB.
        let mut bytes = Vec::new();
        for i in 0..2049u64 {
            bytes.extend(record(i % 3, u32::MAX));
        }
        let e = oracle(&bytes).unwrap_err();
        assert!(matches!(e, TraceError::TooManyAccesses { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("t.oracleGeneral: more than 2147483648"),
            "{e}"
        );
        // The same accesses as csv rows.
        let csv_rows: String = (0..2049)
            .map(|i| format!("{},{}\n", i % 3, u32::MAX))
            .collect();
        let e = csv(&format!("obj_id,obj_size\n{csv_rows}")).unwrap_err();
        assert!(matches!(e, TraceError::TooManyAccesses { .. }), "{e}");
    }

    #[test]
    fn glob_patterns() {
        assert!(glob_match("lirs-*", "lirs-cpp.txt.gz"));
        assert!(glob_match("*.gz", "a.txt.gz"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("*a*b*", "xxaybzb"));
        assert!(glob_match("cloudphysics*", "cloudphysics-obj.txt.gz"));
        assert!(!glob_match("a?c", "ac"));
        assert!(!glob_match("*.gz", "a.txt"));
        assert!(!glob_match("lirs-*", "arc-P3.txt.gz"));
        assert!(!glob_match("a*b", "abc"));
    }

    #[test]
    fn directories_and_patterns_name_trace_files() {
        let d = TempDir::new("dir");
        for f in ["b.txt.gz", "a.txt", "README.md", ".hidden", "c.csv"] {
            std::fs::write(d.0.join(f), "1\n").unwrap();
        }
        std::fs::create_dir(d.0.join("sub")).unwrap();
        let names = |files: Vec<PathBuf>| -> Vec<String> {
            files
                .iter()
                .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            names(trace_files(&d.0).unwrap()),
            ["a.txt", "b.txt.gz", "c.csv"]
        );
        assert_eq!(names(trace_files(&d.0.join("*.gz")).unwrap()), ["b.txt.gz"]);
        assert_eq!(
            names(trace_files(&d.0.join("?.*")).unwrap()),
            ["a.txt", "b.txt.gz", "c.csv"]
        );
        assert_eq!(names(trace_files(&d.0.join("a.txt")).unwrap()), ["a.txt"]);
        let e = trace_files(&d.0.join("z*")).unwrap_err().to_string();
        assert!(e.ends_with("z*: no file matches"), "{e}");
        let e = trace_files(&d.0.join("nope.txt")).unwrap_err().to_string();
        assert!(e.contains("nope.txt: "), "{e}");
        let empty = TempDir::new("empty-dir");
        let e = trace_files(&empty.0).unwrap_err().to_string();
        assert!(e.ends_with("no trace files in it"), "{e}");
        assert_eq!(short_name(Path::new("x/lirs-cpp.txt.gz")), "lirs-cpp");
        assert_eq!(short_name(Path::new("w.oracleGeneral")), "w");
    }

    #[test]
    fn gzip_traces_are_read_as_a_stream() {
        let d = TempDir::new("gz");
        let good = d.0.join("t.txt.gz");
        std::fs::write(&good, gzip(b"# c\n5\n9\n5\n")).unwrap();
        let t = load(&good, None).unwrap();
        assert_eq!(t.pages, [0, 1, 0]);
        assert_eq!(t.format, TraceFormat::Text);
        // The format comes from the name without `.gz`.
        let csv = d.0.join("t.csv.gz");
        std::fs::write(&csv, gzip(b"obj_id\na\nb\na\n")).unwrap();
        assert_eq!(load(&csv, None).unwrap().format, TraceFormat::Csv);
        // A malformed line inside: the file and the line named.
        let bad = d.0.join("bad.txt.gz");
        std::fs::write(&bad, gzip(b"1\n2\nthree\n")).unwrap();
        let e = load(&bad, None).unwrap_err();
        assert!(matches!(e, TraceError::Line { line: 3, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("{}:3: \"three\"", bad.display())),
            "{e}"
        );
        // Empty, compressed or not.
        let empty = d.0.join("e.txt.gz");
        std::fs::write(&empty, gzip(b"# nothing\n")).unwrap();
        assert!(matches!(load(&empty, None), Err(TraceError::Empty { .. })));
        let empty = d.0.join("e.txt");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(load(&empty, None), Err(TraceError::Empty { .. })));
        // A corrupt stream: its body overwritten, and cut short.
        let mut bytes = gzip(b"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n");
        let n = bytes.len();
        for b in &mut bytes[10..n - 8] {
            *b = 0xff;
        }
        let corrupt = d.0.join("corrupt.txt.gz");
        std::fs::write(&corrupt, &bytes).unwrap();
        let e = load(&corrupt, None).unwrap_err();
        assert!(matches!(e, TraceError::Io { .. }), "{e}");
        assert!(
            e.to_string().starts_with(&corrupt.display().to_string()),
            "{e}"
        );
        let cut = d.0.join("cut.txt.gz");
        std::fs::write(&cut, &gzip(b"1\n2\n3\n")[..12]).unwrap();
        let e = load(&cut, None).unwrap_err();
        assert!(e.to_string().starts_with(&cut.display().to_string()), "{e}");
        let notgz = d.0.join("plain.txt.gz");
        std::fs::write(&notgz, b"1\n2\n").unwrap();
        let e = load(&notgz, None).unwrap_err();
        assert!(matches!(e, TraceError::Io { .. }), "{e}");
        assert!(
            e.to_string().starts_with(&notgz.display().to_string()),
            "{e}"
        );
    }

    #[test]
    fn replay_counts_reads_and_checks_bytes() {
        // A loop of 600 pages through a 1 MiB (256-page) cache, readahead as configured.
        let trace = Trace {
            pages: (0..3).flat_map(|_| 0..600u32).collect(),
            distinct: 600,
            requests: 1800,
            format: TraceFormat::Text,
        };
        let o = replay(CacheConfig::new(MIN_BUDGET as usize), &trace).unwrap();
        // Readahead may read more than the loop asks for (pages read ahead and evicted before
        // use), taking the hit ratio below 0; never above what OPT reaches.
        assert!(o.hit_ratio <= 1.0, "{}", o.hit_ratio);
        assert!(
            (0.0..=1.0).contains(&o.demand_hit_ratio),
            "{}",
            o.demand_hit_ratio
        );
        assert!(o.evicted > 0);
        let opt = opt_hits(&trace.pages, 256);
        let opt = opt.iter().filter(|&&h| h).count() as f64 / opt.len() as f64;
        assert!(opt >= o.hit_ratio, "opt {opt} < {}", o.hit_ratio);
        // A trace that fits: only the first reads miss.
        let trace = Trace {
            pages: (0..4).flat_map(|_| (0..100u32).rev()).collect(),
            distinct: 100,
            requests: 400,
            format: TraceFormat::Text,
        };
        let o = replay(CacheConfig::new(MIN_BUDGET as usize), &trace).unwrap();
        assert_eq!(o.hit_ratio, 0.75);
        assert_eq!(o.evicted, 0);
    }
}
