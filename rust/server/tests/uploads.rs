//! ByteStream upload sessions under abuse (issue 23): abandoned compressed uploads hold no
//! decoder, decoders' memory is capped, an idle stream blocks neither QueryWriteStatus nor a
//! second Write of its name, sessions are capped per client, and nothing may follow
//! finish_write.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::Digest;
use common::bytestream::*;
use common::*;
use prost::Message;
use std::time::{Duration, Instant};
use tonic::Code;

const MIB: usize = 1 << 20;

/// An upload of `size` bytes the CAS will never get (the hash is made up): enough to open a
/// session whose decoder may hold up to `size` bytes.
fn fake_name(uuid: &str, size: usize) -> String {
    format!(
        "uploads/{uuid}/compressed-blobs/zstd/{}/{size}",
        "ab".repeat(32)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_compressed_upload_keeps_its_bytes_but_no_decoder() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blob = blob_of(4 * MIB);
    let d = Digest::of_bytes(&blob);
    let name = upload_name("abandoned", &d, true);
    // A 128 MiB window: the decoder holds all 4 MiB decoded so far while the frame is open.
    let z = raw_frame(&blob, 27);
    let cut = z.len() - 64 * 1024;
    let e =
        c.bs.write(tokio_stream::iter(chunks(
            &name,
            &z[..cut],
            64 * 1024,
            0,
            false,
        )))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e}");
    let g = s.handle().uploads();
    assert_eq!(g.sessions, 1, "the session stays for a resumed Write");
    assert_eq!(g.decoders, 0, "but no decoder: {g:?}");
    // The committed size is what reached the temp file (nothing: the window held it all), and
    // a Write from there with a new zstd stream completes the blob.
    let (committed, _) = query(&mut c, &name).await;
    assert_eq!(committed, 0);
    let r =
        c.bs.write(tokio_stream::iter(chunks(
            &name,
            &raw_frame(&blob, 20),
            64 * 1024,
            0,
            true,
        )))
        .await
        .unwrap()
        .into_inner();
    assert!(r.committed_size > 0);
    assert!(!missing(&mut c, &d).await);
    assert_eq!(s.handle().uploads().sessions, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_and_a_second_write_answer_while_a_write_of_the_name_is_idle() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    for zstd in [false, true] {
        let blob = blob_of(3 * MIB + usize::from(zstd));
        let d = Digest::of_bytes(&blob);
        let name = upload_name(if zstd { "idle-z" } else { "idle" }, &d, zstd);
        // The first Write sends a part and then nothing, its stream left open. (Compressed: a
        // frame with a 128 KiB window, so most of the part reaches the temp file.)
        let first = if zstd {
            raw_frame(&blob, 17)[..MIB].to_vec()
        } else {
            blob[..MIB].to_vec()
        };
        let (tx, call_a) = open_write(&c);
        tx.send(wr(&name, 0, &first, false)).await.unwrap();
        // QueryWriteStatus answers (each call within its 10 s) once the part is written.
        let t0 = Instant::now();
        let committed = loop {
            let (n, complete) = query(&mut c, &name).await;
            assert!(!complete);
            if n > 0 {
                break n as usize;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the part never landed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(committed <= MIB, "{committed}");
        // A second Write of the name resumes there (a new zstd stream from that uncompressed
        // offset when compressed) and completes while the first stream is still open.
        let rest = if zstd {
            raw_frame(&blob[committed..], 20)
        } else {
            blob[committed..].to_vec()
        };
        let second = c.bs.write(tokio_stream::iter(chunks(
            &name,
            &rest,
            256 * 1024,
            committed,
            true,
        )));
        let r = tokio::time::timeout(Duration::from_secs(30), second)
            .await
            .expect("a second Write of the name got no answer in 30 s")
            .unwrap()
            .into_inner();
        let want = if zstd {
            committed + rest.len()
        } else {
            blob.len()
        };
        assert_eq!(r.committed_size, want as i64);
        assert!(!missing(&mut c, &d).await);
        // The first stream was taken over: its call ends with ABORTED.
        let a = tokio::time::timeout(Duration::from_secs(30), call_a)
            .await
            .expect("the first Write ends")
            .unwrap();
        assert_eq!(a.unwrap_err().code(), Code::Aborted);
        drop(tx);
    }
    assert_eq!(s.handle().uploads().sessions, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_after_finish_write_is_invalid_argument_and_stores_nothing() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let small = blob_of(1000);
    let big = blob_of(600 * 1024);
    let cases = [
        (
            "one message",
            small.clone(),
            chunks("", &small, 1000, 0, true),
        ),
        (
            "streamed",
            big.clone(),
            chunks("", &big, 256 * 1024, 0, true),
        ),
        (
            "compressed",
            big.clone(),
            chunks("", &raw_frame(&big, 20), 256 * 1024, 0, true),
        ),
    ];
    for (what, blob, mut msgs) in cases {
        let d = Digest::of_bytes(&blob);
        msgs[0].resource_name = upload_name("after", &d, what == "compressed");
        let end = msgs.last().unwrap().write_offset as usize + msgs.last().unwrap().data.len();
        msgs.push(wr("", end, b"more", false));
        let e = c.bs.write(tokio_stream::iter(msgs)).await.expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e}");
        assert!(e.message().contains("finish_write"), "{what}: {e}");
        assert!(missing(&mut c, &d).await, "{what}: stored anyway");
    }
    assert_eq!(s.handle().uploads().sessions, 0);
    assert!(tmp_entries(&s).is_empty(), "{:?}", tmp_entries(&s));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decoder_memory_is_capped_and_an_idle_decoder_gives_way() {
    let mut s = TestServer::start().await;
    let c = s.clients().await;
    // Two uploads whose frames may each hold 120 MiB (128 MiB windows): together over the cap.
    let size = 120 * MIB;
    let opening = [frame_header(27), raw_block(&[7u8; 128 * 1024], false)].concat();
    let (tx_a, call_a) = open_write(&c);
    tx_a.send(wr(&fake_name("cap-a", size), 0, &opening, false))
        .await
        .unwrap();
    let t0 = Instant::now();
    while s.handle().uploads().decoders == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "a's decoder never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // b waits for room; once a has been idle long enough, a gives way and ends with ABORTED.
    let (tx_b, call_b) = open_write(&c);
    tx_b.send(wr(&fake_name("cap-b", size), 0, &opening, false))
        .await
        .unwrap();
    let a = tokio::time::timeout(Duration::from_secs(60), call_a)
        .await
        .expect("a was never asked to give way")
        .unwrap()
        .unwrap_err();
    assert_eq!(a.code(), Code::Aborted, "{a}");
    assert!(a.message().contains("memory"), "{a}");
    let t0 = Instant::now();
    loop {
        let g = s.handle().uploads();
        assert!(g.decoders <= 1, "{g:?}");
        if g.decoders == 1 && g.decoder_bytes > size as u64 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "b never got room: {g:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // b goes on where it was; its end (without finish_write) gives the memory back.
    tx_b.send(wr("", opening.len(), &raw_block(b"x", false), false))
        .await
        .unwrap();
    drop(tx_b);
    let b = call_b.await.unwrap().unwrap_err();
    assert_eq!(b.code(), Code::Aborted, "{b}");
    assert!(b.message().contains("before finish_write"), "{b}");
    let g = s.handle().uploads();
    assert_eq!((g.decoders, g.decoder_bytes), (0, 0), "{g:?}");
    drop(tx_a);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_per_client() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blob = blob_of(2048);
    let d = Digest::of_bytes(&blob);
    let cap = clonestage_server::UPLOAD_SESSIONS_PER_CLIENT;
    // One Bazel command leaves cap + 1 uploads unfinished: its oldest is pushed out.
    for i in 0..=cap {
        let mut req = tonic::Request::new(tokio_stream::iter(vec![wr(
            &upload_name(&format!("a-{i}"), &d, false),
            0,
            &blob[..1024],
            false,
        )]));
        let m = pb::RequestMetadata {
            tool_invocation_id: "build-a".into(),
            ..Default::default()
        };
        req.metadata_mut().insert_bin(
            "build.bazel.remote.execution.v2.requestmetadata-bin",
            tonic::metadata::MetadataValue::from_bytes(&m.encode_to_vec()),
        );
        let e = c.bs.write(req).await.unwrap_err();
        assert_eq!(e.code(), Code::Aborted, "{e}");
    }
    assert_eq!(s.handle().uploads().sessions, cap);
    assert_eq!(query(&mut c, &upload_name("a-0", &d, false)).await.0, 0);
    let last = upload_name(&format!("a-{cap}"), &d, false);
    assert_eq!(query(&mut c, &last).await.0, 1024);
    // Another client's upload has room of its own.
    let other = upload_name("b-0", &d, false);
    let e =
        c.bs.write(tokio_stream::iter(vec![wr(
            &other,
            0,
            &blob[..1024],
            false,
        )]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e}");
    assert_eq!(s.handle().uploads().sessions, cap + 1);
    s.stop().await;
}
