//! `quire bench evict --trace FILE`: small traces in each format replayed by the built binary,
//! read back from its JSON report — every quire variant of the suite, `default` and `opt`
//! reported, OPT the ceiling of every hit ratio but those of the peers that may refuse an
//! insert — and malformed traces refused with the line or the record named.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const QUIRE: &str = env!("CARGO_BIN_EXE_quire");

/// The suite's source: the names of its quire variants are read from the `QUIRE` table, so
/// that a variant added there is checked here too.
const EVICT_SRC: &str = include_str!("../src/bench/evict/mod.rs");

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("quire-trace-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The names in the `QUIRE` table of `evict/mod.rs` (each entry's `name: "..."`).
fn quire_variants() -> Vec<String> {
    let start = EVICT_SRC
        .find("const QUIRE")
        .expect("evict/mod.rs has no QUIRE table");
    let table = &EVICT_SRC[start..];
    let table = &table[..table.find("];").expect("the QUIRE table ends")];
    let names: Vec<String> = table
        .match_indices("name:")
        .filter_map(|(at, _)| {
            let rest = table[at + "name:".len()..].trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect();
    assert!(!names.is_empty(), "no `name: \"...\"` in the QUIRE table");
    names
}

/// A small deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// Zipf-like (exponent 1) over `0..n` by inverting the cumulative sum.
    fn zipf(&mut self, cdf: &[f64]) -> usize {
        let u = self.next() as f64 / (1u64 << 31) as f64 * cdf[cdf.len() - 1];
        cdf.partition_point(|&c| c < u).min(cdf.len() - 1)
    }
}

fn cdf(n: usize) -> Vec<f64> {
    let mut sum = 0.0;
    (1..=n)
        .map(|k| {
            sum += 1.0 / k as f64;
            sum
        })
        .collect()
}

fn quire(args: &[&str]) -> Output {
    Command::new(QUIRE).args(args).output().expect("run quire")
}

/// (variant, metric) → value, from a report.
fn figures(json: &Path) -> Vec<(String, String, f64)> {
    let r: serde_json::Value = serde_json::from_slice(&fs::read(json).unwrap()).unwrap();
    r["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|x| {
            assert_eq!(x["suite"], "evict");
            assert_eq!(x["case"], "trace");
            (
                x["variant"].as_str().unwrap().to_string(),
                x["metric"].as_str().unwrap().to_string(),
                x["value"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Replays `trace` (with `extra` arguments) and checks the report: every variant, `default`
/// and `opt` have a hit ratio, OPT's is within [0, 1] and at least every other's, and the
/// quire variants report their evictions and the reclaim time per evicted page. Where
/// `in_unit_range`, every hit ratio must lie within [0, 1] — not so for any trace: readahead
/// may read pages that are evicted before use, and `1 - pages read / pages asked` then goes
/// below 0 (a small budget looping over a file larger than it, objects of several pages);
/// `demand_hit_ratio` always lies within it. Returns stderr.
fn replay(dir: &Dir, trace: &Path, extra: &[&str], in_unit_range: bool) -> String {
    let json = dir.path("out.json");
    let _ = fs::remove_file(&json);
    let t = trace.to_str().unwrap();
    let mut args = vec![
        "bench",
        "evict",
        "--trace",
        t,
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = quire(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    assert!(stdout.contains("evict / trace"), "{stdout}");
    let figs = figures(&json);
    let get = |v: &str, m: &str| {
        figs.iter()
            .find(|(fv, fm, _)| fv == v && fm == m)
            .map(|f| f.2)
    };
    let opt = get("opt", "hit_ratio").expect("opt's hit ratio");
    assert!((0.0..=1.0).contains(&opt), "opt {opt}");
    let mut variants = quire_variants();
    variants.push("default".into());
    for v in &variants {
        let h = get(v, "hit_ratio").unwrap_or_else(|| panic!("{v}: no hit_ratio in {figs:?}"));
        assert!(h <= 1.0 && h.is_finite(), "{v}: hit ratio {h}");
        if in_unit_range {
            assert!(h >= 0.0, "{v}: hit ratio {h}");
        }
        assert!(h <= opt + 1e-9, "{v}: hit ratio {h} above opt's {opt}");
        let d = get(v, "demand_hit_ratio").expect("demand_hit_ratio");
        assert!((0.0..=1.0).contains(&d), "{v}: demand hit ratio {d}");
        // Every trace here is larger than its budget: something is evicted.
        let evicted = get(v, "evicted_pages").expect("evicted_pages");
        assert!(evicted > 0.0, "{v}: nothing evicted");
        let ns = get(v, "reclaim_ns_per_evicted").expect("reclaim_ns_per_evicted");
        assert!(ns.is_finite() && ns >= 0.0, "{v}: {ns}");
        assert!(
            stderr.contains(&format!("trace / {v}: hit ratio")),
            "{stderr}"
        );
    }
    assert!(get("opt", "evicted_pages").is_some());
    stderr
}

#[test]
fn text_trace_loop_and_zipf() {
    let dir = Dir::new("text");
    let mut lines = vec!["# three passes over 1000 pages, then Zipf over 2000".to_string()];
    for _ in 0..3 {
        lines.extend((0..1000).map(|p| format!("{}", 5000 + p)));
    }
    let (c, mut rng) = (cdf(2000), Lcg(7));
    // Page numbers spread out (gaps are closed up by the replay).
    lines.extend((0..9000).map(|_| format!("  {} ", 10 * rng.zipf(&c))));
    let trace = dir.path("mix.txt");
    fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let stderr = replay(&dir, &trace, &["--budget", "2M"], false);
    assert!(
        stderr.contains("budget 2.00 MiB = 512 pages (--budget)"),
        "{stderr}"
    );
}

#[test]
fn csv_trace_with_text_keys_and_sizes() {
    let dir = Dir::new("csv");
    let (c, mut rng) = (cdf(1200), Lcg(11));
    let mut s = String::from("timestamp,obj_id,obj_size,next_access_vtime\n");
    for t in 0..5000 {
        let o = rng.zipf(&c);
        // Sizes of 1 to 3 pages, fixed per object.
        let size = 1000 + (o % 3) * 4096;
        s.push_str(&format!("{t},obj-{o},{size},-1\n"));
    }
    let trace = dir.path("w.csv");
    fs::write(&trace, s).unwrap();
    // Reading an object of several pages opens a readahead window that runs on into the
    // objects beside it: the hit ratio may go below 0.
    replay(&dir, &trace, &["--budget", "2M"], false);
}

#[test]
fn oracle_general_trace_with_the_default_budget() {
    // Objects of one page each, read at random: readahead has nothing to go on, and every hit
    // ratio lies within [0, 1].
    let dir = Dir::new("bin");
    let (c, mut rng) = (cdf(3000), Lcg(13));
    let mut bytes = Vec::new();
    for t in 0..6000u32 {
        let id = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(rng.zipf(&c) as u64 + 1);
        bytes.extend(t.to_le_bytes());
        bytes.extend(id.to_le_bytes());
        bytes.extend(4096u32.to_le_bytes());
        bytes.extend((-1i64).to_le_bytes());
    }
    let trace = dir.path("w.oracleGeneral");
    fs::write(&trace, &bytes).unwrap();
    let stderr = replay(&dir, &trace, &[], true);
    assert!(stderr.contains("(oracle-general)"), "{stderr}");
    assert!(
        stderr.contains("(default: a quarter of the distinct pages"),
        "{stderr}"
    );
    // The same file, named otherwise, read as binary by --trace-format.
    let renamed = dir.path("w.dat");
    fs::rename(&trace, &renamed).unwrap();
    replay(&dir, &renamed, &["--trace-format", "oracle-general"], true);
}

#[test]
fn malformed_traces_are_refused_with_where() {
    let dir = Dir::new("bad");
    let bad = dir.path("bad.txt");
    fs::write(&bad, "1\n2\n\n# c\n12x\n3\n").unwrap();
    let b = bad.to_str().unwrap();
    let out = quire(&["bench", "evict", "--trace", b, "--budget", "2M"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("{b}:5: \"12x\" is not a page number")),
        "{stderr}"
    );

    let csv = dir.path("bad.csv");
    fs::write(&csv, "time,size\n1,4096\n").unwrap();
    let out = quire(&["bench", "evict", "--trace", csv.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bad.csv:1: the header has no obj_id column"),
        "{stderr}"
    );

    let bin = dir.path("cut.bin");
    fs::write(&bin, [0u8; 24 * 3 + 5]).unwrap();
    let out = quire(&["bench", "evict", "--trace", bin.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("cut.bin: record 3 (byte 72)"), "{stderr}");

    let empty = dir.path("empty.txt");
    fs::write(&empty, "# nothing\n\n").unwrap();
    let out = quire(&["bench", "evict", "--trace", empty.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the trace has no accesses"));

    // --trace is for evict only; --budget needs --trace.
    let out = quire(&["bench", "read", "--trace", b]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("evict suite only"));
    let out = quire(&["bench", "evict", "--budget", "2M"]);
    assert!(!out.status.success());
}

fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

/// `n` accesses, Zipf-like over `pages` page numbers, one per line.
fn zipf_lines(pages: usize, n: usize, seed: u64) -> String {
    let (c, mut rng) = (cdf(pages), Lcg(seed));
    (0..n).map(|_| format!("{}\n", rng.zipf(&c))).collect()
}

/// The peers of `peers.rs` with their names in the suite (`quire bench --list`).
const PEERS: &[&str] = &[
    "exact-lru",
    "arc",
    "2q",
    "s3-fifo",
    "sieve",
    "w-tinylfu",
    "foyer-lru",
    "moka",
    "quick_cache",
];

/// The peers that may keep a missed page out (`Peer::may_refuse`: W-TinyLFU's admission), whose
/// hit ratios OPT, which inserts every missed page, does not bound.
const REFUSING: &[&str] = &["w-tinylfu", "moka"];

#[test]
fn a_directory_of_traces_at_several_sizes_with_the_peers() {
    let dir = Dir::new("many");
    let traces = dir.path("traces");
    fs::create_dir(&traces).unwrap();
    // a: every one of 1000 pages, then Zipf over them; gzip-compressed.
    let a: String =
        (0..1000).map(|p| format!("{p}\n")).collect::<String>() + &zipf_lines(1000, 3000, 3);
    fs::write(traces.join("a.txt.gz"), gzip(&a)).unwrap();
    // b: Zipf over 2000 pages, plain text.
    fs::write(traces.join("b.txt"), zipf_lines(2000, 4000, 5)).unwrap();
    fs::write(
        traces.join("README.md"),
        "# notes, not a trace\nsee above\n",
    )
    .unwrap();
    let json = dir.path("out.json");
    let out = quire(&[
        "bench",
        "evict",
        "--trace",
        traces.to_str().unwrap(),
        "--sizes",
        "30%,10%",
        "--no-readahead",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for t in [
        "evict / trace a\n",
        "evict / trace b\n",
        "evict / summary at 30%",
        "a 300 (30%)",
        "cells left out (under 256 entries): a 10% (100 entries)",
    ] {
        assert!(stdout.contains(t), "{t:?} not in {stdout}");
    }
    assert!(!stdout.contains("summary at 10%"), "{stdout}");
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let t = &r["trace"];
    assert_eq!(t["baseline"], "exact-lru");
    let cells = t["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{t}");
    assert_eq!(t["skipped"].as_array().unwrap().len(), 2, "{t}");
    let mut variants = quire_variants();
    variants.extend(["default", "opt"].map(String::from));
    variants.extend(PEERS.iter().map(|p| p.to_string()));
    for c in cells {
        let name = c["trace"].as_str().unwrap();
        assert_eq!(c["size"], "30%");
        assert_eq!(
            c["case"].as_str().unwrap(),
            format!("trace {name} {}", c["capacity"])
        );
        let figs = c["variants"].as_array().unwrap();
        let hit = |v: &str| {
            figs.iter()
                .find(|f| f["variant"] == v)
                .unwrap_or_else(|| panic!("{name}: no {v}"))
        };
        let opt = hit("opt")["hit_ratio"].as_f64().unwrap();
        for v in &variants {
            let f = hit(v);
            let h = f["hit_ratio"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&h), "{name} {v}: {h}");
            if !REFUSING.contains(&v.as_str()) {
                assert!(h <= opt + 1e-9, "{name} {v}: {h} above opt's {opt}");
            }
            if v != "opt" {
                let speed = f["accesses_per_s"].as_f64().unwrap_or(0.0);
                assert!(speed > 0.0, "{name} {v}: no accesses_per_s");
            }
        }
    }
    let summary = t["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 1);
    let rows = summary[0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), variants.len());
    let lru = rows.iter().find(|r| r["variant"] == "exact-lru").unwrap();
    assert_eq!(lru["mean_miss_ratio_reduction"].as_f64(), Some(0.0));
    assert_eq!(lru["cells"], 2);
    assert!(rows.iter().all(|r| r["rank"].as_u64().is_some()));
    // OPT reduces misses the most of all that keep every page they miss.
    let mean = |r: &serde_json::Value| r["mean_miss_ratio_reduction"].as_f64().unwrap();
    let opt = rows.iter().find(|r| r["variant"] == "opt").unwrap();
    for r in rows {
        if !REFUSING.contains(&r["variant"].as_str().unwrap()) {
            assert!(mean(r) <= mean(opt) + 1e-12, "{r} above {opt}");
        }
    }
    // Without readahead, no caveat; the explanation of OPT and of quire's reserve.
    assert!(!stdout.contains("caveat"), "{stdout}");
    assert!(t.get("caveats").is_none(), "{t}");
    assert!(stdout.contains("opt is Belady's replacement"), "{stdout}");
    assert!(
        stdout.contains("quire keeps a reserve of free frames"),
        "{stdout}"
    );
}

#[test]
fn sizes_that_collide_or_exceed_the_trace_are_one_cell_each() {
    // 1000 distinct pages. 30%, 300 entries and 1200K are all 300 entries; 100%, 1G and the
    // largest entries a u64 holds are all the whole trace (the last two clamped to it). Two
    // cells, under distinct cases; the others listed as the same cell as the first of theirs.
    let dir = Dir::new("collide");
    let a: String =
        (0..1000).map(|p| format!("{p}\n")).collect::<String>() + &zipf_lines(1000, 2000, 17);
    let trace = dir.path("t.txt");
    fs::write(&trace, a).unwrap();
    let json = dir.path("out.json");
    let out = quire(&[
        "bench",
        "evict",
        "--trace",
        trace.to_str().unwrap(),
        "--sizes",
        "1G,30%,300,1200K,100%,18446744073709551615",
        "--variants",
        "exact-lru,opt",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let t = &r["trace"];
    let cells: Vec<(&str, &str, u64)> = t["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["case"].as_str().unwrap(),
                c["size"].as_str().unwrap(),
                c["capacity"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cells,
        [("trace t 1000", "1G", 1000), ("trace t 300", "30%", 300)]
    );
    assert_eq!(t["cells"][0]["clamped_from"], 262_144);
    let skipped: Vec<(&str, &str)> = t["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["size"].as_str().unwrap(), s["same_as"].as_str().unwrap()))
        .collect();
    assert_eq!(
        skipped,
        [
            ("300", "30%"),
            ("1200K", "30%"),
            ("100%", "1G"),
            ("18446744073709551615", "1G")
        ]
    );
    // One figure per variant and cell: no replay ran twice into the same case.
    let per_case = |case: &str| {
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["case"] == case && x["metric"] == "hit_ratio")
            .count()
    };
    assert_eq!((per_case("trace t 300"), per_case("trace t 1000")), (2, 2));
    // Summaries in the order of --sizes, one per cell.
    let sizes: Vec<&str> = t["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["size"].as_str().unwrap())
        .collect();
    assert_eq!(sizes, ["1G", "30%"]);
    assert!(stderr.contains("1G is 262144 entries, more than the trace's 1000 distinct pages"));
    assert!(
        stdout.contains("cells clamped to their trace's distinct pages"),
        "{stdout}"
    );
    // Readahead on (no --no-readahead): the caveat above the summary, and in the report.
    let caveat = stdout.find("caveat: readahead is on").expect("the caveat");
    assert!(
        caveat < stdout.find("evict / summary at").unwrap(),
        "{stdout}"
    );
    assert!(t["caveats"][0]
        .as_str()
        .unwrap()
        .starts_with("readahead is on"));
}

#[test]
fn a_pattern_with_some_variants_and_bad_arguments() {
    let dir = Dir::new("glob");
    let a: String = zipf_lines(1000, 3000, 9);
    fs::write(dir.path("a.txt.gz"), gzip(&a)).unwrap();
    fs::write(dir.path("b.txt"), "1\n").unwrap();
    let json = dir.path("out.json");
    let pattern = dir.path("*.gz");
    let out = quire(&[
        "bench",
        "evict",
        "--trace",
        pattern.to_str().unwrap(),
        "--sizes",
        "300,1M",
        "--no-readahead",
        "--variants",
        "exact-lru,opt,moka",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("(median of 3 runs)"), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&fs::read(&json).unwrap()).unwrap();
    let cells = r["trace"]["cells"].as_array().unwrap();
    let caps: Vec<u64> = cells
        .iter()
        .map(|c| c["capacity"].as_u64().unwrap())
        .collect();
    assert_eq!(caps, [300, 256]);
    for c in cells {
        let vs: Vec<&str> = c["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["variant"].as_str().unwrap())
            .collect();
        assert_eq!(vs, ["opt", "exact-lru", "moka"]);
    }

    // A malformed line in a gzip trace: the file and the line named.
    let bad = dir.path("bad.txt.gz");
    fs::write(&bad, gzip("1\n2\nthree\n")).unwrap();
    let out = quire(&["bench", "evict", "--trace", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "{}:3: \"three\" is not a page number",
            bad.display()
        )),
        "{stderr}"
    );
    // --sizes and --budget together, and a bad size.
    let t = dir.path("b.txt");
    let t = t.to_str().unwrap();
    let out = quire(&[
        "bench", "evict", "--trace", t, "--budget", "2M", "--sizes", "1%",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = quire(&["bench", "evict", "--trace", t, "--sizes", "1%,,2%"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("an empty size"));
    // The peers are variants of the suite.
    let out = quire(&["bench", "--list", "--trace", t]);
    let list = String::from_utf8_lossy(&out.stdout);
    for p in PEERS {
        assert!(list.contains(p), "{p} not in {list}");
    }
}
