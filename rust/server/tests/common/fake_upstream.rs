//! An in-process fake upstream REAPI cache (ActionCache, CAS, ByteStream over tonic, in
//! memory) for the `upstream_*` tests: healthy, failing every call (`Mode::Errors`), lying
//! (`Mode::WrongBytes`: every blob read comes back with its first byte flipped), and
//! recording the metadata of every call and how often each RPC was called. `down_url` and
//! `stalled_url` give a closed port and one that accepts TCP and never answers.

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream as bs;
use bs::byte_stream_server::{ByteStream, ByteStreamServer};
use clonestage_engine::Digest;
use pb::action_cache_server::{ActionCache, ActionCacheServer};
use pb::content_addressable_storage_server::{
    ContentAddressableStorage, ContentAddressableStorageServer,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Healthy,
    /// Every call answers UNAVAILABLE.
    Errors,
    /// Blob reads return bytes that do not match their digest.
    WrongBytes,
}

#[derive(Default)]
pub struct Data {
    pub blobs: HashMap<Digest, Vec<u8>>,
    pub ac: HashMap<Digest, pb::ActionResult>,
    pub calls: HashMap<&'static str, usize>,
    /// `name: value` of every metadata entry of every call (ASCII ones).
    pub headers: Vec<String>,
}

#[derive(Clone)]
pub struct Fake {
    pub data: Arc<Mutex<Data>>,
    pub mode: Arc<Mutex<Mode>>,
}

impl Fake {
    fn enter<T>(&self, rpc: &'static str, r: &Request<T>) -> Result<Mode, Status> {
        let mut d = self.data.lock().unwrap();
        *d.calls.entry(rpc).or_default() += 1;
        for kv in r.metadata().iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                d.headers
                    .push(format!("{}: {}", k.as_str(), v.to_str().unwrap_or("")));
            }
        }
        let m = *self.mode.lock().unwrap();
        if m == Mode::Errors {
            return Err(Status::unavailable("the fake upstream is failing"));
        }
        Ok(m)
    }

    pub fn calls(&self, rpc: &str) -> usize {
        self.data
            .lock()
            .unwrap()
            .calls
            .get(rpc)
            .copied()
            .unwrap_or(0)
    }

    pub fn put_blob(&self, b: &[u8]) -> Digest {
        let d = Digest::of_bytes(b);
        self.data.lock().unwrap().blobs.insert(d, b.to_vec());
        d
    }

    pub fn result(&self, action: &Digest) -> Option<pb::ActionResult> {
        self.data.lock().unwrap().ac.get(action).cloned()
    }

    pub fn set_mode(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
    }

    fn read(&self, d: &Digest, m: Mode) -> Option<Vec<u8>> {
        let mut b = self.data.lock().unwrap().blobs.get(d).cloned()?;
        if m == Mode::WrongBytes && !b.is_empty() {
            b[0] ^= 0xff;
        }
        Some(b)
    }
}

fn dg(d: Option<&pb::Digest>) -> Result<Digest, Status> {
    d.and_then(|d| Digest::from_proto(d).ok())
        .ok_or_else(|| Status::invalid_argument("bad digest"))
}

fn ok() -> Option<bazel_remote_apis::google::rpc::Status> {
    Some(Default::default())
}

#[tonic::async_trait]
impl ActionCache for Fake {
    async fn get_action_result(
        &self,
        r: Request<pb::GetActionResultRequest>,
    ) -> Result<Response<pb::ActionResult>, Status> {
        self.enter("GetActionResult", &r)?;
        let d = dg(r.get_ref().action_digest.as_ref())?;
        match self.result(&d) {
            Some(res) => Ok(Response::new(res)),
            None => Err(Status::not_found("no result")),
        }
    }

    async fn update_action_result(
        &self,
        r: Request<pb::UpdateActionResultRequest>,
    ) -> Result<Response<pb::ActionResult>, Status> {
        self.enter("UpdateActionResult", &r)?;
        let req = r.into_inner();
        let d = dg(req.action_digest.as_ref())?;
        let res = req.action_result.unwrap_or_default();
        self.data.lock().unwrap().ac.insert(d, res.clone());
        Ok(Response::new(res))
    }
}

#[tonic::async_trait]
impl ContentAddressableStorage for Fake {
    async fn find_missing_blobs(
        &self,
        r: Request<pb::FindMissingBlobsRequest>,
    ) -> Result<Response<pb::FindMissingBlobsResponse>, Status> {
        self.enter("FindMissingBlobs", &r)?;
        let data = self.data.lock().unwrap();
        let missing = r
            .get_ref()
            .blob_digests
            .iter()
            .filter(|d| {
                Digest::from_proto(d)
                    .map_or(true, |d| !d.is_empty() && !data.blobs.contains_key(&d))
            })
            .cloned()
            .collect();
        Ok(Response::new(pb::FindMissingBlobsResponse {
            missing_blob_digests: missing,
        }))
    }

    async fn batch_update_blobs(
        &self,
        r: Request<pb::BatchUpdateBlobsRequest>,
    ) -> Result<Response<pb::BatchUpdateBlobsResponse>, Status> {
        self.enter("BatchUpdateBlobs", &r)?;
        let mut responses = Vec::new();
        for q in r.into_inner().requests {
            let d = dg(q.digest.as_ref())?;
            assert_eq!(
                Digest::of_bytes(&q.data),
                d,
                "clonestage uploaded wrong bytes"
            );
            self.data.lock().unwrap().blobs.insert(d, q.data);
            responses.push(pb::batch_update_blobs_response::Response {
                digest: Some(d.to_proto()),
                status: ok(),
            });
        }
        Ok(Response::new(pb::BatchUpdateBlobsResponse { responses }))
    }

    async fn batch_read_blobs(
        &self,
        r: Request<pb::BatchReadBlobsRequest>,
    ) -> Result<Response<pb::BatchReadBlobsResponse>, Status> {
        let m = self.enter("BatchReadBlobs", &r)?;
        let mut responses = Vec::new();
        for p in &r.get_ref().digests {
            let d = dg(Some(p))?;
            let (data, status) = match self.read(&d, m) {
                Some(b) => (b, ok()),
                None => (
                    vec![],
                    Some(bazel_remote_apis::google::rpc::Status {
                        code: tonic::Code::NotFound as i32,
                        ..Default::default()
                    }),
                ),
            };
            responses.push(pb::batch_read_blobs_response::Response {
                digest: Some(p.clone()),
                data,
                compressor: 0,
                status,
            });
        }
        Ok(Response::new(pb::BatchReadBlobsResponse { responses }))
    }

    type GetTreeStream = ReceiverStream<Result<pb::GetTreeResponse, Status>>;

    async fn get_tree(
        &self,
        _: Request<pb::GetTreeRequest>,
    ) -> Result<Response<Self::GetTreeStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn split_blob(
        &self,
        _: Request<pb::SplitBlobRequest>,
    ) -> Result<Response<pb::SplitBlobResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type GetChunkMappingStream = ReceiverStream<Result<pb::GetChunkMappingResponse, Status>>;

    async fn get_chunk_mapping(
        &self,
        _: Request<pb::GetChunkMappingRequest>,
    ) -> Result<Response<Self::GetChunkMappingStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn splice_blob(
        &self,
        _: Request<pb::SpliceBlobRequest>,
    ) -> Result<Response<pb::SpliceBlobResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn register_chunk_mapping(
        &self,
        _: Request<Streaming<pb::RegisterChunkMappingRequest>>,
    ) -> Result<Response<pb::RegisterChunkMappingResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// `[instance/]blobs/<hash>/<size>` or `.../uploads/<id>/blobs/<hash>/<size>`: the digest.
fn resource_digest(name: &str) -> Result<Digest, Status> {
    let parts: Vec<&str> = name.split('/').collect();
    let i = parts
        .iter()
        .rposition(|p| *p == "blobs")
        .ok_or_else(|| Status::invalid_argument(format!("resource {name}")))?;
    let (h, s) = (parts.get(i + 1), parts.get(i + 2));
    match (h, s.and_then(|s| s.parse::<i64>().ok())) {
        (Some(h), Some(s)) => {
            Digest::from_parts(h, s).map_err(|e| Status::invalid_argument(e.to_string()))
        }
        _ => Err(Status::invalid_argument(format!("resource {name}"))),
    }
}

#[tonic::async_trait]
impl ByteStream for Fake {
    type ReadStream = ReceiverStream<Result<bs::ReadResponse, Status>>;

    async fn read(
        &self,
        r: Request<bs::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let m = self.enter("Read", &r)?;
        let d = resource_digest(&r.get_ref().resource_name)?;
        let data = self
            .read(&d, m)
            .ok_or_else(|| Status::not_found(format!("no blob {d}")))?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            for c in data.chunks(64 * 1024) {
                let _ = tx.send(Ok(bs::ReadResponse { data: c.to_vec() })).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn write(
        &self,
        r: Request<Streaming<bs::WriteRequest>>,
    ) -> Result<Response<bs::WriteResponse>, Status> {
        self.enter("Write", &r)?;
        let mut s = r.into_inner();
        let mut name = String::new();
        let mut data = Vec::new();
        while let Some(m) = s.message().await? {
            if name.is_empty() {
                name = m.resource_name.clone();
            }
            data.extend_from_slice(&m.data);
            if m.finish_write {
                break;
            }
        }
        let d = resource_digest(&name)?;
        assert_eq!(
            Digest::of_bytes(&data),
            d,
            "clonestage streamed wrong bytes"
        );
        let n = data.len() as i64;
        self.data.lock().unwrap().blobs.insert(d, data);
        Ok(Response::new(bs::WriteResponse { committed_size: n }))
    }

    async fn query_write_status(
        &self,
        _: Request<bs::QueryWriteStatusRequest>,
    ) -> Result<Response<bs::QueryWriteStatusResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// A running fake upstream on a loopback port.
pub struct FakeUpstream {
    pub fake: Fake,
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl std::ops::Deref for FakeUpstream {
    type Target = Fake;
    fn deref(&self) -> &Fake {
        &self.fake
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeUpstream {
    pub async fn start() -> FakeUpstream {
        let fake = Fake {
            data: Default::default(),
            mode: Arc::new(Mutex::new(Mode::Healthy)),
        };
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let f = fake.clone();
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(ActionCacheServer::new(f.clone()))
                .add_service(ContentAddressableStorageServer::new(f.clone()))
                .add_service(ByteStreamServer::new(f))
                .serve_with_incoming(TcpListenerStream::new(l))
                .await;
        });
        FakeUpstream {
            fake,
            url: format!("grpc://127.0.0.1:{port}"),
            task,
        }
    }
}

/// A loopback port nothing listens on.
pub fn down_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("grpc://127.0.0.1:{port}")
}

/// A loopback port that accepts connections and never says a word (a SIGSTOPped server);
/// the listener and its connections live as long as the test process.
pub fn stalled_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    format!("grpc://127.0.0.1:{port}")
}
