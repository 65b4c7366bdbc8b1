//! Results as the bench prints them: a text table per shape, with ratio columns against the
//! raw baselines (`table`), or one JSON object per row (`json_lines`). The rows are `row.rs`.

use crate::row::Row;
use serde_json::{json, Map, Value};

/// Median of the per-repetition ratios r_i / b_i (runs of one repetition are close in time,
/// so this cancels drift between repetitions). Only when both have a run in every repetition.
fn paired(r: &Row, b: &Row) -> Option<f64> {
    if r.samples.len() != b.samples.len() || r.samples.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = r
        .samples
        .iter()
        .zip(&b.samples)
        .map(|(x, y)| x / y)
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `paired` for the table: two decimals, or "-".
fn paired_text(r: &Row, b: &Row) -> String {
    paired(r, b).map_or_else(|| "-".into(), |p| format!("{p:.2}"))
}

fn find<'a>(rows: &'a [Row], method: &str, threads: usize) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.method == method && (r.threads == threads || r.is_stage()) && !r.samples.is_empty()
    })
}

/// The row a row's ratio column divides by: raw hardlink (1 thread) for quiet rows,
/// `hardlink_loaded` for loaded rows; in a sweep, the same method at 1 thread.
fn baseline<'a>(rows: &'a [Row], r: &Row, sweep: bool) -> Option<&'a Row> {
    if sweep {
        find(rows, &r.method, 1)
    } else if r.is_loaded() {
        find(rows, "hardlink_loaded", 1)
    } else {
        find(rows, "hardlink", 1)
    }
}

/// The variant of a stage row's raw method named `<raw><suffix>`, where the bench ran it:
/// `_cas`, the same syscalls from the cache's blob files (`hardlink_cas`, `reflink_cas`);
/// `_cas_tree`, the floor: those after reading and decoding the tree's Directories.
fn raw_variant<'a>(rows: &'a [Row], r: &Row, suffix: &str) -> Option<&'a Row> {
    let raw = r.raw_counterpart()?;
    find(rows, &format!("{raw}{suffix}"), 1)
}

/// `key` = the method `r` is compared with, and `key_{median,min,paired}` = the ratios.
fn insert_ratios(o: &mut Map<String, Value>, key: &str, r: &Row, b: &Row) {
    o.insert(key.into(), json!(b.method));
    o.insert(format!("{key}_median"), round3(r.median() / b.median()));
    o.insert(format!("{key}_min"), round3(r.min() / b.min()));
    if let Some(p) = paired(r, b) {
        o.insert(format!("{key}_paired"), round3(p));
    }
}

/// A table cell: `pad` spaces, then the median ratio and the paired one.
fn median_paired_cell(r: &Row, b: &Row, pad: usize) -> String {
    format!(
        "{:pad$}{:.2} {:>6}",
        "",
        r.median() / b.median(),
        paired_text(r, b)
    )
}

fn round3(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

/// One JSON object per row: `{"shape","method","files","median_ms","min_ms", ...}`.
pub fn json_lines(rows: &[Row], fs: &str, sweep: bool) -> Vec<String> {
    rows.iter()
        .filter(|r| !r.samples.is_empty())
        .map(|r| {
            let mut o = Map::new();
            o.insert("shape".into(), json!(r.shape));
            o.insert("method".into(), json!(r.method));
            o.insert("files".into(), json!(r.files));
            o.insert("median_ms".into(), round3(r.median()));
            o.insert("min_ms".into(), round3(r.min()));
            o.insert("runs".into(), json!(r.samples.len()));
            o.insert("fs".into(), json!(fs));
            if !r.is_stage() {
                o.insert("threads".into(), json!(r.threads));
            }
            if let Some(b) = baseline(rows, r, sweep) {
                let key = if sweep {
                    "ratio_1thread"
                } else {
                    "ratio_hardlink"
                };
                o.insert(key.into(), round3(r.median() / b.median()));
                if let Some(p) = paired(r, b) {
                    o.insert(format!("{key}_paired"), round3(p));
                }
            }
            if let Some(s) = r.staged_by() {
                o.insert("staged_by".into(), json!(s));
                o.insert("counters".into(), r.counter_sums());
            }
            if let Some(b) = r.raw_counterpart().and_then(|raw| find(rows, &raw, 1)) {
                insert_ratios(&mut o, "vs_raw", r, b);
            }
            if let Some(b) = raw_variant(rows, r, "_cas") {
                insert_ratios(&mut o, "vs_raw_cas", r, b);
            }
            if let Some(b) = raw_variant(rows, r, "_cas_tree") {
                insert_ratios(&mut o, "vs_floor", r, b);
            }
            if !r.estimates.is_empty() {
                let f: Vec<Value> = r.estimates.iter().map(|e| json!(e.0.round())).collect();
                let t: Vec<Value> = r.estimates.iter().map(|e| json!(e.1.round())).collect();
                o.insert("engine_file_us".into(), Value::Array(f));
                o.insert("engine_tree_clone_us".into(), Value::Array(t));
            }
            if let Some(l) = r.load_mib_s {
                o.insert("load_mib_s".into(), round3(l));
            }
            o.insert(
                "samples_ms".into(),
                Value::Array(r.samples.iter().map(|s| round3(*s)).collect()),
            );
            Value::Object(o).to_string()
        })
        .collect()
}

/// The text table for one shape.
pub fn table(rows: &[Row], sweep: bool) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let b = if sweep { "1t" } else { "hl" };
    let _ = write!(
        out,
        "{:<18} {:>7} {:>4} {:>10} {:>10} {:>7} {:>7}",
        "method",
        "threads",
        "runs",
        "median ms",
        "min ms",
        format!("med/{b}"),
        format!("min/{b}")
    );
    if !sweep {
        let _ = write!(
            out,
            "  {:<31} {:<17} {:<19} staged by",
            "vs raw: med  min  paired", "vs cas: med paired", "vs floor: med paired"
        );
    }
    out.push('\n');
    for r in rows.iter().filter(|r| !r.samples.is_empty()) {
        let (rm, rn) = match baseline(rows, r, sweep) {
            Some(b) => (
                format!("{:.2}", r.median() / b.median()),
                format!("{:.2}", r.min() / b.min()),
            ),
            None => ("-".into(), "-".into()),
        };
        let threads = if r.is_stage() {
            "-".to_string()
        } else {
            r.threads.to_string()
        };
        let _ = write!(
            out,
            "{:<18} {:>7} {:>4} {:>10.2} {:>10.2} {:>7} {:>7}",
            r.method,
            threads,
            r.samples.len(),
            r.median(),
            r.min(),
            rm,
            rn
        );
        if !sweep {
            let vs = r
                .raw_counterpart()
                .and_then(|raw| {
                    find(rows, &raw, 1).map(|b| {
                        format!(
                            "{:.2} {:.2} {:>5} {}",
                            r.median() / b.median(),
                            r.min() / b.min(),
                            paired_text(r, b),
                            raw
                        )
                    })
                })
                .unwrap_or_default();
            let vs_cas = raw_variant(rows, r, "_cas")
                .map(|b| median_paired_cell(r, b, 8))
                .unwrap_or_default();
            let vs_floor = raw_variant(rows, r, "_cas_tree")
                .map(|b| median_paired_cell(r, b, 10))
                .unwrap_or_default();
            let _ = write!(
                out,
                "  {:<31} {:<17} {:<19} {}",
                vs,
                vs_cas,
                vs_floor,
                r.staged_by().unwrap_or_default()
            );
        }
        out.push('\n');
    }
    if let Some(l) = rows.iter().find_map(|r| r.load_mib_s) {
        let _ = writeln!(
            out,
            "(loaded rows: background writer created {l:.0} MiB/s of 64 KiB files, never synced)"
        );
    }
    out
}
