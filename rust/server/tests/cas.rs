//! CAS and ByteStream: verification, batch limits, resumable writes, ranged reads, GetTree.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream as bs;
use clonestage_engine::Digest;
use common::bytestream::wr;
use common::*;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_missing_batch_update_and_read() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let a = b"alpha".to_vec();
    let b = b"bravo".to_vec();
    let (da, db) = (Digest::of_bytes(&a), Digest::of_bytes(&b));
    let missing = c
        .cas
        .find_missing_blobs(pb::FindMissingBlobsRequest {
            blob_digests: vec![da.to_proto(), db.to_proto(), Digest::EMPTY.to_proto()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .missing_blob_digests;
    assert_eq!(
        missing,
        vec![da.to_proto(), db.to_proto()],
        "the empty blob is never missing"
    );

    // One honest blob, one whose digest lies about its content, one whose size lies.
    let liar = Digest::of_bytes(b"something else");
    let short = pb::Digest {
        hash: db.hex(),
        size_bytes: 4,
    };
    let r = c
        .cas
        .batch_update_blobs(pb::BatchUpdateBlobsRequest {
            requests: vec![
                pb::batch_update_blobs_request::Request {
                    digest: Some(da.to_proto()),
                    data: a.clone(),
                    compressor: 0,
                },
                pb::batch_update_blobs_request::Request {
                    digest: Some(pb::Digest {
                        hash: liar.hex(),
                        size_bytes: 5,
                    }),
                    data: b.clone(),
                    compressor: 0,
                },
                pb::batch_update_blobs_request::Request {
                    digest: Some(short),
                    data: b.clone(),
                    compressor: 0,
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
    assert_eq!(
        codes,
        vec![
            0,
            Code::InvalidArgument as i32,
            Code::InvalidArgument as i32
        ]
    );
    assert!(
        r.responses[1]
            .status
            .as_ref()
            .unwrap()
            .message
            .contains("mismatch"),
        "{:?}",
        r.responses[1].status
    );

    let r = c
        .cas
        .batch_read_blobs(pb::BatchReadBlobsRequest {
            digests: vec![da.to_proto(), db.to_proto()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.responses[0].data, a);
    assert_eq!(
        r.responses[1].status.as_ref().unwrap().code,
        Code::NotFound as i32
    );

    // A malformed digest in the request is the request's fault.
    let err = c
        .cas
        .find_missing_blobs(pb::FindMissingBlobsRequest {
            blob_digests: vec![pb::Digest {
                hash: "xyz".into(),
                size_bytes: 1,
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytestream_write_resumes_and_reads_ranges() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let blob: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let d = Digest::of_bytes(&blob);
    let name = format!("inst/uploads/7d1c0d6a-1/blobs/{}/{}", d.hex(), d.size);

    // First attempt: 1 MB, then the stream ends without finish_write.
    let first = vec![wr(&name, 0, &blob[..1_000_000], false)];
    let err = c.bs.write(tokio_stream::iter(first)).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let st =
        c.bs.query_write_status(bs::QueryWriteStatusRequest {
            resource_name: name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((st.committed_size, st.complete), (1_000_000, false));

    // Resuming at the wrong offset is ABORTED (a failed sequencer check: the client asks
    // QueryWriteStatus again) and loses nothing; at the committed size it continues.
    let err =
        c.bs.write(tokio_stream::iter(vec![wr(&name, 5, &blob[5..10], false)]))
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::Aborted, "{err}");
    let rest = vec![
        wr(&name, 1_000_000, &blob[1_000_000..2_000_000], false),
        wr("", 2_000_000, &blob[2_000_000..], true),
    ];
    let r =
        c.bs.write(tokio_stream::iter(rest))
            .await
            .unwrap()
            .into_inner();
    assert_eq!(r.committed_size, d.size as i64);
    let st =
        c.bs.query_write_status(bs::QueryWriteStatusRequest {
            resource_name: name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(st.complete);

    // Writing it again answers at once with the full size.
    let again = format!("uploads/other/blobs/{}/{}", d.hex(), d.size);
    let r =
        c.bs.write(tokio_stream::iter(vec![wr(&again, 0, &blob[..10], false)]))
            .await
            .unwrap()
            .into_inner();
    assert_eq!(r.committed_size, d.size as i64);

    // Ranged read.
    let mut stream =
        c.bs.read(bs::ReadRequest {
            resource_name: format!("inst/blobs/{}/{}", d.hex(), d.size),
            read_offset: 999_990,
            read_limit: 1_500_000,
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        got.extend(m.data);
    }
    assert_eq!(got, &blob[999_990..2_499_990]);

    // Content that does not hash to the name's digest is refused and not stored.
    let bad = Digest::of_bytes(b"12345");
    let name = format!("uploads/u2/blobs/{}/5", bad.hex());
    let err =
        c.bs.write(tokio_stream::iter(vec![wr(&name, 0, b"54321", true)]))
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    // Too many bytes.
    let err =
        c.bs.write(tokio_stream::iter(vec![wr(&name, 0, b"123456", true)]))
            .await
            .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    let err =
        c.bs.read(bs::ReadRequest {
            resource_name: format!("blobs/{}/5", bad.hex()),
            read_offset: 0,
            read_limit: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_tree_returns_every_directory() {
    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let f = c.upload(&[b"x".to_vec()]).await[0];
    let leaf = pb::Directory {
        files: vec![file("x", f, false)],
        ..Default::default()
    };
    let ld = c.upload(&[encode(&leaf)]).await[0];
    let mid = pb::Directory {
        directories: vec![dir("leaf", ld)],
        ..Default::default()
    };
    let md = c.upload(&[encode(&mid)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("a", md), dir("b", ld)],
        ..Default::default()
    };
    let rd = c.upload(&[encode(&root)]).await[0];
    let mut stream = c
        .cas
        .get_tree(pb::GetTreeRequest {
            root_digest: Some(rd.to_proto()),
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut dirs = Vec::new();
    while let Some(page) = stream.message().await.unwrap() {
        assert!(page.directories.len() <= 2);
        dirs.extend(page.directories);
    }
    assert_eq!(
        dirs,
        vec![root, mid, leaf],
        "breadth-first, each directory once"
    );
    let missing = Digest::of_bytes(b"no such dir");
    let err = c
        .cas
        .get_tree(pb::GetTreeRequest {
            root_digest: Some(missing.to_proto()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_missing_blobs_over_the_message_limit_is_out_of_range_naming_it() {
    // Issue 23, item 5: a FindMissingBlobs over the 16 MiB a message may carry is refused by
    // tonic before any handler runs, with OUT_OF_RANGE (which Bazel does not retry:
    // RemoteRetrier.RETRIABLE_GRPC_ERRORS) and a message naming the limit in bytes. Bazel
    // never sends one that large: it splits at maxMissingBlobsDigestsPerMessage, about 14,000
    // SHA-256 digests (1 MiB). docs/reliability.md, "Limits".
    let mut s = TestServer::start().await;
    let c = s.clients().await;
    let mut cas = c
        .cas
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    let digests = |n: u32| -> Vec<pb::Digest> {
        (0..n)
            .map(|i| Digest::of_bytes(&i.to_le_bytes()).to_proto())
            .collect()
    };
    // 200,000 digests (about 15 MB) fit, and every one is reported missing.
    let missing = cas
        .find_missing_blobs(pb::FindMissingBlobsRequest {
            blob_digests: digests(200_000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .missing_blob_digests;
    assert_eq!(missing.len(), 200_000);
    // 250,000 (about 18.5 MB) do not.
    let err = cas
        .find_missing_blobs(pb::FindMissingBlobsRequest {
            blob_digests: digests(250_000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(
        err.message().contains(&format!(
            "the limit is: {} bytes",
            clonestage_server::MAX_MESSAGE_SIZE
        )),
        "{}",
        err.message()
    );
    // The server is fine afterwards.
    let mut c = s.clients().await;
    c.upload(&[b"after".to_vec()]).await;
    s.stop().await;
}
