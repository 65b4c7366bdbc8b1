//! One result row per (shape, method, threads): its timed samples (ms), and for the
//! engine's stage rows each run's counters and running estimates; its median and min, which
//! method staged it (`staged_by`) and the raw method that did the same work
//! (`raw_counterpart`), which the report's ratio columns divide by (`report.rs`).

use clonestage_engine::stats::Counters;
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub struct Row {
    pub shape: &'static str,
    pub method: String,
    /// Threads of a raw method (0 for the engine's stage, which is single-threaded).
    pub threads: usize,
    pub files: usize,
    /// Milliseconds, one per timed run.
    pub samples: Vec<f64>,
    /// Stage rows: each timed run's own counters.
    pub counters: Vec<Counters>,
    /// Stage rows: the engine's running estimates (per-file µs, tree clone µs) that each
    /// run's subtree decision used.
    pub estimates: Vec<(f64, f64)>,
    /// Loaded rows: the background write rate achieved (MiB/s of new files).
    pub load_mib_s: Option<f64>,
}

impl Row {
    pub fn new(shape: &'static str, method: &str, threads: usize, files: usize) -> Row {
        Row {
            shape,
            method: method.to_string(),
            threads,
            files,
            samples: Vec::new(),
            counters: Vec::new(),
            estimates: Vec::new(),
            load_mib_s: None,
        }
    }

    pub fn is_stage(&self) -> bool {
        self.method.starts_with("stage_")
    }

    pub fn is_loaded(&self) -> bool {
        self.method.ends_with("_loaded")
    }

    pub fn median(&self) -> f64 {
        let mut v = self.samples.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    pub fn min(&self) -> f64 {
        self.samples.iter().copied().fold(f64::NAN, f64::min)
    }

    /// What placed the files of one run, e.g. "snapshot 1", "reflink 1978",
    /// "snapshot 1 + reflink 1978" (a stage that built the subtree cache entry, then cloned it).
    fn run_label(c: &Counters) -> String {
        let parts: Vec<String> = [
            ("snapshot", c.snapshot),
            ("clonefile", c.clonefile),
            ("reflink", c.reflink),
            ("hardlink", c.hardlink),
            ("copy", c.copy),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
        let mut s = if parts.is_empty() {
            "nothing".to_string()
        } else {
            parts.join(" + ")
        };
        if c.fallbacks > 0 {
            s.push_str(&format!(" ({} fallbacks)", c.fallbacks));
        }
        s
    }

    /// The runs' labels, with how many runs had each when they differ.
    pub fn staged_by(&self) -> Option<String> {
        if self.counters.is_empty() {
            return None;
        }
        let mut seen: Vec<(String, usize)> = Vec::new();
        for c in &self.counters {
            let l = Self::run_label(c);
            match seen.iter_mut().find(|(k, _)| *k == l) {
                Some(e) => e.1 += 1,
                None => seen.push((l, 1)),
            }
        }
        if seen.len() == 1 {
            return Some(seen.remove(0).0);
        }
        let n = self.counters.len();
        Some(
            seen.iter()
                .map(|(l, k)| format!("{l} ({k}/{n})"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    }

    /// The raw method whose work this stage row did, judged by its most common per-run
    /// method: a whole-tree clone compares with `snapshot`, per-file staging with the raw
    /// method of the same name; loaded rows with the loaded raw row.
    pub fn raw_counterpart(&self) -> Option<String> {
        if !self.is_stage() || self.counters.is_empty() {
            return None;
        }
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &self.counters {
            let per_file = c.reflink + c.clonefile + c.hardlink + c.copy;
            // A run that built the subtree entry did the per-file work too: compare with that.
            let m = if c.snapshot > 0 && per_file == 0 {
                "snapshot"
            } else {
                [
                    ("reflink", c.reflink + c.clonefile),
                    ("hardlink", c.hardlink),
                    ("copy", c.copy),
                ]
                .iter()
                .max_by_key(|(_, n)| *n)
                .map(|(k, _)| *k)
                .unwrap_or("hardlink")
            };
            *votes.entry(m).or_default() += 1;
        }
        let best = votes.iter().max_by_key(|(_, n)| **n).map(|(k, _)| *k)?;
        Some(if self.is_loaded() {
            format!("{best}_loaded")
        } else {
            best.to_string()
        })
    }

    pub fn counter_sums(&self) -> Value {
        let mut sum = Counters::default();
        for c in &self.counters {
            sum.add(c);
        }
        json!({
            "snapshot": sum.snapshot,
            "clonefile": sum.clonefile,
            "reflink": sum.reflink,
            "hardlink": sum.hardlink,
            "copy": sum.copy,
            "directories": sum.directories,
            "subtree_hits": sum.subtree_hits,
            "subtree_misses": sum.subtree_misses,
            "fallbacks": sum.fallbacks,
            "fallback_reasons": sum.fallback_reasons,
        })
    }
}
