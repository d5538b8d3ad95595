//! What changes over a run: switch (the working set moves between two files that each fit),
//! readonce (readers streaming files 5× the budget once: the cost of reclaim itself) and
//! shadow-memory (the index heap the shadows of evicted pages hold).

use super::patterns::read_through;
use super::*;

// ---- switch -------------------------------------------------------------------------------

pub(super) fn switch_case(b: &mut Bench, sz: &Sizes, files: &Files) -> anyhow::Result<()> {
    for v in QUIRE {
        if !runs(b, v) {
            continue;
        }
        let variant = v.name;
        b.step(&format!("switch / {variant}"));
        let cache = PageCache::new(v.config(sz.budget))?;
        let opened: Vec<_> = files
            .switch
            .iter()
            .map(|p| open_counted(b, &cache, p))
            .collect::<anyhow::Result<_>>()?;
        let mut buf = vec![0u8; CHUNK];
        let (mut asked, mut read, mut secs) = (0, 0, 0.0);
        let (mut refaults, mut activated) = (0, 0);
        for turn in 0..SWITCH_TURNS {
            let file = &opened[turn % 2];
            let before = file.store_bytes_read();
            let vm = cache.stats_exact().vmstat;
            let t0 = Instant::now();
            let mut n = 0;
            for _ in 0..SWITCH_PASSES {
                n += read_through(file, &mut buf)?;
            }
            if turn > 0 {
                secs += t0.elapsed().as_secs_f64();
                asked += n;
                read += file.store_bytes_read() - before;
                let now = cache.stats_exact().vmstat;
                refaults += now.get(Event::WorkingsetRefault) - vm.get(Event::WorkingsetRefault);
                activated += now.get(Event::WorkingsetActivate) - vm.get(Event::WorkingsetActivate);
            }
        }
        // How many refaults workingset detection found within the active list's size.
        record_reclaim_cost(b, "switch", v, 1, &cache);
        record_q(
            b,
            "switch",
            v,
            1,
            "refaults_activated",
            activated as f64 / refaults.max(1) as f64,
            "ratio",
        );
        record_q(
            b,
            "switch",
            v,
            1,
            "hit_ratio",
            hit_ratio(read, asked),
            "ratio",
        );
        record_q(
            b,
            "switch",
            v,
            1,
            "mb_per_s",
            asked as f64 / secs / (1 << 20) as f64,
            "MiB/s",
        );
    }
    b.step("switch / kernel");
    let fs = files.switch.to_vec();
    if let Some(o) = kernel_run(b, "switch", |cgroup| kernel::Spec {
        case: "switch".into(),
        cgroup,
        budget: sz.budget,
        files: fs,
        warm: SWITCH_TURNS,
        ops: SWITCH_PASSES,
        threads: 1,
        skip: 1,
        nap_us: 0,
    })? {
        b.record(
            "switch",
            "kernel",
            1,
            "hit_ratio",
            hit_ratio(o.read_bytes, o.ops),
            "ratio",
        );
        let mbps = o.ops as f64 / o.elapsed_s / (1 << 20) as f64;
        b.record("switch", "kernel", 1, "mb_per_s", mbps, "MiB/s");
    }
    if !b.wants("opt") {
        return Ok(());
    }
    b.step("switch / opt");
    let pages = (std::fs::metadata(&files.switch[0])?.len() / PAGE as u64) as u32;
    let mut trace = Vec::new();
    for turn in 0..SWITCH_TURNS as u32 {
        let base = (turn % 2) * pages;
        for _ in 0..SWITCH_PASSES {
            trace.extend(base..base + pages);
        }
    }
    let opt = opt_ratio(&trace, sz.pages(), SWITCH_PASSES * pages as usize);
    b.record("switch", "opt", 1, "hit_ratio", opt, "ratio");
    Ok(())
}

// ---- readonce -----------------------------------------------------------------------------

pub(super) fn readonce_case(b: &mut Bench, sz: &Sizes, files: &Files) -> anyhow::Result<()> {
    for v in QUIRE {
        if !runs(b, v) {
            continue;
        }
        let variant = v.name;
        b.step(&format!("readonce / {variant}"));
        let cache = PageCache::new(v.config(sz.budget))?;
        let handles: Vec<_> = files
            .once
            .iter()
            .map(|p| open_counted(b, &cache, p))
            .collect::<anyhow::Result<_>>()?;
        let before = cache.stats_exact().vmstat;
        let t0 = Instant::now();
        let total = std::thread::scope(|s| -> anyhow::Result<u64> {
            let readers: Vec<_> = handles
                .iter()
                .map(|f| {
                    s.spawn(move || -> anyhow::Result<u64> {
                        let mut buf = vec![0u8; CHUNK];
                        read_through(f, &mut buf)
                    })
                })
                .collect();
            let mut total = 0;
            for r in readers {
                total += r.join().expect("reader panicked")?;
            }
            Ok(total)
        })?;
        let secs = t0.elapsed().as_secs_f64();
        let ev = cache.stats_exact().vmstat.since(&before);
        let gib = total as f64 / (1u64 << 30) as f64;
        // Bytes read from the store per byte asked for: above 1 where readahead was evicted
        // before its reader reached it and read again.
        let from_store: u64 = handles.iter().map(CachedFile::store_bytes_read).sum();
        let direct = ev.get(Event::DirectReclaims) as f64;
        record_reclaim_cost(b, "readonce", v, THREADS, &cache);
        record_q(
            b,
            "readonce",
            v,
            THREADS,
            "mb_per_s",
            total as f64 / secs / (1 << 20) as f64,
            "MiB/s",
        );
        record_q(
            b,
            "readonce",
            v,
            THREADS,
            "direct_reclaims_per_gib",
            direct / gib,
            "1/GiB",
        );
        record_q(
            b,
            "readonce",
            v,
            THREADS,
            "store_read_per_asked",
            from_store as f64 / total.max(1) as f64,
            "ratio",
        );
        let allocs = ev.get(Event::FolioAllocs).max(1) as f64;
        record_q(
            b,
            "readonce",
            v,
            THREADS,
            "direct_reclaims_per_alloc",
            direct / allocs,
            "ratio",
        );
    }
    b.step("readonce / kernel");
    let fs = files.once.to_vec();
    if let Some(o) = kernel_run(b, "readonce", |cgroup| kernel::Spec {
        case: "readonce".into(),
        cgroup,
        budget: sz.budget,
        files: fs,
        warm: 0,
        ops: 0,
        threads: THREADS,
        skip: 0,
        nap_us: 0,
    })? {
        let mbps = o.ops as f64 / o.elapsed_s / (1 << 20) as f64;
        b.record("readonce", "kernel", THREADS, "mb_per_s", mbps, "MiB/s");
    }
    Ok(())
}

// ---- shadow-memory ------------------------------------------------------------------------

pub(super) fn shadow_case(b: &mut Bench, sz: &Sizes) -> anyhow::Result<()> {
    b.compare("shadow-memory", "no-shrinker", "shrinker");
    let budget = sz.shadow_budget;
    let len = 100 * budget;
    for (variant, shrinker) in [("no-shrinker", false), ("shrinker", true)] {
        if !b.wants(variant) {
            continue;
        }
        b.step(&format!("shadow-memory / {variant}"));
        let mut cfg = CacheConfig::new(budget as usize);
        cfg.max_folio_order = 0;
        cfg.readahead_max = 0;
        cfg.io_threads = 0;
        cfg.shadow_shrinker = shrinker;
        let cache = PageCache::new(cfg)?;
        let file = cache.open(workload::SyntheticStore::new(len))?;
        let mut buf = vec![0u8; 64 << 10];
        let mut off = 0;
        let mut peak = 0usize;
        while off < len {
            let n = file.read_at(off, &mut buf)?;
            ensure!(n > 0, "short read at {off}");
            let first = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            ensure!(first == off, "wrong bytes at {off}");
            off += n as u64;
            if off % (4 << 20) == 0 {
                peak = peak.max(cache.stats_exact().index_heap_bytes);
            }
        }
        peak = peak.max(cache.stats_exact().index_heap_bytes);
        b.record(
            "shadow-memory",
            variant,
            1,
            "index_heap_bytes_per_budget_byte",
            peak as f64 / budget as f64,
            "ratio",
        );
    }
    Ok(())
}
