//! Which way each metric is better: the direction the tables, the JSON report and the charts
//! show beside every figure.
//!
//! The suites name their metrics with plain strings; [`Better::of`] is the one place that says
//! whether more of a metric is better, less is, or neither (a figure that describes a run rather
//! than scores it, such as the share of free frames left at the end). A metric missing here is
//! caught by the test below, which reads every `record` call of the suites' sources.

use serde::{Deserialize, Serialize};

/// The direction in which a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// More is better (throughput, hit ratios).
    Higher,
    /// Less is better (time per operation, latency, work per operation).
    Lower,
    /// Neither: the figure describes the run (a share, a count) rather than scores it.
    None,
}

impl Better {
    /// The direction of `metric`, or `None` (the Rust one) for a metric this table does not know.
    pub fn of(metric: &str) -> Option<Better> {
        use Better::{Higher, Lower};
        Some(match metric {
            // Throughput: operations, bytes or walks per wall-clock or CPU second.
            "ops_per_s" | "ops_per_cpu_s" | "iops" | "iops_per_cpu_s" | "mb_per_s"
            | "handoffs_per_cpu_s" | "inserts_per_s" | "stats_per_s" | "walks_per_s"
            | "walks_per_cpu_s" | "objects_per_s" | "accesses_per_s" | "tps" => Higher,
            // What stayed in memory.
            "hit_ratio" | "hot_hit_ratio" | "demand_hit_ratio" => Higher,
            // What a reader keeps of its throughput beside other work on the cache.
            "iops_share_unmonitored" => Higher,
            // Time per unit of work.
            "ns_per_op" | "ns_per_page" | "ns_per_test" | "ns_per_stats" | "lat_us" | "sync_us"
            | "seconds" => Lower,
            // Work or waiting per unit of work: each is overhead the "after" variant removes.
            "ctx_switches_per_op"
            | "ctx_switches_per_walk"
            | "wakeups_per_op"
            | "spurious_wakeups_per_op"
            | "table_lookups_per_op"
            | "slow_paths_per_op"
            | "lockref_slow_paths_per_walk"
            | "slow_walks_per_walk"
            | "walks_per_op"
            | "walks_per_insert"
            | "dirty_tests_per_page"
            | "direct_reclaims_per_alloc"
            | "direct_reclaims_per_gib"
            | "reclaim_ns_per_evicted"
            | "store_read_per_asked" => Lower,
            // Memory held.
            "daemon_rss_mib" | "index_heap_bytes_per_budget_byte" | "peak_rss_mib" => Lower,
            // A query workload's time, and what it fetched from the store, per phase (the
            // `query` suite: a cold process, the same again warm, a new process on the disk
            // tier).
            "cold_s" | "warm_s" | "restart_s" | "cold_gets" | "warm_gets" | "restart_gets"
            | "cold_mib" | "warm_mib" | "restart_mib" => Lower,
            // Descriptions of a run, not scores: the share of frames background reclaim keeps
            // free, the share of refaults workingset detection activated, the share of a FUSE
            // request that is the round trip itself, the pages a trace replay evicted, the
            // reads per second that went to storage (as many as the cache let through), and how
            // a polling thread and the I/O engine overlapped reads (the mean depth a request
            // joined, how long a woken future waited for its poll, the futures each pass over
            // the ready ones polled).
            "free_share_at_end" | "refaults_activated" | "round_trip_share" | "evicted_pages"
            | "miss_iops" | "mean_depth" | "wake_to_poll_us" | "ready_per_pass" => Better::None,
            _ => return None,
        })
    }

    /// The arrow the tables put after a metric's name: `↑` (higher is better), `↓` (lower is
    /// better), nothing for a descriptive figure.
    pub fn arrow(self) -> &'static str {
        match self {
            Better::Higher => " ↑",
            Better::Lower => " ↓",
            Better::None => "",
        }
    }

    /// Whether going from `before` to `after` is an improvement (`Some(true)`), a regression
    /// (`Some(false)`), or neither (equal figures, or a descriptive metric).
    pub fn improved(self, before: f64, after: f64) -> Option<bool> {
        match self {
            _ if before == after => None,
            Better::Higher => Some(after > before),
            Better::Lower => Some(after < before),
            Better::None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sources of every suite, read at compile time so that the test sees exactly what is
    /// built.
    const SOURCES: &[(&str, &str)] = &[
        ("dcache.rs", include_str!("dcache.rs")),
        ("dirtybit.rs", include_str!("dirtybit.rs")),
        ("evict/mod.rs", include_str!("evict/mod.rs")),
        ("evict/lifecycle.rs", include_str!("evict/lifecycle.rs")),
        ("evict/patterns.rs", include_str!("evict/patterns.rs")),
        ("evict/trace.rs", include_str!("evict/trace.rs")),
        ("fuse.rs", include_str!("fuse.rs")),
        ("fuse/programs.rs", include_str!("fuse/programs.rs")),
        ("inflight.rs", include_str!("inflight.rs")),
        ("lockref.rs", include_str!("lockref.rs")),
        ("object/mod.rs", include_str!("object/mod.rs")),
        ("object/bucket.rs", include_str!("object/bucket.rs")),
        ("object/cases.rs", include_str!("object/cases.rs")),
        ("object/daemons.rs", include_str!("object/daemons.rs")),
        ("object/peers.rs", include_str!("object/peers.rs")),
        ("pagelock.rs", include_str!("pagelock.rs")),
        ("read.rs", include_str!("read.rs")),
        ("stats.rs", include_str!("stats.rs")),
        ("unmap.rs", include_str!("unmap.rs")),
        ("write.rs", include_str!("write.rs")),
        ("xarray.rs", include_str!("xarray.rs")),
    ];

    /// The arguments of every call of `call` (e.g. `.record(`) in `src`, split at the commas
    /// outside brackets.
    fn record_calls(src: &str, call: &str) -> Vec<Vec<String>> {
        let mut calls = Vec::new();
        for (at, _) in src.match_indices(call) {
            let mut depth = 1;
            let mut args = vec![String::new()];
            for c in src[at + call.len()..].chars() {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c == ',' {
                    args.push(String::new());
                } else {
                    args.last_mut().expect("one argument at least").push(c);
                }
            }
            calls.push(args.into_iter().map(|a| a.trim().to_string()).collect());
        }
        calls
    }

    #[test]
    fn every_recorded_metric_has_a_direction() {
        let mut seen = 0;
        // record(case, variant, threads, metric, value, unit): the metric is the 4th;
        // evict's record_q(b, case, variant, threads, metric, value, unit): the 5th.
        for (file, src) in SOURCES {
            for (call, at) in [(".record(", 3), ("record_q(", 4)] {
                for args in record_calls(src, call) {
                    let Some(metric) = args.get(at) else { continue };
                    // A wrapper forwarding its own `metric` argument, or its definition.
                    if metric == "metric" || metric.contains(':') {
                        continue;
                    }
                    let Some(name) = metric.strip_prefix('"').and_then(|m| m.strip_suffix('"'))
                    else {
                        panic!("{file}: a record call whose metric is not a literal: {args:?}");
                    };
                    assert!(
                        Better::of(name).is_some(),
                        "{file}: metric {name:?} has no direction in bench/metric.rs"
                    );
                    seen += 1;
                }
            }
        }
        // The suites record well over 50 figures; a parser that found none would pass vacuously.
        assert!(seen > 50, "only {seen} record calls found");
    }

    #[test]
    fn directions() {
        assert_eq!(Better::of("ops_per_s"), Some(Better::Higher));
        assert_eq!(Better::of("ns_per_op"), Some(Better::Lower));
        assert_eq!(Better::of("round_trip_share"), Some(Better::None));
        assert_eq!(Better::of("no_such_metric"), None);
        assert_eq!(Better::Higher.improved(1.0, 2.0), Some(true));
        assert_eq!(Better::Lower.improved(1.0, 2.0), Some(false));
        assert_eq!(Better::Lower.improved(2.0, 1.0), Some(true));
        assert_eq!(Better::Higher.improved(2.0, 2.0), None);
        assert_eq!(Better::None.improved(1.0, 2.0), None);
        assert_eq!(
            serde_json::to_string(&Better::Higher).unwrap(),
            "\"higher\""
        );
    }
}
