//! `clonestage stats [--json]`: the counters every process sharing the cache has recorded.

use clonestage_engine::stats;
use clonestage_server::server_counters;
use std::path::Path;
use std::process::ExitCode;

pub fn stats(cache: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let c = super::open(cache)?;
    let s = stats::load(c.root())?;
    let pcts = clonestage_server::stage_percentiles(&s);
    if json {
        let mut v = serde_json::to_value(&s)?;
        for (p, us) in &pcts {
            v[format!("stage_p{p}_us")] = (*us).into();
        }
        if let Some(n) = clonestage_server::upstream_queue_len(c.root()) {
            v[server_counters::UPSTREAM_QUEUE_LEN] = n.into();
        }
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("cache: {}", c.root().display());
    println!("cache bytes: {}", clonestage_engine::cas::cache_bytes(&c));
    println!(
        "stages: {} ({} failed), staging time total {:.1} ms",
        s.stages,
        s.stage_failures,
        s.stage_us_total as f64 / 1000.0
    );
    println!("files/trees by method:");
    for (k, v) in [
        ("clonefile", s.clonefile),
        ("reflink", s.reflink),
        ("snapshot", s.snapshot),
        ("hardlink", s.hardlink),
        ("copy", s.copy),
        ("empty", s.empty),
        ("symlinks", s.symlinks),
    ] {
        println!("  {k:<10} {v}");
    }
    println!(
        "subtree cache: {} hits, {} misses",
        s.subtree_hits, s.subtree_misses
    );
    println!(
        "pool of ready subtrees: {} hits, {} misses, {} recycled, {} built, {} discarded",
        s.pool_hits, s.pool_misses, s.pool_recycled, s.pool_built, s.pool_discarded
    );
    for (k, v) in &s.pool_discard_reasons {
        println!("  {k:<10} {v}");
    }
    println!("fallbacks: {}", s.fallbacks);
    for (k, v) in &s.fallback_reasons {
        println!("  {k:<10} {v}");
    }
    println!("tampered hardlinked inputs quarantined: {}", s.tampered);
    let mut extra = s.extra.clone();
    // A gauge, not a counter: what waits in the upload queue now.
    if let Some(n) = clonestage_server::upstream_queue_len(c.root()) {
        extra.insert(server_counters::UPSTREAM_QUEUE_LEN.into(), n);
    }
    let server: Vec<_> = extra
        .iter()
        .filter(|(k, _)| !k.starts_with(server_counters::STAGE_US_LE))
        .collect();
    if !server.is_empty() {
        println!("server:");
        for (k, v) in server {
            println!("  {k:<22} {v}");
        }
    }
    if !pcts.is_empty() {
        let p: Vec<String> = pcts
            .iter()
            .map(|(p, us)| format!("p{p} <= {:.2} ms", *us as f64 / 1000.0))
            .collect();
        println!("action staging time: {}", p.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
