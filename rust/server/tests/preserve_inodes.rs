//! `serve --preserve-inodes macho` through Execute, with a cache on the XFS loop mount
//! (`CLONESTAGE_TEST_XFS`; with `CLONESTAGE_REQUIRE_FS=1` a missing mount fails): an action's
//! Mach-O tool is the cache's inode (its 0o555 twin) while its header is a reflink, the
//! action's metadata counts the linked code, and with a minimum link age and no pooled copy
//! yet the tool is cloned and counted instead.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::stage::{CodePolicy, PreserveInodes};
use clonestage_engine::Digest;
use common::loop_mount::loop_mount;
use common::*;
use prost::Message;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

fn xfs() -> Option<std::path::PathBuf> {
    loop_mount("CLONESTAGE_TEST_XFS")
}

fn tool() -> Vec<u8> {
    let mut v = vec![3u8; 16384];
    v[..4].copy_from_slice(&0xfeed_facf_u32.to_le_bytes());
    v[12..16].copy_from_slice(&2u32.to_le_bytes()); // MH_EXECUTE
    v
}

async fn server(code: CodePolicy) -> TestServer {
    let dir = tempfile::Builder::new()
        .prefix("cs-srv")
        .tempdir_in(xfs().unwrap())
        .unwrap();
    let mut opts = TestServer::opts(dir.path(), 2);
    opts.code = code;
    let handle = clonestage_server::start(opts).await.expect("server starts");
    TestServer {
        dir,
        handle: Some(handle),
    }
}

/// bin/tool (Mach-O, executable) and bin/a.h; the root digest.
async fn root(c: &mut Clients) -> Digest {
    let ds = c.upload(&[tool(), b"// a\n".to_vec()]).await;
    let bin = pb::Directory {
        files: vec![file("a.h", ds[1], false), file("tool", ds[0], true)],
        ..Default::default()
    };
    let b = c.upload(&[encode(&bin)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("bin", b)],
        ..Default::default()
    };
    c.upload(&[encode(&root)]).await[0]
}

/// Run `stat -c %i bin/tool bin/a.h` in the root: (the two inodes, code_linked, code_cloned).
async fn inodes(c: &mut Clients, root: Digest, nonce: &str) -> (Vec<u64>, f64, f64) {
    let mut cmd = sh(&format!(
        "echo {nonce} >/dev/null; stat -c %i bin/tool bin/a.h > out.txt"
    ));
    cmd.output_paths = vec!["out.txt".into()];
    let a = upload_action(c, &cmd, root, Some(30), true).await;
    let (_, resp) = c.execute(a, true).await;
    let r = resp.result.as_ref().expect("a result");
    assert_eq!(r.exit_code, 0, "{resp:?}");
    let out = r.output_files.iter().find(|f| f.path == "out.txt").unwrap();
    let d = Digest::from_proto(out.digest.as_ref().unwrap()).unwrap();
    let text = String::from_utf8(c.read(&d).await).unwrap();
    let m = r.execution_metadata.as_ref().unwrap();
    let st = prost_types::Struct::decode(m.auxiliary_metadata[0].value.as_slice()).unwrap();
    let num = |k: &str| match st.fields[k].kind {
        Some(prost_types::value::Kind::NumberValue(n)) => n,
        ref other => panic!("{k} is {other:?}"),
    };
    let inos = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    (inos, num("code_linked"), num("code_cloned"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actions_mach_o_tool_is_the_caches_inode_under_macho() {
    if xfs().is_none() {
        return;
    }
    let mut s =
        server(CodePolicy::new(PreserveInodes::Macho).with_min_link_age(Duration::ZERO)).await;
    let mut c = s.clients().await;
    let r = root(&mut c).await;
    let (inos, linked, cloned) = inodes(&mut c, r, "a").await;
    let d = Digest::of_bytes(&tool());
    let twin = s
        .cache()
        .join("exec")
        .join(&d.hex()[..2])
        .join(d.file_name());
    assert_eq!(
        inos[0],
        std::fs::metadata(&twin).unwrap().ino(),
        "bin/tool is the cache's 0o555 inode"
    );
    let h = Digest::of_bytes(b"// a\n");
    let blob = s
        .cache()
        .join("blobs")
        .join(&h.hex()[..2])
        .join(h.file_name());
    assert_ne!(
        inos[1],
        std::fs::metadata(&blob).unwrap().ino(),
        "bin/a.h is a reflink"
    );
    assert_eq!((linked, cloned), (1.0, 0.0));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_minimum_link_age_the_first_action_gets_a_clone_of_its_tool() {
    if xfs().is_none() {
        return;
    }
    let policy = CodePolicy::new(PreserveInodes::Macho).with_min_link_age(Duration::from_secs(60));
    let mut s = server(policy).await;
    let mut c = s.clients().await;
    let r = root(&mut c).await;
    let (inos, linked, cloned) = inodes(&mut c, r, "b").await;
    let d = Digest::of_bytes(&tool());
    let blob = s
        .cache()
        .join("blobs")
        .join(&d.hex()[..2])
        .join(d.file_name());
    assert_ne!(inos[0], std::fs::metadata(&blob).unwrap().ino());
    assert_eq!((linked, cloned), (0.0, 1.0));
    s.stop().await;
}
