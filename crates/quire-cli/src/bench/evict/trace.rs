//! `quire bench evict --trace FILE [--trace-format F] [--budget SIZE]`: a page-access trace of
//! the user's own, replayed through every quire variant of the suite ([`QUIRE`]), through
//! `default` (the configuration a user gets without choosing, [`CacheConfig::new`]) and
//! through Belady's optimum (`opt`, the ceiling), in place of the suite's cases.
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
//!   counter over its `evictions`, the CPU time of reclaim, direct and background, per page
//!   evicted (not recorded when nothing was evicted).
//!
//! `opt` is Belady's replacement with room for the whole budget (quire keeps a few frames free,
//! so it holds a little less). Every figure counts the whole trace: cold misses are misses for
//! all. A one-line summary per variant is printed on standard error as it finishes.
//!
//! The budget is `--budget`, or else a quarter of the trace's distinct pages (rounded up to a
//! page); at least [`MIN_BUDGET`] either way.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use anyhow::{bail, ensure};
use quire::filemap::{CacheConfig, PageCache};
use quire::stats::Event;
use quire::store::{Result as StoreResult, Store};

use super::super::Bench;
use super::workload::{opt_hits, CountingStore, SyntheticStore};
use super::{PAGE, QUIRE};

/// The smallest budget a replay takes, as `quire mount --capacity`: below it the reserve
/// reclaim keeps free (at least 16 frames) is a large share of the cache.
pub const MIN_BUDGET: u64 = 1 << 20;

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

/// What `--trace`, `--trace-format` and `--budget` asked for.
#[derive(Clone, Debug)]
pub struct TraceArgs {
    pub path: PathBuf,
    /// The format; `None`: by the file's extension.
    pub format: Option<TraceFormat>,
    /// The budget in bytes; `None`: a quarter of the distinct pages.
    pub budget: Option<u64>,
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

/// Reads the trace at `path`, in `format` or the one its name suggests.
pub fn load(path: &Path, format: Option<TraceFormat>) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let is_zst = path
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
    parse(
        BufReader::with_capacity(1 << 20, f),
        &file,
        format.unwrap_or_else(|| TraceFormat::of_path(path)),
    )
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
        if !pages.access(page, 1) {
            return Err(TraceError::TooLarge {
                file: file.to_string(),
            });
        }
        Ok(())
    })?;
    pages.finish(file, TraceFormat::Text)
}

/// Pages an object of `size` bytes covers: at least one.
fn pages_of(size: u64) -> u64 {
    size.div_ceil(PAGE as u64).max(1)
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
}

impl<K: std::hash::Hash + Ord + Clone> Objects<K> {
    fn new() -> Self {
        Objects {
            ids: HashMap::new(),
            keys: Vec::new(),
            span: Vec::new(),
            accesses: Vec::new(),
        }
    }

    /// One access of `pages` pages to `key`; `false` if there are too many objects to number.
    fn access(&mut self, key: K, pages: u64) -> bool {
        let next = self.span.len();
        let Ok(next) = u32::try_from(next) else {
            return false;
        };
        let id = *self.ids.entry(key.clone()).or_insert(next);
        if id == next {
            self.keys.push(key);
            self.span.push(0);
        }
        let pages = pages.min(u64::from(u32::MAX));
        let span = &mut self.span[id as usize];
        *span = (*span).max(pages);
        self.accesses.push((id, pages as u32));
        true
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
        let asked: u64 = self.accesses.iter().map(|&(_, k)| u64::from(k)).sum();
        let mut pages = Vec::with_capacity(asked as usize);
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
        if !objects.access(id, pages_of(u64::from(size))) {
            return Err(TraceError::TooLarge {
                file: file.to_string(),
            });
        }
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
        if !objects.access(key, pages) {
            return Err(TraceError::TooLarge {
                file: file.to_string(),
            });
        }
        Ok(())
    })?;
    if columns.is_none() {
        return Err(TraceError::Empty {
            file: file.to_string(),
        });
    }
    objects.finish(file, TraceFormat::Csv)
}

// ---- replay -------------------------------------------------------------------------------

/// Steps of a replay, for the progress bar: reading the trace, each variant, `default`, `opt`.
pub fn steps() -> u64 {
    QUIRE.len() as u64 + 3
}

/// The replay's store: computed bytes ([`SyntheticStore`]) that counts every byte read
/// ([`CountingStore`]), and apart the reads made by the replaying thread itself, so that an
/// access that had to wait for the store is told from one that found its page (or found it
/// being read ahead by the cache's I/O threads).
struct ReplayStore {
    inner: CountingStore<SyntheticStore>,
    replayer: ThreadId,
    replayer_reads: AtomicU64,
}

impl Store for ReplayStore {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> StoreResult<usize> {
        if std::thread::current().id() == self.replayer {
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
}

/// Replays `trace` through a fresh cache configured as `cfg`.
fn replay(cfg: CacheConfig, trace: &Trace) -> anyhow::Result<Outcome> {
    let cache = PageCache::new(cfg)?;
    let len = trace.distinct as u64 * PAGE as u64;
    let store = Arc::new(ReplayStore {
        inner: CountingStore::new(SyntheticStore::new(len)),
        replayer: std::thread::current().id(),
        replayer_reads: AtomicU64::new(0),
    });
    let file = cache.open(store.clone())?;
    let before = cache.stats_exact().vmstat;
    let mut buf = vec![0u8; PAGE];
    let mut waited = 0u64;
    for (i, &p) in trace.pages.iter().enumerate() {
        let off = u64::from(p) * PAGE as u64;
        let reads = store.replayer_reads.load(Ordering::Relaxed);
        file.read_exact_at(off, &mut buf)?;
        waited += u64::from(store.replayer_reads.load(Ordering::Relaxed) != reads);
        // The computed content: each 8-byte word is its offset.
        let right = buf
            .chunks_exact(8)
            .zip((off..).step_by(8))
            .all(|(w, o)| u64::from_le_bytes(w.try_into().expect("8 bytes")) == o);
        ensure!(right, "access {i}: wrong bytes in page {p}");
    }
    let vm = cache.stats_exact().vmstat.since(&before);
    let read_pages = store.inner.bytes_read() / PAGE as u64;
    let asked = trace.pages.len() as f64;
    Ok(Outcome {
        hit_ratio: 1.0 - read_pages as f64 / asked,
        demand_hit_ratio: 1.0 - waited as f64 / asked,
        evicted: vm.get(Event::Evictions),
        reclaim_ns: vm.get(Event::ReclaimNs),
    })
}

/// Records one variant's figures and prints its summary line.
fn report(b: &mut Bench, variant: &str, o: &Outcome) {
    b.record(CASE, variant, 1, "hit_ratio", o.hit_ratio, "ratio");
    b.record(
        CASE,
        variant,
        1,
        "demand_hit_ratio",
        o.demand_hit_ratio,
        "ratio",
    );
    b.record(CASE, variant, 1, "evicted_pages", o.evicted as f64, "pages");
    let per = if o.evicted > 0 {
        let per = o.reclaim_ns as f64 / o.evicted as f64;
        b.record(CASE, variant, 1, "reclaim_ns_per_evicted", per, "ns");
        format!("{per:.0} ns of reclaim per evicted page")
    } else {
        "nothing evicted".to_string()
    };
    b.note(format!(
        "{CASE} / {variant}: hit ratio {:.4} (demand {:.4}), {} pages evicted, {per}",
        o.hit_ratio, o.demand_hit_ratio, o.evicted
    ));
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The replay of `args`' trace: every variant of [`QUIRE`], `default` and `opt`.
pub fn run(b: &mut Bench, args: &TraceArgs) -> anyhow::Result<()> {
    b.step(&format!("reading {}", args.path.display()));
    let trace = load(&args.path, args.format)?;
    let page = PAGE as u64;
    let (budget, why) = match args.budget {
        Some(bytes) => {
            if bytes < MIN_BUDGET {
                bail!(
                    "--budget {bytes} is below the smallest budget a replay takes, {}",
                    mib(MIN_BUDGET)
                );
            }
            let b = bytes.div_ceil(page) * page;
            let why = if b == bytes {
                "--budget"
            } else {
                "--budget, rounded up to a page"
            };
            (b, why.to_string())
        }
        None => {
            let quarter = (trace.distinct as u64).div_ceil(4) * page;
            if quarter >= MIN_BUDGET {
                (quarter, "default: a quarter of the distinct pages".into())
            } else {
                (
                    MIN_BUDGET,
                    format!(
                        "default: a quarter of the distinct pages ({}), raised to the \
                         smallest budget",
                        mib(quarter)
                    ),
                )
            }
        }
    };
    b.note(format!(
        "{CASE}: {} ({}): {} accesses of 4 KiB ({} requests) over {} distinct pages ({}); \
         budget {} = {} pages ({why})",
        args.path.display(),
        trace.format.name(),
        trace.pages.len(),
        trace.requests,
        trace.distinct,
        mib(trace.distinct as u64 * page),
        mib(budget),
        budget / page,
    ));
    let readahead = |mut cfg: CacheConfig| {
        if !args.readahead {
            cfg.readahead_max = 0;
        }
        cfg
    };
    for v in QUIRE {
        if !b.wants(v.name) {
            continue;
        }
        b.step(&format!("{CASE} / {}", v.name));
        let o = replay(readahead(v.config(budget)), &trace)?;
        report(b, v.name, &o);
    }
    if b.wants("default") {
        b.step(&format!("{CASE} / default"));
        let o = replay(readahead(CacheConfig::new(budget as usize)), &trace)?;
        report(b, "default", &o);
    }
    if !b.wants("opt") {
        return Ok(());
    }
    b.step(&format!("{CASE} / opt"));
    let capacity = (budget / page) as usize;
    let hits = opt_hits(&trace.pages, capacity);
    let misses = hits.iter().filter(|&&h| !h).count();
    let ratio = 1.0 - misses as f64 / hits.len() as f64;
    // Every miss inserts a page, and evicts one once the cache is full.
    let evicted = misses.saturating_sub(capacity);
    b.record(CASE, "opt", 1, "hit_ratio", ratio, "ratio");
    b.record(CASE, "opt", 1, "evicted_pages", evicted as f64, "pages");
    b.note(format!(
        "{CASE} / opt: hit ratio {ratio:.4}, {evicted} pages evicted"
    ));
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
