//! Test harness: a server on a temp cache (in-process), REAPI clients over its unix socket and
//! its TCP port, helpers to upload trees and actions, and the spawn wrapper (`$CLONESTAGE_SPAWN`
//! or built once from ../cc with g++).
#![allow(dead_code)]

pub mod bytestream;
pub mod fake_upstream;
pub mod loop_mount;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream::byte_stream_client::ByteStreamClient;
use bazel_remote_apis::google::longrunning::{operation, Operation};
use clonestage_engine::Digest;
use clonestage_server::{ServeOptions, ServerHandle};
use hyper_util::rt::TokioIo;
use pb::action_cache_client::ActionCacheClient;
use pb::capabilities_client::CapabilitiesClient;
use pb::content_addressable_storage_client::ContentAddressableStorageClient;
use pb::execution_client::ExecutionClient;
use prost::Message;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// The wrapper binary: `$CLONESTAGE_SPAWN`, else built from the C++ sources in cc/.
pub fn spawn_wrapper() -> PathBuf {
    static W: OnceLock<PathBuf> = OnceLock::new();
    W.get_or_init(|| {
        if let Some(p) = std::env::var_os("CLONESTAGE_SPAWN").filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        let cc = repo.join("cc");
        let mut srcs: Vec<PathBuf> = std::fs::read_dir(&cc)
            .expect("cc/ sources")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "cc"))
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy().to_string();
                if cfg!(target_os = "macos") {
                    !n.ends_with("-linux.cc")
                } else {
                    !n.ends_with("-darwin.cc")
                }
            })
            .collect();
        srcs.sort();
        let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clonestage-spawn");
        std::fs::create_dir_all(&out_dir).unwrap();
        let out = out_dir.join("clonestage-spawn");
        let newest_src = srcs
            .iter()
            .chain(
                std::fs::read_dir(&cc)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
            .max()
            .unwrap();
        if std::fs::metadata(&out)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= newest_src)
        {
            return out;
        }
        let tmp = out_dir.join(format!("clonestage-spawn.{}", std::process::id()));
        let st = std::process::Command::new(std::env::var("CXX").unwrap_or_else(|_| "g++".into()))
            .args(["-std=c++17", "-O2", "-I"])
            .arg(&repo)
            .arg("-o")
            .arg(&tmp)
            .args(&srcs)
            .status()
            .expect("run g++ to build clonestage-spawn (or set CLONESTAGE_SPAWN)");
        assert!(
            st.success(),
            "building clonestage-spawn from {} failed",
            cc.display()
        );
        std::fs::rename(&tmp, &out).unwrap();
        out
    })
    .clone()
}

pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub handle: Option<ServerHandle>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with_jobs(2).await
    }

    pub async fn start_with_jobs(jobs: usize) -> TestServer {
        let dir = tempfile::Builder::new()
            .prefix("cs-srv")
            .tempdir_in("/tmp")
            .unwrap();
        let handle = clonestage_server::start(Self::opts(dir.path(), jobs))
            .await
            .expect("server starts");
        TestServer {
            dir,
            handle: Some(handle),
        }
    }

    /// A server on a fresh temp cache with `upstream` behind it.
    pub async fn start_upstream(upstream: clonestage_server::UpstreamOptions) -> TestServer {
        let dir = tempfile::Builder::new()
            .prefix("cs-srv")
            .tempdir_in("/tmp")
            .unwrap();
        let mut opts = Self::opts(dir.path(), 2);
        opts.upstream = Some(upstream);
        let handle = clonestage_server::start(opts).await.expect("server starts");
        TestServer {
            dir,
            handle: Some(handle),
        }
    }

    /// Start again on the same cache (after `stop`), with `upstream`.
    pub async fn restart(&mut self, upstream: Option<clonestage_server::UpstreamOptions>) {
        let mut opts = Self::opts(self.dir.path(), 2);
        opts.upstream = upstream;
        self.handle = Some(
            clonestage_server::start(opts)
                .await
                .expect("server restarts"),
        );
    }

    pub fn opts(dir: &Path, jobs: usize) -> ServeOptions {
        ServeOptions {
            cache_dir: dir.join("cache"),
            port: None,
            jobs,
            spawn: Some(spawn_wrapper()),
            limits: Default::default(),
            max_size: None,
            evict_every: None,
            upstream: None,
            pool_copies: clonestage_engine::stage::PoolBounds::default().copies,
            shared_dirs: Vec::new(),
            code: Default::default(),
        }
    }

    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    pub fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().unwrap()
    }

    /// Wait until no action or cleanup is running (work dirs removed, counters written).
    pub async fn idle(&self) {
        let t0 = std::time::Instant::now();
        while self.handle().running_actions() > 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "server never became idle"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub async fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown(Duration::from_secs(10), std::future::pending())
                .await
                .unwrap();
        }
    }

    pub async fn unix_channel(&self) -> Channel {
        let path = self.handle().socket();
        Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .expect("connect over the unix socket")
    }

    pub async fn tcp_channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://127.0.0.1:{}", self.handle().tcp_port()))
            .unwrap()
            .connect()
            .await
            .expect("connect over TCP")
    }

    pub async fn clients(&self) -> Clients {
        Clients::new(self.unix_channel().await)
    }
}

pub struct Clients {
    pub cas: ContentAddressableStorageClient<Channel>,
    pub bs: ByteStreamClient<Channel>,
    pub ac: ActionCacheClient<Channel>,
    pub exec: ExecutionClient<Channel>,
    pub caps: CapabilitiesClient<Channel>,
}

impl Clients {
    pub fn new(ch: Channel) -> Clients {
        Clients {
            cas: ContentAddressableStorageClient::new(ch.clone()),
            bs: ByteStreamClient::new(ch.clone()),
            ac: ActionCacheClient::new(ch.clone()),
            exec: ExecutionClient::new(ch.clone()),
            caps: CapabilitiesClient::new(ch),
        }
    }

    /// Upload blobs with BatchUpdateBlobs; every one must be accepted.
    pub async fn upload(&mut self, blobs: &[Vec<u8>]) -> Vec<Digest> {
        let reqs: Vec<_> = blobs
            .iter()
            .map(|b| pb::batch_update_blobs_request::Request {
                digest: Some(Digest::of_bytes(b).to_proto()),
                data: b.clone(),
                compressor: 0,
            })
            .collect();
        let r = self
            .cas
            .batch_update_blobs(pb::BatchUpdateBlobsRequest {
                requests: reqs,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        for resp in &r.responses {
            assert_eq!(resp.status.as_ref().unwrap().code, 0, "{:?}", resp.status);
        }
        blobs.iter().map(|b| Digest::of_bytes(b)).collect()
    }

    pub async fn read(&mut self, d: &Digest) -> Vec<u8> {
        let r = self
            .cas
            .batch_read_blobs(pb::BatchReadBlobsRequest {
                digests: vec![d.to_proto()],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.responses[0].status.as_ref().unwrap().code,
            0,
            "read {d}: {:?}",
            r.responses[0].status
        );
        r.responses[0].data.clone()
    }

    pub async fn read_proto(&mut self, d: &pb::Digest) -> Vec<u8> {
        self.read(&Digest::from_proto(d).unwrap()).await
    }

    /// GetActionResult for `action` (no inlining): the cached result, or the RPC error.
    pub async fn cached_result(
        &mut self,
        action: Digest,
    ) -> Result<pb::ActionResult, tonic::Status> {
        self.ac
            .get_action_result(pb::GetActionResultRequest {
                action_digest: Some(action.to_proto()),
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner())
    }

    /// Execute and follow the stream to the final operation; returns it and the response.
    pub async fn execute(
        &mut self,
        action: Digest,
        skip_cache_lookup: bool,
    ) -> (Operation, pb::ExecuteResponse) {
        let mut s = self
            .exec
            .execute(pb::ExecuteRequest {
                action_digest: Some(action.to_proto()),
                skip_cache_lookup,
                ..Default::default()
            })
            .await
            .expect("Execute accepted")
            .into_inner();
        let mut last = None;
        while let Some(op) = s.message().await.expect("operation stream") {
            last = Some(op);
        }
        let op = last.expect("at least one operation");
        assert!(op.done, "last operation is done");
        let resp = response_of(&op);
        (op, resp)
    }
}

pub fn response_of(op: &Operation) -> pb::ExecuteResponse {
    match &op.result {
        Some(operation::Result::Response(any)) => {
            assert_eq!(
                any.type_url,
                "type.googleapis.com/build.bazel.remote.execution.v2.ExecuteResponse"
            );
            pb::ExecuteResponse::decode(any.value.as_slice()).unwrap()
        }
        other => panic!("operation has no response: {other:?}"),
    }
}

pub fn file(name: &str, d: Digest, exec: bool) -> pb::FileNode {
    pb::FileNode {
        name: name.into(),
        digest: Some(d.to_proto()),
        is_executable: exec,
        node_properties: None,
    }
}

pub fn dir(name: &str, d: Digest) -> pb::DirectoryNode {
    pb::DirectoryNode {
        name: name.into(),
        digest: Some(d.to_proto()),
    }
}

pub fn encode<M: Message>(m: &M) -> Vec<u8> {
    m.encode_to_vec()
}

/// A `/bin/sh -c SCRIPT` command with a PATH.
pub fn sh(script: &str) -> pb::Command {
    pb::Command {
        arguments: vec!["/bin/sh".into(), "-c".into(), script.into()],
        environment_variables: vec![pb::command::EnvironmentVariable {
            name: "PATH".into(),
            value: "/usr/bin:/bin".into(),
        }],
        ..Default::default()
    }
}

/// Upload `cmd`, an Action over `input_root` and return the action digest.
pub async fn upload_action(
    c: &mut Clients,
    cmd: &pb::Command,
    input_root: Digest,
    timeout_s: Option<i64>,
    do_not_cache: bool,
) -> Digest {
    let cd = c.upload(&[encode(cmd)]).await[0];
    let action = pb::Action {
        command_digest: Some(cd.to_proto()),
        input_root_digest: Some(input_root.to_proto()),
        timeout: timeout_s.map(|s| bazel_remote_apis::google::protobuf::Duration {
            seconds: s,
            nanos: 0,
        }),
        do_not_cache,
        ..Default::default()
    };
    c.upload(&[encode(&action)]).await[0]
}

/// Wait (up to 20 s, else fail) for an action to create `p`: how tests see an action reach a
/// point.
pub async fn wait_file(p: &Path) {
    let t0 = std::time::Instant::now();
    while !p.exists() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{} never appeared",
            p.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Upload an input root holding one file, `pkg/in.txt` with `content`.
pub async fn one_file_root(c: &mut Clients, content: &[u8]) -> Digest {
    let input = c.upload(&[content.to_vec()]).await[0];
    let pkg = pb::Directory {
        files: vec![file("in.txt", input, false)],
        ..Default::default()
    };
    let pkg_d = c.upload(&[encode(&pkg)]).await[0];
    let root = pb::Directory {
        directories: vec![dir("pkg", pkg_d)],
        ..Default::default()
    };
    c.upload(&[encode(&root)]).await[0]
}

/// Upload an empty input root.
pub async fn empty_root(c: &mut Clients) -> Digest {
    let _ = c;
    Digest::EMPTY
}

/// Entries left in the cache's work dir (must be none between actions).
/// Work dirs left after the janitor (which removes them off the response path, when no
/// action runs) had up to 10 s.
/// Work dirs some action used, once the janitor had time to remove them (the ones the server
/// keeps ready, empty but for empty stdout and stderr files, are not counted).
pub async fn work_entries_after_cleanup(cache: &Path) -> Vec<String> {
    let t0 = std::time::Instant::now();
    while !used_work_entries(cache).is_empty() && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    used_work_entries(cache)
}

/// Entries of `<cache>/work/` other than the work dirs this process's server keeps ready:
/// named `<our pid>-<n>` and holding exactly an empty stdout and stderr. (The server fills
/// them in `<cache>/work-making/` and renames them in whole, so one being made is not here; one
/// a killed server left is another pid's and counts.)
pub fn used_work_entries(cache: &Path) -> Vec<String> {
    let ours = |n: &str| {
        n.split_once('-').is_some_and(|(pid, seq)| {
            pid == std::process::id().to_string() && seq.parse::<u64>().is_ok()
        })
    };
    work_entries(cache)
        .into_iter()
        .filter(|n| !(ours(n) && clonestage_server::is_ready_work_dir(&cache.join("work").join(n))))
        .collect()
}

pub fn work_entries(cache: &Path) -> Vec<String> {
    std::fs::read_dir(cache.join("work"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
