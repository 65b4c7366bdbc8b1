//! Per-action figures for `ExecutedActionMetadata`: the standard timestamps (staging the input
//! root is the input fetch phase; moving outputs into the CAS is the upload phase) and one
//! `auxiliary_metadata` entry, a `google.protobuf.Struct` (a well-known type, so any protobuf
//! tool and Bazel's logs can decode it without our schema):
//!
//! ```text
//! { "clonestage_staging": 1,
//!   "staging_us": N, "bytes": N, "directories": N, "symlinks": N,
//!   "files": { "clonefile": N, "reflink": N, "snapshot": N, "hardlink": N, "copy": N, "empty": N },
//!   "subtree_hits": N, "subtree_misses": N,
//!   "pool_hits": N, "pool_misses": N,            // subtrees taken from / not found in the pool
//!   "code_linked": N, "code_cloned": N,          // --preserve-inodes macho: Mach-O code linked / cloned
//!   "fallbacks": { "<reason>": N, ... },          // e.g. exdev, enotsup, emlink
//!   "hardlinked_inodes": N, "tampered_inputs": N,
//!   "command": { "exit_code": N, "signal": N, "wall_us": N, "user_us": N, "sys_us": N,
//!                "max_rss_kb": N } }
//! ```
//!
//! The `clonestage_staging` key marks the struct as ours among other auxiliary entries.

use super::spawn::SpawnStats;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::protobuf::{Any, Timestamp};
use clonestage_engine::stats::Counters;
use prost::Message;
use prost_types::{value::Kind, Struct, Value};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

pub const STRUCT_TYPE: &str = "type.googleapis.com/google.protobuf.Struct";

pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// When each phase of an action started and ended.
#[derive(Debug, Default, Clone)]
pub(crate) struct Timeline {
    pub queued: Option<SystemTime>,
    pub worker_start: Option<SystemTime>,
    pub fetch_start: Option<SystemTime>,
    pub fetch_done: Option<SystemTime>,
    pub exec_start: Option<SystemTime>,
    pub exec_done: Option<SystemTime>,
    pub upload_start: Option<SystemTime>,
    pub upload_done: Option<SystemTime>,
    pub worker_done: Option<SystemTime>,
}

pub(crate) fn now() -> Option<SystemTime> {
    Some(SystemTime::now())
}

pub(crate) fn executed_metadata(
    worker: &str,
    t: &Timeline,
    aux: Vec<Any>,
) -> pb::ExecutedActionMetadata {
    let ts = |t: Option<SystemTime>| t.map(timestamp);
    pb::ExecutedActionMetadata {
        worker: worker.to_string(),
        queued_timestamp: ts(t.queued),
        worker_start_timestamp: ts(t.worker_start),
        worker_completed_timestamp: ts(t.worker_done),
        input_fetch_start_timestamp: ts(t.fetch_start),
        input_fetch_completed_timestamp: ts(t.fetch_done),
        execution_start_timestamp: ts(t.exec_start),
        execution_completed_timestamp: ts(t.exec_done),
        output_upload_start_timestamp: ts(t.upload_start),
        output_upload_completed_timestamp: ts(t.upload_done),
        virtual_execution_duration: None,
        auxiliary_metadata: aux,
    }
}

/// Microseconds from `a` to `b` (0 when either is unset or time went backwards).
pub(crate) fn span_us(a: Option<SystemTime>, b: Option<SystemTime>) -> u64 {
    match (a, b) {
        (Some(a), Some(b)) => b.duration_since(a).map_or(0, |d| d.as_micros() as u64),
        _ => 0,
    }
}

fn num(v: u64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(v as f64)),
    }
}

fn obj(fields: BTreeMap<String, Value>) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

fn fields(pairs: &[(&str, u64)]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), num(*v)))
        .collect()
}

/// What staging and the command did, as described in the module doc.
pub(crate) struct StagingFigures<'a> {
    pub counters: &'a Counters,
    pub staging_us: u64,
    pub hardlinked_inodes: usize,
    pub tampered_inputs: usize,
    pub command: Option<&'a SpawnStats>,
}

pub(crate) fn staging_struct(f: &StagingFigures) -> Struct {
    let c = f.counters;
    let mut top = fields(&[
        ("clonestage_staging", 1),
        ("staging_us", f.staging_us),
        ("bytes", c.bytes),
        ("directories", c.directories),
        ("symlinks", c.symlinks),
        ("subtree_hits", c.subtree_hits),
        ("subtree_misses", c.subtree_misses),
        ("pool_hits", c.pool_hits),
        ("pool_misses", c.pool_misses),
        ("code_linked", c.code_linked),
        ("code_cloned", c.code_cloned),
        ("hardlinked_inodes", f.hardlinked_inodes as u64),
        ("tampered_inputs", f.tampered_inputs as u64),
    ]);
    top.insert(
        "files".into(),
        obj(fields(&[
            ("clonefile", c.clonefile),
            ("reflink", c.reflink),
            ("snapshot", c.snapshot),
            ("hardlink", c.hardlink),
            ("copy", c.copy),
            ("empty", c.empty),
        ])),
    );
    top.insert(
        "fallbacks".into(),
        obj(c
            .fallback_reasons
            .iter()
            .map(|(k, v)| (k.clone(), num(*v)))
            .collect()),
    );
    if let Some(s) = f.command {
        top.insert(
            "command".into(),
            obj(fields(&[
                ("exit_code", s.exit_code as u64),
                ("signal", s.signal as u64),
                ("wall_us", s.wall_us),
                ("user_us", s.user_us),
                ("sys_us", s.sys_us),
                ("max_rss_kb", s.max_rss_kb),
            ])),
        );
    }
    Struct { fields: top }
}

pub(crate) fn staging_any(f: &StagingFigures) -> Any {
    Any {
        type_url: STRUCT_TYPE.into(),
        value: staging_struct(f).encode_to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_struct_round_trips() {
        let mut c = Counters {
            reflink: 7,
            bytes: 100,
            ..Default::default()
        };
        c.fallback("exdev");
        let any = staging_any(&StagingFigures {
            counters: &c,
            staging_us: 42,
            hardlinked_inodes: 0,
            tampered_inputs: 0,
            command: None,
        });
        assert_eq!(any.type_url, STRUCT_TYPE);
        let s = Struct::decode(any.value.as_slice()).unwrap();
        assert_eq!(s.fields["staging_us"].kind, Some(Kind::NumberValue(42.0)));
        let Some(Kind::StructValue(files)) = &s.fields["files"].kind else {
            panic!()
        };
        assert_eq!(files.fields["reflink"].kind, Some(Kind::NumberValue(7.0)));
        let Some(Kind::StructValue(fb)) = &s.fields["fallbacks"].kind else {
            panic!()
        };
        assert_eq!(fb.fields["exdev"].kind, Some(Kind::NumberValue(1.0)));
    }
}
