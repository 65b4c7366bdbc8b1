//! The channel to the upstream (TLS with the system's roots for `grpcs://`) and the REAPI
//! calls clonestage makes on it, each carrying the
//! credentials' headers and the instance name. The channel connects lazily (a down upstream
//! costs no start-up time) with connection attempts bounded by the timeout; callers bound
//! whole operations (`tokio::time::timeout`), which also covers an upstream that accepts and
//! never answers. An UNAUTHENTICATED answer makes the credential helper run again before the
//! next call.

use super::credentials::Credentials;
use crate::capabilities::MAX_MESSAGE_SIZE;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::bytestream as bs;
use clonestage_engine::Digest;
use pb::action_cache_client::ActionCacheClient;
use pb::content_addressable_storage_client::ContentAddressableStorageClient;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

pub(crate) struct Client {
    channel: Channel,
    pub instance: String,
    creds: Arc<Credentials>,
}

impl Client {
    pub fn new(
        uri: &str,
        instance: &str,
        creds: Arc<Credentials>,
        timeout: Duration,
    ) -> anyhow::Result<Client> {
        let mut endpoint = Endpoint::from_shared(uri.to_string())
            .map_err(|e| anyhow::anyhow!("--upstream: {uri}: {e}"))?;
        if uri.starts_with("https://") {
            endpoint = super::tls::configure(endpoint, uri)?;
        }
        let channel = endpoint
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(timeout)
            .connect_lazy();
        Ok(Client {
            channel,
            instance: instance.to_string(),
            creds,
        })
    }

    async fn request<T>(&self, msg: T, timeout: Duration) -> Request<T> {
        let headers = if self.creds.has_helper() {
            let c = self.creds.clone();
            tokio::task::spawn_blocking(move || c.headers())
                .await
                .unwrap_or_default()
        } else {
            self.creds.headers()
        };
        let mut r = Request::new(msg);
        for (k, v) in headers {
            r.metadata_mut().append(k, v);
        }
        r.set_timeout(timeout);
        r
    }

    fn seen(&self, s: Status) -> Status {
        if s.code() == tonic::Code::Unauthenticated {
            self.creds.invalidate();
        }
        s
    }

    fn ac(&self) -> ActionCacheClient<Channel> {
        ActionCacheClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn cas(&self) -> ContentAddressableStorageClient<Channel> {
        ContentAddressableStorageClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE)
    }

    fn bytestream(&self) -> bs::byte_stream_client::ByteStreamClient<Channel> {
        bs::byte_stream_client::ByteStreamClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE)
            .max_encoding_message_size(MAX_MESSAGE_SIZE)
    }

    /// The upstream's result for `action`; None when it has none (NOT_FOUND).
    pub async fn get_action_result(
        &self,
        action: &Digest,
        timeout: Duration,
    ) -> Result<Option<pb::ActionResult>, Status> {
        let req = self
            .request(
                pb::GetActionResultRequest {
                    instance_name: self.instance.clone(),
                    action_digest: Some(action.to_proto()),
                    inline_stdout: false,
                    inline_stderr: false,
                    ..Default::default()
                },
                timeout,
            )
            .await;
        match self.ac().get_action_result(req).await {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(self.seen(s)),
        }
    }

    pub async fn update_action_result(
        &self,
        action: &Digest,
        result: pb::ActionResult,
        timeout: Duration,
    ) -> Result<(), Status> {
        let req = self
            .request(
                pb::UpdateActionResultRequest {
                    instance_name: self.instance.clone(),
                    action_digest: Some(action.to_proto()),
                    action_result: Some(result),
                    ..Default::default()
                },
                timeout,
            )
            .await;
        self.ac()
            .update_action_result(req)
            .await
            .map(|_| ())
            .map_err(|s| self.seen(s))
    }

    pub async fn find_missing(
        &self,
        digests: &[Digest],
        timeout: Duration,
    ) -> Result<Vec<Digest>, Status> {
        let req = self
            .request(
                pb::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: digests.iter().map(Digest::to_proto).collect(),
                    ..Default::default()
                },
                timeout,
            )
            .await;
        let r = self
            .cas()
            .find_missing_blobs(req)
            .await
            .map_err(|s| self.seen(s))?
            .into_inner();
        r.missing_blob_digests
            .iter()
            .map(|d| {
                Digest::from_proto(d)
                    .map_err(|e| Status::internal(format!("upstream named a bad digest: {e}")))
            })
            .collect()
    }

    /// BatchReadBlobs: (digest, bytes) for each blob the upstream returned with status OK
    /// (unverified: the caller's CAS write checks each).
    pub async fn batch_read(
        &self,
        digests: &[Digest],
        timeout: Duration,
    ) -> Result<Vec<(Digest, Vec<u8>)>, Status> {
        let req = self
            .request(
                pb::BatchReadBlobsRequest {
                    instance_name: self.instance.clone(),
                    digests: digests.iter().map(Digest::to_proto).collect(),
                    ..Default::default()
                },
                timeout,
            )
            .await;
        let r = self
            .cas()
            .batch_read_blobs(req)
            .await
            .map_err(|s| self.seen(s))?
            .into_inner();
        Ok(r.responses
            .into_iter()
            .filter(|r| status_ok(r.status.as_ref()))
            .filter_map(|r| Some((Digest::from_proto(r.digest.as_ref()?).ok()?, r.data)))
            .collect())
    }

    pub async fn batch_update(
        &self,
        blobs: Vec<(Digest, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<(), Status> {
        let req = self
            .request(
                pb::BatchUpdateBlobsRequest {
                    instance_name: self.instance.clone(),
                    requests: blobs
                        .into_iter()
                        .map(|(d, data)| pb::batch_update_blobs_request::Request {
                            digest: Some(d.to_proto()),
                            data,
                            compressor: 0,
                        })
                        .collect(),
                    ..Default::default()
                },
                timeout,
            )
            .await;
        let r = self
            .cas()
            .batch_update_blobs(req)
            .await
            .map_err(|s| self.seen(s))?
            .into_inner();
        match r.responses.iter().find(|r| !status_ok(r.status.as_ref())) {
            Some(bad) => Err(Status::unavailable(format!(
                "upstream refused blob {:?}: {:?}",
                bad.digest, bad.status
            ))),
            None => Ok(()),
        }
    }

    fn resource(&self, tail: &str) -> String {
        if self.instance.is_empty() {
            tail.to_string()
        } else {
            format!("{}/{tail}", self.instance)
        }
    }

    /// ByteStream.Read of `d`, each chunk handed to `sink` in order.
    pub async fn read_stream(
        &self,
        d: &Digest,
        timeout: Duration,
        mut sink: impl FnMut(&[u8]) -> Result<(), Status>,
    ) -> Result<(), Status> {
        let req = self
            .request(
                bs::ReadRequest {
                    resource_name: self.resource(&format!("blobs/{}/{}", d.hex(), d.size)),
                    read_offset: 0,
                    read_limit: 0,
                },
                timeout,
            )
            .await;
        let mut s = self
            .bytestream()
            .read(req)
            .await
            .map_err(|s| self.seen(s))?
            .into_inner();
        while let Some(chunk) = s.message().await.map_err(|s| self.seen(s))? {
            sink(&chunk.data)?;
        }
        Ok(())
    }

    /// ByteStream.Write of `d` from `chunks` (which end with the blob).
    pub async fn write_stream(
        &self,
        d: &Digest,
        upload_id: &str,
        chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(), Status> {
        let name = self.resource(&format!("uploads/{upload_id}/blobs/{}/{}", d.hex(), d.size));
        let size = d.size;
        let stream = write_requests(chunks, name, size);
        let req = self.request(stream, timeout).await;
        let r = self
            .bytestream()
            .write(req)
            .await
            .map_err(|s| self.seen(s))?
            .into_inner();
        if r.committed_size != size as i64 && r.committed_size != -1 {
            return Err(Status::data_loss(format!(
                "upstream committed {} of {size} bytes for {d}",
                r.committed_size
            )));
        }
        Ok(())
    }
}

/// The WriteRequests of one upload: offsets in order, `finish_write` on the last chunk.
fn write_requests(
    chunks: tokio::sync::mpsc::Receiver<Vec<u8>>,
    name: String,
    size: u64,
) -> impl tokio_stream::Stream<Item = bs::WriteRequest> {
    use tokio_stream::StreamExt;
    let mut offset = 0u64;
    tokio_stream::wrappers::ReceiverStream::new(chunks).map(move |data| {
        let len = data.len() as u64;
        let req = bs::WriteRequest {
            resource_name: if offset == 0 {
                name.clone()
            } else {
                String::new()
            },
            write_offset: offset as i64,
            finish_write: offset + len == size,
            data,
        };
        offset += len;
        req
    })
}

/// An absent status or code 0.
fn status_ok(s: Option<&bazel_remote_apis::google::rpc::Status>) -> bool {
    s.is_none_or(|s| s.code == 0)
}
