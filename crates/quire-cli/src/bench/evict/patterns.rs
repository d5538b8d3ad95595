//! The access patterns: zipf (skewed random reads over a file 4× the budget), scan and
//! scan-files (a hot set in use beside a one-pass stream) and loop (a file 1.25× the budget read
//! from start to end again and again).

use super::*;

// ---- zipf ---------------------------------------------------------------------------------

pub(super) fn zipf_case(b: &mut Bench, sz: &Sizes, files: &Files) -> anyhow::Result<()> {
    let pages = 4 * sz.pages();
    let warm = 3 * sz.pages();
    let traces: Vec<Vec<u32>> = (0..THREADS)
        .map(|t| zipf_trace(pages, warm + sz.zipf_ops, t))
        .collect();
    let asked = (THREADS * sz.zipf_ops * PAGE) as u64;
    for v in QUIRE {
        if !runs(b, v) {
            continue;
        }
        let variant = v.name;
        b.step(&format!("zipf / {variant}"));
        let cache = PageCache::new(v.config(sz.budget))?;
        let file = open_counted(b, &cache, &files.big)?;
        let warmed = Barrier::new(THREADS + 1);
        let go = Barrier::new(THREADS + 1);
        let (read, secs) = std::thread::scope(|s| -> anyhow::Result<(u64, f64)> {
            let handles: Vec<_> = traces
                .iter()
                .map(|trace| {
                    let (file, warmed, go) = (&file, &warmed, &go);
                    s.spawn(move || -> anyhow::Result<()> {
                        let mut buf = vec![0u8; PAGE];
                        for &p in &trace[..warm] {
                            read_checked(file, p, &mut buf)?;
                        }
                        warmed.wait();
                        go.wait();
                        for &p in &trace[warm..] {
                            read_checked(file, p, &mut buf)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            warmed.wait();
            let before = file.store_bytes_read();
            let t0 = Instant::now();
            go.wait();
            for h in handles {
                h.join().expect("zipf reader panicked")?;
            }
            Ok((file.store_bytes_read() - before, t0.elapsed().as_secs_f64()))
        })?;
        record_reclaim_cost(b, "zipf", v, THREADS, &cache);
        record_q(
            b,
            "zipf",
            v,
            THREADS,
            "hit_ratio",
            hit_ratio(read, asked),
            "ratio",
        );
        record_q(
            b,
            "zipf",
            v,
            THREADS,
            "iops",
            (THREADS * sz.zipf_ops) as f64 / secs,
            "1/s",
        );
        // The free reserve background reclaim keeps (frames not holding cached data).
        let s = cache.stats_exact();
        record_q(
            b,
            "zipf",
            v,
            THREADS,
            "free_share_at_end",
            s.free_frames as f64 / s.frames as f64,
            "ratio",
        );
    }
    b.step("zipf / kernel");
    let big = files.big.clone();
    let (budget, ops) = (sz.budget, sz.zipf_ops);
    if let Some(o) = kernel_run(b, "zipf", |cgroup| kernel::Spec {
        case: "zipf".into(),
        cgroup,
        budget,
        files: vec![big],
        warm,
        ops,
        threads: THREADS,
        skip: 0,
        nap_us: 0,
    })? {
        b.record(
            "zipf",
            "kernel",
            THREADS,
            "hit_ratio",
            hit_ratio(o.read_bytes, asked),
            "ratio",
        );
        b.record(
            "zipf",
            "kernel",
            THREADS,
            "iops",
            o.ops as f64 / o.elapsed_s,
            "1/s",
        );
    }
    if !b.wants("opt") {
        return Ok(());
    }
    b.step("zipf / opt");
    let merged = interleave(&traces.iter().map(Vec::as_slice).collect::<Vec<_>>());
    let opt = opt_ratio(&merged, sz.pages(), THREADS * warm);
    b.record("zipf", "opt", THREADS, "hit_ratio", opt, "ratio");
    Ok(())
}

// ---- scan ---------------------------------------------------------------------------------

/// Hot-set passes before the scan starts.
pub(super) const HOT_PASSES: usize = 2;

/// How long `scan-files`' hot reader waits between its reads: a hot set in use, but slowly
/// (some thousands of reads a second, beside a stream of a gigabyte or more a second).
pub(super) const SCAN_FILES_NAP: Duration = Duration::from_micros(100);

/// `scan` (the stream one file, the hot reader flat out) and `scan-files` (the stream cut into
/// files kept open and read one after another, the hot reader waiting `nap` between reads).
pub(super) fn scan_case(
    b: &mut Bench,
    sz: &Sizes,
    case: &str,
    hot_path: &Path,
    streams: &[PathBuf],
    nap: Duration,
) -> anyhow::Result<()> {
    let hot_pages = sz.pages() / 2;
    let warm: Vec<u32> = (0..HOT_PASSES)
        .flat_map(|pass| permutation(hot_pages, 0xB0 + pass as u64))
        .collect();
    let trace = uniform_trace(hot_pages, 1 << 24, 0x5CA);
    for v in QUIRE {
        if !runs(b, v) {
            continue;
        }
        let variant = v.name;
        b.step(&format!("{case} / {variant}"));
        let cache = PageCache::new(v.config(sz.budget))?;
        let hot = open_counted(b, &cache, hot_path)?;
        // Kept open while the stream runs, as a mount keeps its inodes (a dropped handle's
        // pages would go with it).
        let opened: Vec<CachedFile> = streams
            .iter()
            .map(|p| open_counted(b, &cache, p))
            .collect::<anyhow::Result<_>>()?;
        let mut buf = vec![0u8; PAGE];
        for &p in &warm {
            read_checked(&hot, p, &mut buf)?;
        }
        let done = AtomicBool::new(false);
        let (ops, read) = std::thread::scope(|s| -> anyhow::Result<(u64, u64)> {
            let streamer = s.spawn(|| -> anyhow::Result<()> {
                let mut buf = vec![0u8; CHUNK];
                for stream in &opened {
                    let mut off = 0;
                    while off < stream.len() {
                        let n = stream.read_at(off, &mut buf)?;
                        ensure!(
                            n > 0 && Content::check_tags(off, &buf[..n]),
                            "stream at {off}"
                        );
                        off += n as u64;
                    }
                }
                done.store(true, Ordering::Relaxed);
                Ok(())
            });
            let before = hot.store_bytes_read();
            let mut n = 0u64;
            for &p in &trace {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                read_checked(&hot, p, &mut buf)?;
                n += 1;
                if !nap.is_zero() {
                    std::thread::sleep(nap);
                }
            }
            let read = hot.store_bytes_read() - before;
            done.store(true, Ordering::Relaxed);
            streamer.join().expect("streamer panicked")?;
            Ok((n, read))
        })?;
        record_reclaim_cost(b, case, v, 2, &cache);
        record_q(
            b,
            case,
            v,
            2,
            "hot_hit_ratio",
            hit_ratio(read, ops * PAGE as u64),
            "ratio",
        );
    }
    b.step(&format!("{case} / kernel"));
    let mut fs = vec![hot_path.to_path_buf()];
    fs.extend(streams.iter().cloned());
    if let Some(o) = kernel_run(b, case, |cgroup| kernel::Spec {
        case: case.into(),
        cgroup,
        budget: sz.budget,
        files: fs,
        warm: HOT_PASSES,
        ops: 0,
        threads: 2,
        skip: 0,
        nap_us: nap.as_micros() as u64,
    })? {
        let ratio = hit_ratio(o.read_bytes, o.ops * PAGE as u64);
        b.record(case, "kernel", 2, "hot_hit_ratio", ratio, "ratio");
    }
    // The hot set is half the budget: with a page of the stream at a time beside it, OPT keeps
    // it whole; only `scan` records that ceiling (its hot reads interleave page for page).
    if case != "scan" || !b.wants("opt") {
        return Ok(());
    }
    b.step("scan / opt");
    // The hot reader and the stream one page each in turn; hot pages are numbered apart from
    // the stream's.
    let stream_pages = (4 * sz.budget / PAGE as u64) as u32;
    let hot_trace: Vec<u32> = trace[..stream_pages as usize]
        .iter()
        .map(|&p| p + stream_pages)
        .collect();
    let stream_trace: Vec<u32> = (0..stream_pages).collect();
    let warm_trace: Vec<u32> = warm.iter().map(|&p| p + stream_pages).collect();
    let mut merged = warm_trace.clone();
    merged.extend(interleave(&[&hot_trace, &stream_trace]));
    let hits = workload::opt_hits(&merged, sz.pages());
    let (mut h, mut n) = (0usize, 0usize);
    for (i, &p) in merged.iter().enumerate().skip(warm_trace.len()) {
        if p >= stream_pages {
            n += 1;
            h += usize::from(hits[i]);
        }
    }
    b.record(
        "scan",
        "opt",
        2,
        "hot_hit_ratio",
        h as f64 / n.max(1) as f64,
        "ratio",
    );
    Ok(())
}

// ---- loop ---------------------------------------------------------------------------------

/// Reads the whole file from start to end in 1 MiB reads, checking the tags; returns the bytes.
pub(super) fn read_through(file: &CachedFile, buf: &mut [u8]) -> anyhow::Result<u64> {
    let mut off = 0;
    while off < file.len() {
        let n = file.read_at(off, buf)?;
        ensure!(
            n > 0 && Content::check_tags(off, &buf[..n]),
            "read at {off}"
        );
        off += n as u64;
    }
    Ok(off)
}

pub(super) fn loop_case(b: &mut Bench, sz: &Sizes, files: &Files) -> anyhow::Result<()> {
    for v in QUIRE {
        if !runs(b, v) {
            continue;
        }
        let variant = v.name;
        b.step(&format!("loop / {variant}"));
        let cache = PageCache::new(v.config(sz.budget))?;
        let file = open_counted(b, &cache, &files.looped)?;
        let mut buf = vec![0u8; CHUNK];
        read_through(&file, &mut buf)?;
        let before = file.store_bytes_read();
        let t0 = Instant::now();
        let mut asked = 0;
        for _ in 0..sz.loop_passes {
            asked += read_through(&file, &mut buf)?;
        }
        let secs = t0.elapsed().as_secs_f64();
        let read = file.store_bytes_read() - before;
        record_reclaim_cost(b, "loop", v, 1, &cache);
        record_q(
            b,
            "loop",
            v,
            1,
            "hit_ratio",
            hit_ratio(read, asked),
            "ratio",
        );
        record_q(
            b,
            "loop",
            v,
            1,
            "mb_per_s",
            asked as f64 / secs / (1 << 20) as f64,
            "MiB/s",
        );
    }
    b.step("loop / kernel");
    let f = files.looped.clone();
    if let Some(o) = kernel_run(b, "loop", |cgroup| kernel::Spec {
        case: "loop".into(),
        cgroup,
        budget: sz.budget,
        files: vec![f],
        warm: 0,
        ops: sz.loop_passes,
        threads: 1,
        skip: 1,
        nap_us: 0,
    })? {
        b.record(
            "loop",
            "kernel",
            1,
            "hit_ratio",
            hit_ratio(o.read_bytes, o.ops),
            "ratio",
        );
        let mbps = o.ops as f64 / o.elapsed_s / (1 << 20) as f64;
        b.record("loop", "kernel", 1, "mb_per_s", mbps, "MiB/s");
    }
    if !b.wants("opt") {
        return Ok(());
    }
    b.step("loop / opt");
    let pages = (std::fs::metadata(&files.looped)?.len() / PAGE as u64) as u32;
    let trace: Vec<u32> = (0..=sz.loop_passes).flat_map(|_| 0..pages).collect();
    let opt = opt_ratio(&trace, sz.pages(), pages as usize);
    b.record("loop", "opt", 1, "hit_ratio", opt, "ratio");
    Ok(())
}
