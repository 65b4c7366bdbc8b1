//! ByteStream helpers for the upload suites (`compression`, `uploads`): WriteRequests as
//! Bazel's uploader sends them, test blobs, zstd frames of raw blocks with any window, Writes
//! held open, and what the server keeps (missing blobs, temp files).

use super::{Clients, TestServer};
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream as bs;
use clonestage_engine::Digest;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub fn wr(name: &str, offset: usize, data: &[u8], finish: bool) -> bs::WriteRequest {
    bs::WriteRequest {
        resource_name: name.into(),
        write_offset: offset as i64,
        finish_write: finish,
        data: data.to_vec(),
    }
}

/// `data` in messages of `chunk` bytes at offsets from `from`, as Bazel's uploader sends them
/// (the resource name only in the first).
pub fn chunks(
    name: &str,
    data: &[u8],
    chunk: usize,
    from: usize,
    finish: bool,
) -> Vec<bs::WriteRequest> {
    let pieces: Vec<&[u8]> = data.chunks(chunk).collect();
    let n = pieces.len();
    let mut off = from;
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let m = wr(if i == 0 { name } else { "" }, off, p, finish && i + 1 == n);
            off += p.len();
            m
        })
        .collect()
}

/// Compressible but not trivial: text-like lines with a counter.
pub fn blob_of(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n + 64);
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(
            format!("line {i:08} of a generated Swift-ish source file\n").as_bytes(),
        );
        i += 1;
    }
    v.truncate(n);
    v
}

/// The header of a zstd frame with a window of 2^`window_log` bytes and no content size.
pub fn frame_header(window_log: u8) -> Vec<u8> {
    // magic; descriptor: no content size, not single segment, no checksum, no dictionary;
    // window descriptor: exponent window_log - 10, mantissa 0 (RFC 8878 3.1.1.1.2)
    vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (window_log - 10) << 3]
}

/// A raw (stored) zstd block.
pub fn raw_block(data: &[u8], last: bool) -> Vec<u8> {
    let h = u32::from(last) | ((data.len() as u32) << 3);
    [&h.to_le_bytes()[..3], data].concat()
}

/// `blob` as one zstd frame of raw 128 KiB blocks with a 2^`window_log` window: the decoder
/// keeps up to a window of it until the frame ends, whatever the block type.
pub fn raw_frame(blob: &[u8], window_log: u8) -> Vec<u8> {
    let mut v = frame_header(window_log);
    let blocks: Vec<&[u8]> = blob.chunks(128 * 1024).collect();
    for (i, b) in blocks.iter().enumerate() {
        v.extend(raw_block(b, i + 1 == blocks.len()));
    }
    v
}

/// The resource name of an upload of `d` (compressed or not).
pub fn upload_name(uuid: &str, d: &Digest, zstd: bool) -> String {
    let kind = if zstd {
        "compressed-blobs/zstd"
    } else {
        "blobs"
    };
    format!("uploads/{uuid}/{kind}/{}/{}", d.hex(), d.size)
}

/// A Write kept open: send its messages one by one; the call's result comes from the handle.
pub fn open_write(
    c: &Clients,
) -> (
    mpsc::Sender<bs::WriteRequest>,
    JoinHandle<Result<bs::WriteResponse, tonic::Status>>,
) {
    let (tx, rx) = mpsc::channel(16);
    let mut bs = c.bs.clone();
    let call = tokio::spawn(async move {
        bs.write(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map(|r| r.into_inner())
    });
    (tx, call)
}

/// QueryWriteStatus as (committed_size, complete); panics if no answer comes in 10 s (a
/// hang, not slowness: the server answers it at once).
pub async fn query(c: &mut Clients, name: &str) -> (i64, bool) {
    let q = c.bs.query_write_status(bs::QueryWriteStatusRequest {
        resource_name: name.into(),
    });
    let r = tokio::time::timeout(Duration::from_secs(10), q)
        .await
        .unwrap_or_else(|_| panic!("QueryWriteStatus of {name} got no answer in 10 s"))
        .unwrap()
        .into_inner();
    (r.committed_size, r.complete)
}

pub async fn missing(c: &mut Clients, d: &Digest) -> bool {
    !c.cas
        .find_missing_blobs(pb::FindMissingBlobsRequest {
            blob_digests: vec![d.to_proto()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .missing_blob_digests
        .is_empty()
}

/// Files left in `<cache>/tmp` (abandoned uploads would show up here).
pub fn tmp_entries(s: &TestServer) -> Vec<String> {
    std::fs::read_dir(s.cache().join("tmp"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
