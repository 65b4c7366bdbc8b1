//! The server's counters in the cache's `stats.json` (the engine's `Counters.extra`, so one
//! file holds staging and server figures and `clonestage stats` shows both):
//!
//! - `actions`: actions executed; `action_failures`: of those, non-zero exit;
//!   `action_timeouts`: timed out; `action_errors`: refused or failed before running
//!   (invalid request, missing inputs, internal error);
//! - `action_cache_hits`: GetActionResult and Execute lookups that found a result;
//!   `action_cache_misses`: GetActionResult lookups that did not (an Execute after one does
//!   not count it twice);
//!   `action_cache_updates`: results stored by clients;
//! - `action_exec_us_total`: wall time of executed commands (measured by the wrapper);
//!   `action_spawn_us_total`: the same plus the wrapper's own start and end, as the server
//!   saw it; `action_serve_us_total`: from accepting each Execute to its response;
//! - `upstream_*`: the team's cache behind this one (`upstream`, docs/upstream.md lists them);
//!   absent without `--upstream`;
//! - `stage_us_le_<N>` (and `stage_us_le_inf`): how many stagings took at most N µs, a fixed
//!   histogram that `stage_percentiles` turns into p50/p90/p99.

use clonestage_engine::stats::Counters;

/// Upper bounds of the staging-time histogram buckets, in microseconds.
pub const STAGE_BUCKETS_US: [u64; 15] = [
    250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
    2_000_000, 5_000_000, 10_000_000,
];

fn bucket_key(us: u64) -> String {
    match STAGE_BUCKETS_US.iter().find(|b| us <= **b) {
        Some(b) => format!("stage_us_le_{b}"),
        None => "stage_us_le_inf".to_string(),
    }
}

/// p50, p90 and p99 of staging time from the histogram, each as the upper bound of the bucket
/// it falls in (so a figure is never an underestimate). Empty when nothing was staged.
pub fn stage_percentiles(c: &Counters) -> Vec<(u32, u64)> {
    let mut buckets: Vec<(u64, u64)> = STAGE_BUCKETS_US
        .iter()
        .map(|b| {
            (
                *b,
                c.extra
                    .get(&format!("stage_us_le_{b}"))
                    .copied()
                    .unwrap_or(0),
            )
        })
        .collect();
    // Beyond the last bound: reported as twice the last bound.
    let last = *STAGE_BUCKETS_US.last().unwrap();
    buckets.push((
        last * 2,
        c.extra.get("stage_us_le_inf").copied().unwrap_or(0),
    ));
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return Vec::new();
    }
    [50u32, 90, 99]
        .iter()
        .map(|p| {
            let target = (total * *p as u64).div_ceil(100).max(1);
            let mut seen = 0;
            let bound = buckets
                .iter()
                .find(|(_, n)| {
                    seen += n;
                    seen >= target
                })
                .map(|b| b.0)
                .unwrap_or(last * 2);
            (*p, bound)
        })
        .collect()
}

/// How an executed action ended, for the counters.
pub(crate) struct ActionFigures {
    pub stage_us: Option<u64>,
    pub exec_us: u64,
    /// From starting the wrapper to having its stats (the wrapper's own cost plus `exec_us`).
    pub spawn_us: u64,
    /// From accepting the Execute to its response being ready.
    pub serve_us: u64,
    pub failed: bool,
    pub timed_out: bool,
}

/// Add an executed action's figures to `c.extra`.
pub(crate) fn add_action(c: &mut Counters, f: &ActionFigures) {
    let mut add = |k: &str, v: u64| *c.extra.entry(k.to_string()).or_default() += v;
    add("actions", 1);
    add("action_exec_us_total", f.exec_us);
    add("action_spawn_us_total", f.spawn_us);
    add("action_serve_us_total", f.serve_us);
    if f.failed {
        add("action_failures", 1);
    }
    if f.timed_out {
        add("action_timeouts", 1);
    }
    if let Some(us) = f.stage_us {
        add(&bucket_key(us), 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clonestage_engine::stats;
    use std::path::Path;

    /// Add counters `deltas` to stats.json now (errors are logged: figures must never fail a
    /// request; the server itself goes through the stager's ledger, `ledger_flush`).
    fn add(cache: &Path, deltas: &[(&str, u64)]) {
        let r = stats::update(cache, |c| {
            for (k, v) in deltas {
                *c.extra.entry(k.to_string()).or_default() += v;
            }
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot update server counters");
        }
    }

    fn count(cache: &Path, key: &str) {
        add(cache, &[(key, 1)]);
    }

    fn record_action(cache: &Path, f: &ActionFigures) {
        let r = stats::update(cache, |c| add_action(c, f));
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot update server counters");
        }
    }

    #[test]
    fn percentiles_from_buckets() {
        let mut c = Counters::default();
        assert!(stage_percentiles(&c).is_empty());
        // 90 fast stagings, 9 medium, 1 slow.
        c.extra.insert(bucket_key(100), 90);
        c.extra.insert(bucket_key(4_000), 9);
        c.extra.insert(bucket_key(50_000_000), 1);
        assert_eq!(bucket_key(100), "stage_us_le_250");
        assert_eq!(bucket_key(4_000), "stage_us_le_5000");
        assert_eq!(
            stage_percentiles(&c),
            vec![(50, 250), (90, 250), (99, 5_000)]
        );
        c.extra.insert(bucket_key(4_000), 8);
        c.extra.insert(bucket_key(50_000_000), 2);
        assert_eq!(stage_percentiles(&c)[2], (99, 20_000_000));
    }

    #[test]
    fn counters_accumulate_in_stats_json() {
        let d = tempfile::tempdir().unwrap();
        record_action(
            d.path(),
            &ActionFigures {
                stage_us: Some(700),
                exec_us: 5,
                spawn_us: 6,
                serve_us: 9,
                failed: true,
                timed_out: false,
            },
        );
        count(d.path(), "action_cache_hits");
        let c = stats::load(d.path()).unwrap();
        assert_eq!(c.extra["actions"], 1);
        assert_eq!(c.extra["action_failures"], 1);
        assert_eq!(c.extra["stage_us_le_1000"], 1);
        assert_eq!(c.extra["action_cache_hits"], 1);
        assert!(!c.extra.contains_key("action_timeouts"));
    }
}
