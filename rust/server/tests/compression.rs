//! zstd `compressed-blobs` over ByteStream and the batch calls, and the digest-function checks:
//! what Bazel 7+ sends with `--remote_cache_compression` and `--digest_function=...`.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream as bs;
use clonestage_engine::Digest;
use common::bytestream::*;
use common::*;
use ruzstd::encoding::{compress_to_vec, CompressionLevel};
use std::time::{Duration, Instant};
use tonic::Code;

const ZSTD: i32 = pb::compressor::Value::Zstd as i32;

fn zstd(data: &[u8]) -> Vec<u8> {
    compress_to_vec(data, CompressionLevel::Fastest)
}

fn unzstd(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut dec = ruzstd::decoding::StreamingDecoder::new(data).expect("a zstd frame");
    std::io::Read::read_to_end(&mut dec, &mut out).expect("a valid zstd frame");
    out
}

async fn read_all(
    c: &mut Clients,
    name: &str,
    offset: i64,
    limit: i64,
) -> Result<Vec<u8>, tonic::Status> {
    let mut stream =
        c.bs.read(bs::ReadRequest {
            resource_name: name.into(),
            read_offset: offset,
            read_limit: limit,
        })
        .await?
        .into_inner();
    let mut got = Vec::new();
    while let Some(m) = stream.message().await? {
        got.extend(m.data);
    }
    Ok(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_advertise_zstd_and_sha256_only() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let caps = c
        .caps
        .get_capabilities(pb::GetCapabilitiesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let cache = caps.cache_capabilities.unwrap();
    assert_eq!(cache.supported_compressors, vec![ZSTD]);
    assert_eq!(cache.supported_batch_update_compressors, vec![ZSTD]);
    let sha256 = pb::digest_function::Value::Sha256 as i32;
    assert_eq!(cache.digest_functions, vec![sha256]);
    let exec = caps.execution_capabilities.unwrap();
    assert_eq!(
        (exec.digest_function, exec.digest_functions),
        (sha256, vec![sha256])
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_write_then_read_compressed_and_plain() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blob = blob_of(3_000_000);
    let d = Digest::of_bytes(&blob);
    // Two frames back to back (a stream may hold several); 64 KiB messages.
    let mut z = zstd(&blob[..1_000_000]);
    z.extend(zstd(&blob[1_000_000..]));
    assert!(z.len() < blob.len() / 4, "test data should compress");
    let name = format!(
        "inst/uploads/9b2f/compressed-blobs/zstd/{}/{}",
        d.hex(),
        d.size
    );
    let r =
        c.bs.write(tokio_stream::iter(chunks(&name, &z, 64 * 1024, 0, true)))
            .await
            .unwrap()
            .into_inner();
    // Bazel's uploader accepts the compressed bytes it sent, or -1; never the blob's size.
    assert_eq!(r.committed_size, z.len() as i64);
    assert!(!missing(&mut c, &d).await);

    let plain = read_all(&mut c, &format!("inst/blobs/{}/{}", d.hex(), d.size), 0, 0)
        .await
        .unwrap();
    assert_eq!(plain, blob);
    let zname = format!("inst/compressed-blobs/zstd/{}/{}", d.hex(), d.size);
    // (The server may pick any level; it sends raw blocks, see bytestream::zstd.)
    let got = read_all(&mut c, &zname, 0, 0).await.unwrap();
    assert_eq!(unzstd(&got), blob);
    // read_offset is an offset into the uncompressed blob.
    let got = read_all(&mut c, &zname, 2_000_001, 0).await.unwrap();
    assert_eq!(unzstd(&got), &blob[2_000_001..]);
    let got = read_all(&mut c, &zname, d.size as i64, 0).await.unwrap();
    assert_eq!(unzstd(&got), b"");
    // A v2.3 name with the digest function.
    let got = read_all(
        &mut c,
        &format!("compressed-blobs/zstd/sha256/{}/{}", d.hex(), d.size),
        0,
        0,
    )
    .await
    .unwrap();
    assert_eq!(unzstd(&got), blob);
    // The spec: a compressed read with read_limit is INVALID_ARGUMENT; past the end OUT_OF_RANGE.
    let e = read_all(&mut c, &zname, 0, 10).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = read_all(&mut c, &zname, d.size as i64 + 1, 0)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e}");

    // A small blob (one message each way), and the empty blob.
    let small = b"small blob, compressed".to_vec();
    let ds = Digest::of_bytes(&small);
    let zs = zstd(&small);
    let n = format!(
        "uploads/u-small/compressed-blobs/zstd/{}/{}",
        ds.hex(),
        ds.size
    );
    let r =
        c.bs.write(tokio_stream::iter(vec![wr(&n, 0, &zs, true)]))
            .await
            .unwrap()
            .into_inner();
    assert_eq!(r.committed_size, zs.len() as i64);
    let got = read_all(
        &mut c,
        &format!("compressed-blobs/zstd/{}/{}", ds.hex(), ds.size),
        0,
        0,
    )
    .await
    .unwrap();
    assert_eq!(unzstd(&got), small);
    let got = read_all(
        &mut c,
        &format!("compressed-blobs/zstd/{}/0", Digest::EMPTY.hex()),
        0,
        0,
    )
    .await
    .unwrap();
    assert_eq!(unzstd(&got), b"");

    // Writing a blob the CAS holds answers at once; for a compressed upload with -1 (spec).
    let again = format!(
        "uploads/u-again/compressed-blobs/zstd/{}/{}",
        d.hex(),
        d.size
    );
    let r =
        c.bs.write(tokio_stream::iter(vec![wr(&again, 0, &z[..100], false)]))
            .await
            .unwrap()
            .into_inner();
    assert_eq!(r.committed_size, -1);
    let st =
        c.bs.query_write_status(bs::QueryWriteStatusRequest {
            resource_name: again,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(st.complete);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_upload_resumes_at_an_uncompressed_offset() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blob = blob_of(2_500_000);
    let d = Digest::of_bytes(&blob);
    let name = upload_name("3c5e", &d, true);
    // A frame with a 128 KiB window: the decoder writes out what lies beyond it as it goes.
    let z = raw_frame(&blob, 17);
    let cut = z.len() / 2 + 7; // mid-block
    let e =
        c.bs.write(tokio_stream::iter(chunks(
            &name,
            &z[..cut],
            16 * 1024,
            0,
            false,
        )))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e}");
    // The committed size counts uncompressed bytes in the temp file (REAPI: a resumed
    // compressed write starts at an uncompressed offset), not the compressed bytes sent.
    let (committed, complete) = query(&mut c, &name).await;
    assert!(!complete);
    assert!(
        committed > 0 && (committed as usize) < cut,
        "committed {committed} of {cut} compressed bytes sent"
    );
    let at = committed as usize;
    // Resuming anywhere else is ABORTED (the client asks again) and loses nothing.
    let rest = zstd(&blob[at..]);
    for wrong in [at - 1, at + 1] {
        let e =
            c.bs.write(tokio_stream::iter(vec![wr(
                &name,
                wrong,
                &rest[..100],
                false,
            )]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Aborted, "{e}");
    }
    assert_eq!(query(&mut c, &name).await, (committed, false));
    // Bazel's Chunker: a new zstd stream of the blob from the committed offset; the first
    // write_offset is that offset, later ones add the compressed bytes sent.
    let r =
        c.bs.write(tokio_stream::iter(chunks(
            &name,
            &rest,
            16 * 1024,
            at,
            true,
        )))
        .await
        .unwrap()
        .into_inner();
    // checkCommittedSize: the offset the stream reached.
    assert_eq!(r.committed_size, (at + rest.len()) as i64);
    assert_eq!(
        read_all(&mut c, &format!("blobs/{}/{}", d.hex(), d.size), 0, 0)
            .await
            .unwrap(),
        blob
    );
    assert!(
        tmp_entries(&s).is_empty(),
        "left in tmp: {:?}",
        tmp_entries(&s)
    );

    // A restart at offset 0 after a partial stream starts over.
    let blob2 = blob_of(700_000);
    let d2 = Digest::of_bytes(&blob2);
    let z2 = zstd(&blob2);
    let name2 = upload_name("3c5f", &d2, true);
    let _ =
        c.bs.write(tokio_stream::iter(chunks(
            &name2,
            &z2[..z2.len() / 3],
            8 * 1024,
            0,
            false,
        )))
        .await
        .unwrap_err();
    let r =
        c.bs.write(tokio_stream::iter(chunks(&name2, &z2, 8 * 1024, 0, true)))
            .await
            .unwrap()
            .into_inner();
    assert_eq!(r.committed_size, z2.len() as i64);
    assert!(!missing(&mut c, &d2).await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_compressed_uploads_are_refused_and_store_nothing() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blob = blob_of(400_000);
    let d = Digest::of_bytes(&blob);
    let z = zstd(&blob);

    // Decompresses fine, but to other bytes than the digest names: small and streamed paths.
    let other = blob_of(400_001);
    let mut liar = other.clone();
    liar.truncate(400_000);
    liar[123] ^= 1;
    let zl = zstd(&liar);
    let n = format!("uploads/a/compressed-blobs/zstd/{}/{}", d.hex(), d.size);
    let e =
        c.bs.write(tokio_stream::iter(chunks(&n, &zl, 32 * 1024, 0, true)))
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let small = b"tiny".to_vec();
    let ds = Digest::of_bytes(b"tinx");
    let n = format!("uploads/b/compressed-blobs/zstd/{}/4", ds.hex());
    let e =
        c.bs.write(tokio_stream::iter(vec![wr(&n, 0, &zstd(&small), true)]))
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(missing(&mut c, &ds).await);

    // Not zstd at all; a truncated frame; trailing garbage after the frame.
    for (what, data) in [
        ("not zstd", blob[..1000].to_vec()),
        ("truncated", z[..z.len() - 5].to_vec()),
        ("trailing", [z.clone(), b"garbage".to_vec()].concat()),
    ] {
        let n = format!(
            "uploads/c-{}/compressed-blobs/zstd/{}/{}",
            what.len(),
            d.hex(),
            d.size
        );
        let e =
            c.bs.write(tokio_stream::iter(chunks(&n, &data, 64 * 1024, 0, true)))
                .await
                .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e}");
    }
    // More bytes than the digest says (a frame of the blob plus one byte).
    let n = format!("uploads/d/compressed-blobs/zstd/{}/{}", d.hex(), d.size);
    let e =
        c.bs.write(tokio_stream::iter(chunks(
            &n,
            &zstd(&other),
            64 * 1024,
            0,
            true,
        )))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(missing(&mut c, &d).await);

    // Unknown compressors and malformed names.
    for name in [
        format!("uploads/e/compressed-blobs/deflate/{}/{}", d.hex(), d.size),
        format!("uploads/e/compressed-blobs/identity/{}/{}", d.hex(), d.size),
        format!(
            "uploads/e/compressed-blobs/zstd/blake3/{}/{}",
            d.hex(),
            d.size
        ),
        format!("uploads/e/compressed-blobs/{}/{}", d.hex(), d.size),
    ] {
        let e =
            c.bs.write(tokio_stream::iter(vec![wr(&name, 0, &z, true)]))
                .await
                .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name}: {e}");
        let q =
            c.bs.query_write_status(bs::QueryWriteStatusRequest {
                resource_name: name.clone(),
            })
            .await;
        assert_eq!(q.unwrap_err().code(), Code::InvalidArgument, "{name}");
    }
    for name in [
        format!("compressed-blobs/brotli/{}/{}", d.hex(), d.size),
        format!("compressed-blobs/zstd/{}/{}/extra", d.hex(), d.size),
    ] {
        let e = read_all(&mut c, &name, 0, 0).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name}: {e}");
    }
    // Nothing was stored; no upload left a temp file behind.
    assert!(missing(&mut c, &d).await);
    assert!(
        tmp_entries(&s).is_empty(),
        "left in tmp: {:?}",
        tmp_entries(&s)
    );
    let e = read_all(
        &mut c,
        &format!("compressed-blobs/zstd/{}/{}", d.hex(), d.size),
        0,
        0,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    s.stop().await;
}

/// A zstd frame of `blocks` RLE blocks of 128 KiB each: 4 bytes on the wire per 128 KiB out.
fn rle_bomb(blocks: usize) -> Vec<u8> {
    let mut v = vec![0x28, 0xb5, 0x2f, 0xfd]; // magic
    v.push(0x00); // descriptor: no content size, not single segment, no checksum, no dict
    v.push(0x58); // window descriptor: exponent 11 => 2 MiB window
    for i in 0..blocks {
        let last = (i + 1 == blocks) as u32;
        let h: u32 = last | (1 << 1) | ((128 * 1024) << 3); // RLE block of 128 KiB
        v.extend_from_slice(&h.to_le_bytes()[..3]);
        v.push(b'A');
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_bomb_is_refused_early() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    // 64 GiB of 'A' claimed to be 5 bytes: 2 MiB on the wire, in 1 MiB messages.
    let bomb = rle_bomb(512 * 1024);
    let d = Digest::of_bytes(b"AAAAA");
    for (name, size) in [
        (
            format!("uploads/bomb/compressed-blobs/zstd/{}/5", d.hex()),
            5u64,
        ),
        // A big declared size takes the streamed path; the bomb still stops at that size.
        (
            format!(
                "uploads/bomb2/compressed-blobs/zstd/{}/{}",
                Digest::of_bytes(&vec![b'A'; 3 << 20]).hex(),
                3u64 << 20
            ),
            3 << 20,
        ),
    ] {
        let t = Instant::now();
        let e =
            c.bs.write(tokio_stream::iter(chunks(&name, &bomb, 1 << 20, 0, true)))
                .await
                .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert!(e.message().contains(&size.to_string()), "{e}");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "took {:?}",
            t.elapsed()
        );
        let q =
            c.bs.query_write_status(bs::QueryWriteStatusRequest {
                resource_name: name.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (q.committed_size, q.complete),
            (0, false),
            "the session is gone"
        );
    }
    // In one small message (the inline path) as well.
    let small = rle_bomb(64);
    let n = format!("uploads/bomb3/compressed-blobs/zstd/{}/5", d.hex());
    let e =
        c.bs.write(tokio_stream::iter(vec![wr(&n, 0, &small, true)]))
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(missing(&mut c, &d).await);
    assert!(
        tmp_entries(&s).is_empty(),
        "left in tmp: {:?}",
        tmp_entries(&s)
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_calls_take_and_give_zstd() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let a = blob_of(50_000);
    let b = b"bravo".to_vec();
    let (da, db) = (Digest::of_bytes(&a), Digest::of_bytes(&b));
    let liar = Digest::of_bytes(b"other");
    let r = c
        .cas
        .batch_update_blobs(pb::BatchUpdateBlobsRequest {
            requests: vec![
                pb::batch_update_blobs_request::Request {
                    digest: Some(da.to_proto()),
                    data: zstd(&a),
                    compressor: ZSTD,
                },
                pb::batch_update_blobs_request::Request {
                    digest: Some(pb::Digest {
                        hash: liar.hex(),
                        size_bytes: 5,
                    }),
                    data: zstd(&b),
                    compressor: ZSTD,
                },
                pb::batch_update_blobs_request::Request {
                    digest: Some(Digest::of_bytes(b"AAAAA").to_proto()),
                    data: rle_bomb(100),
                    compressor: ZSTD,
                },
                pb::batch_update_blobs_request::Request {
                    digest: Some(db.to_proto()),
                    data: zstd(&b),
                    compressor: pb::compressor::Value::Deflate as i32,
                },
                pb::batch_update_blobs_request::Request {
                    digest: Some(db.to_proto()),
                    data: zstd(&b),
                    compressor: ZSTD,
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let codes: Vec<i32> = r
        .responses
        .iter()
        .map(|r| r.status.as_ref().unwrap().code)
        .collect();
    let bad = Code::InvalidArgument as i32;
    assert_eq!(codes, vec![0, bad, bad, bad, 0], "{:?}", r.responses);
    assert!(missing(&mut c, &Digest::of_bytes(b"AAAAA")).await);

    let r = c
        .cas
        .batch_read_blobs(pb::BatchReadBlobsRequest {
            digests: vec![da.to_proto(), db.to_proto()],
            acceptable_compressors: vec![ZSTD],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for (resp, want) in r.responses.iter().zip([&a, &b]) {
        assert_eq!(resp.status.as_ref().unwrap().code, 0);
        assert_eq!(resp.compressor, ZSTD);
        assert_eq!(&unzstd(&resp.data), want);
    }
    // A missing blob: NOT_FOUND, no data, so nothing claims to be compressed.
    let r = c
        .cas
        .batch_read_blobs(pb::BatchReadBlobsRequest {
            digests: vec![Digest::of_bytes(b"absent").to_proto()],
            acceptable_compressors: vec![ZSTD],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let resp = &r.responses[0];
    assert_eq!(resp.status.as_ref().unwrap().code, Code::NotFound as i32);
    assert_eq!((resp.compressor, resp.data.len()), (0, 0));
    // Without acceptable_compressors: identity.
    assert_eq!(c.read(&da).await, a);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_with_another_digest_function_is_refused() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blake3 = pb::digest_function::Value::Blake3 as i32;
    let d = Digest::of_bytes(b"x").to_proto();
    let check = |what: &str, r: Result<(), tonic::Status>| {
        let e = r.expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e}");
        assert!(
            e.message().contains("BLAKE3") && e.message().contains("SHA256"),
            "{what}: {e}"
        );
    };
    check(
        "FindMissingBlobs",
        c.cas
            .find_missing_blobs(pb::FindMissingBlobsRequest {
                blob_digests: vec![d.clone()],
                digest_function: blake3,
                ..Default::default()
            })
            .await
            .map(|_| ()),
    );
    check(
        "BatchUpdateBlobs",
        c.cas
            .batch_update_blobs(pb::BatchUpdateBlobsRequest {
                requests: vec![pb::batch_update_blobs_request::Request {
                    digest: Some(d.clone()),
                    data: b"x".to_vec(),
                    compressor: 0,
                }],
                digest_function: blake3,
                ..Default::default()
            })
            .await
            .map(|_| ()),
    );
    check(
        "BatchReadBlobs",
        c.cas
            .batch_read_blobs(pb::BatchReadBlobsRequest {
                digests: vec![d.clone()],
                digest_function: blake3,
                ..Default::default()
            })
            .await
            .map(|_| ()),
    );
    check(
        "GetTree",
        async {
            let mut st = c
                .cas
                .get_tree(pb::GetTreeRequest {
                    root_digest: Some(d.clone()),
                    digest_function: blake3,
                    ..Default::default()
                })
                .await?
                .into_inner();
            while st.message().await?.is_some() {}
            Ok(())
        }
        .await,
    );
    check(
        "GetActionResult",
        c.ac.get_action_result(pb::GetActionResultRequest {
            action_digest: Some(d.clone()),
            digest_function: blake3,
            ..Default::default()
        })
        .await
        .map(|_| ()),
    );
    check(
        "UpdateActionResult",
        c.ac.update_action_result(pb::UpdateActionResultRequest {
            action_digest: Some(d.clone()),
            action_result: Some(pb::ActionResult::default()),
            digest_function: blake3,
            ..Default::default()
        })
        .await
        .map(|_| ()),
    );
    check(
        "Execute",
        async {
            let mut st = c
                .exec
                .execute(pb::ExecuteRequest {
                    action_digest: Some(d.clone()),
                    digest_function: blake3,
                    ..Default::default()
                })
                .await?
                .into_inner();
            while st.message().await?.is_some() {}
            Ok(())
        }
        .await,
    );
    // ByteStream names carry the function as a segment (v2.3): blake3 is refused by name.
    let h = Digest::of_bytes(b"x").hex();
    for name in [
        format!("blobs/blake3/{h}/1"),
        format!("compressed-blobs/zstd/blake3/{h}/1"),
    ] {
        let e = read_all(&mut c, &name, 0, 0).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{name}: {e}");
        assert!(
            e.message().contains("blake3") && e.message().contains("SHA256"),
            "{e}"
        );
    }
    let name = format!("uploads/u/blobs/blake3/{h}/1");
    let e =
        c.bs.write(tokio_stream::iter(vec![wr(&name, 0, b"x", true)]))
            .await
            .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    // SHA256 named explicitly is fine.
    let r = c
        .cas
        .find_missing_blobs(pb::FindMissingBlobsRequest {
            blob_digests: vec![d.clone()],
            digest_function: pb::digest_function::Value::Sha256 as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().missing_blob_digests.len(), 1);
    s.stop().await;
}
