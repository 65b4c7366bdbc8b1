//! The server's counters in the cache's `stats.json` (the engine's `Counters.extra`, so one
//! file holds staging and server figures and `clonestage stats` shows both): each name is
//! defined here, once, with what it counts, and every file that counts (and every test that
//! reads one) uses the constant. The requests add them to the stager's ledger
//! (`State::count`, `add_action`), written by `ledger_flush`. The `upstream_*` ones are
//! absent without `--upstream` (docs/upstream.md explains them). `stage_us_le_<N>` (and
//! `stage_us_le_inf`) count stagings that took at most N µs, a fixed histogram that
//! `stage_percentiles` turns into p50/p90/p99.

use clonestage_engine::stats::Counters;

// Actions (`add_action`, `execution/respond.rs`).
/// Actions executed.
pub const ACTIONS: &str = "actions";
/// Of `ACTIONS`, those with a non-zero exit.
pub const ACTION_FAILURES: &str = "action_failures";
/// Of `ACTIONS`, those that timed out.
pub const ACTION_TIMEOUTS: &str = "action_timeouts";
/// Executes refused or failed before running (invalid request, missing inputs, internal error).
pub const ACTION_ERRORS: &str = "action_errors";
/// Wall time of executed commands, as the wrapper measured it.
pub const ACTION_EXEC_US_TOTAL: &str = "action_exec_us_total";
/// `ACTION_EXEC_US_TOTAL` plus the wrapper's own start and end, as the server saw it.
pub const ACTION_SPAWN_US_TOTAL: &str = "action_spawn_us_total";
/// From accepting each Execute to its response.
pub const ACTION_SERVE_US_TOTAL: &str = "action_serve_us_total";
/// Results that ran to exit 0 but failed `checks::result_check`: answered, not cached.
pub const RESULTS_NOT_CACHED: &str = "results_not_cached";
/// Actions answered ABORTED because a hardlinked input was written through while they ran.
pub const TAINTED_ACTIONS: &str = "tainted_actions";

// The action cache (`action_cache_service`, `execution/respond.rs`).
/// GetActionResult and Execute lookups that found a result.
pub const ACTION_CACHE_HITS: &str = "action_cache_hits";
/// GetActionResult lookups that did not (an Execute after one does not count it twice).
pub const ACTION_CACHE_MISSES: &str = "action_cache_misses";
/// Results stored by clients (UpdateActionResult).
pub const ACTION_CACHE_UPDATES: &str = "action_cache_updates";

// Shared cache directories (`--shared-dir`, `execution/respond.rs`, `eviction`).
/// Actions that crashed on a shared cache directory, which was cleared and the action run again.
pub const SHARED_DIR_RECOVERIES: &str = "shared_dir_recoveries";
/// Of `SHARED_DIR_RECOVERIES`, those whose second run failed too.
pub const SHARED_DIR_RECOVERIES_FAILED: &str = "shared_dir_recoveries_failed";
/// Shared cache directories emptied by eviction.
pub const SHARED_DIR_EVICTIONS: &str = "shared_dir_evictions";
/// Bytes those evictions freed.
pub const SHARED_DIR_EVICTED_BYTES: &str = "shared_dir_evicted_bytes";

// The team's cache behind this one (`upstream`; docs/upstream.md's table).
/// Local misses the upstream served (its result and all its blobs now local).
pub const UPSTREAM_AC_HITS: &str = "upstream_ac_hits";
/// Local misses the upstream did not have either.
pub const UPSTREAM_AC_MISSES: &str = "upstream_ac_misses";
/// Read calls that failed: error, timeout, deadline, lie.
pub const UPSTREAM_ERRORS: &str = "upstream_errors";
/// Results or blobs refused (not matching their digest, naming a blob the upstream lacks).
pub const UPSTREAM_REJECTED: &str = "upstream_rejected";
/// How often the breaker opened.
pub const UPSTREAM_BREAKER_OPENS: &str = "upstream_breaker_opens";
/// Blobs fetched into the local cache.
pub const UPSTREAM_BLOBS_FETCHED: &str = "upstream_blobs_fetched";
/// Their bytes.
pub const UPSTREAM_BYTES_FETCHED: &str = "upstream_bytes_fetched";
/// Results written upstream (UpdateActionResult succeeded).
pub const UPSTREAM_RESULTS_UPLOADED: &str = "upstream_results_uploaded";
/// Blobs uploaded because the upstream lacked them.
pub const UPSTREAM_BLOBS_UPLOADED: &str = "upstream_blobs_uploaded";
/// Their bytes.
pub const UPSTREAM_BYTES_UPLOADED: &str = "upstream_bytes_uploaded";
/// Failed upload attempts that will be retried.
pub const UPSTREAM_UPLOAD_RETRIES: &str = "upstream_upload_retries";
/// Results not uploaded: the queue was full, or the result or a blob of it left the cache.
pub const UPSTREAM_UPLOAD_DROPPED: &str = "upstream_upload_dropped";
/// Not a counter: a gauge `clonestage stats` adds itself, the entries in the upload queue now
/// (`upstream_queue_len`).
pub const UPSTREAM_QUEUE_LEN: &str = "upstream_queue_len";

// The staging-time histogram (`add_action`, `stage_percentiles`).
/// Prefix of a bucket's name: `stage_us_le_<N>` counts stagings of at most N µs.
pub const STAGE_US_LE: &str = "stage_us_le_";
/// Stagings slower than the last bucket.
pub const STAGE_US_LE_INF: &str = "stage_us_le_inf";

/// Upper bounds of the staging-time histogram buckets, in microseconds.
pub const STAGE_BUCKETS_US: [u64; 15] = [
    250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
    2_000_000, 5_000_000, 10_000_000,
];

fn bucket_key(us: u64) -> String {
    match STAGE_BUCKETS_US.iter().find(|b| us <= **b) {
        Some(b) => format!("{STAGE_US_LE}{b}"),
        None => STAGE_US_LE_INF.to_string(),
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
                    .get(&format!("{STAGE_US_LE}{b}"))
                    .copied()
                    .unwrap_or(0),
            )
        })
        .collect();
    // Beyond the last bound: reported as twice the last bound.
    let last = *STAGE_BUCKETS_US.last().unwrap();
    buckets.push((last * 2, c.extra.get(STAGE_US_LE_INF).copied().unwrap_or(0)));
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
    add(ACTIONS, 1);
    add(ACTION_EXEC_US_TOTAL, f.exec_us);
    add(ACTION_SPAWN_US_TOTAL, f.spawn_us);
    add(ACTION_SERVE_US_TOTAL, f.serve_us);
    if f.failed {
        add(ACTION_FAILURES, 1);
    }
    if f.timed_out {
        add(ACTION_TIMEOUTS, 1);
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
        count(d.path(), ACTION_CACHE_HITS);
        let c = stats::load(d.path()).unwrap();
        assert_eq!(c.extra[ACTIONS], 1);
        assert_eq!(c.extra[ACTION_FAILURES], 1);
        assert_eq!(c.extra["stage_us_le_1000"], 1);
        assert_eq!(c.extra[ACTION_CACHE_HITS], 1);
        assert!(!c.extra.contains_key(ACTION_TIMEOUTS));
    }
}
