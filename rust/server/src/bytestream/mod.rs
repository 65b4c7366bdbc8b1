//! ByteStream: streamed reads of CAS blobs (with offset and limit) and streamed writes into
//! the CAS, verified against the digest in the resource name before the blob is installed.
//! Writes resume: see `uploads`. A Write for a blob the CAS already holds answers at once with
//! the full size, as REAPI allows, so the client stops sending.

mod resource;
mod uploads;

pub(crate) use uploads::Uploads;

use crate::state::State;
use crate::status::{blocking, Failure};
use bazel_remote_apis::google::bytestream as bs;
use bs::byte_stream_server::ByteStream;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Bytes per ReadResponse: large enough to amortize framing, well under the message limit.
const READ_CHUNK: usize = 1024 * 1024;

/// Reads of at most this many bytes are served on the request's thread in one message.
const INLINE_READ: u64 = 256 * 1024;

/// One-message writes of at most this many bytes are hashed and installed on the request's
/// thread.
const INLINE_WRITE: u64 = 256 * 1024;

fn read_small(
    cache: &clonestage_engine::Cache,
    d: &clonestage_engine::Digest,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Status> {
    let mut file = cache
        .open_blob(d)
        .map_err(Failure::from)?
        .ok_or_else(|| Failure::NotFound(format!("blob {d} not in the CAS")))?;
    if offset > 0 {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| Status::internal(format!("seek in blob {d}: {e}")))?;
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact(&mut buf)
        .map_err(|e| Status::internal(format!("read blob {d}: {e}")))?;
    Ok(buf)
}

pub(crate) struct ByteStreamService {
    pub state: Arc<State>,
}

#[tonic::async_trait]
impl ByteStream for ByteStreamService {
    type ReadStream = ReceiverStream<Result<bs::ReadResponse, Status>>;

    async fn read(
        &self,
        request: Request<bs::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let req = request.into_inner();
        let d = resource::parse_read(&req.resource_name)?;
        if req.read_offset < 0 || req.read_offset as u64 > d.size {
            return Err(Status::out_of_range(format!(
                "read_offset {} outside blob {d} of {} bytes",
                req.read_offset, d.size
            )));
        }
        if req.read_limit < 0 {
            return Err(Failure::InvalidArgument(format!(
                "read_limit {} is negative",
                req.read_limit
            ))
            .into());
        }
        let offset = req.read_offset as u64;
        let len = match req.read_limit {
            0 => d.size - offset,
            n => (n as u64).min(d.size - offset),
        };
        let cache = self.state.cache.clone();
        if len <= INLINE_READ {
            // Small blobs (most outputs Bazel downloads): read here, one message, no hops.
            // Errors (a missing blob) answer the call itself, as below.
            let data = read_small(&cache, &d, offset, len)?;
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            // Nothing to send for zero bytes, as below.
            if !data.is_empty() {
                let _ = tx.try_send(Ok(bs::ReadResponse { data }));
            }
            return Ok(Response::new(ReceiverStream::new(rx)));
        }
        let file = blocking(move || {
            cache
                .open_blob(&d)
                .map_err(Failure::from)?
                .ok_or_else(|| Failure::NotFound(format!("blob {d} not in the CAS")))
        })
        .await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let mut file = file;
            if offset > 0 {
                if let Err(e) = file.seek(SeekFrom::Start(offset)) {
                    let _ =
                        tx.blocking_send(Err(Status::internal(format!("seek in blob {d}: {e}"))));
                    return;
                }
            }
            let mut left = len;
            while left > 0 {
                let mut buf = vec![0u8; (left as usize).min(READ_CHUNK)];
                if let Err(e) = file.read_exact(&mut buf) {
                    let _ = tx.blocking_send(Err(Status::internal(format!("read blob {d}: {e}"))));
                    return;
                }
                left -= buf.len() as u64;
                if tx
                    .blocking_send(Ok(bs::ReadResponse { data: buf }))
                    .is_err()
                {
                    return; // client went away
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn write(
        &self,
        request: Request<Streaming<bs::WriteRequest>>,
    ) -> Result<Response<bs::WriteResponse>, Status> {
        let mut stream = request.into_inner();
        let Some(first) = stream.message().await? else {
            return Err(Failure::InvalidArgument("Write without any request".into()).into());
        };
        let name = first.resource_name.clone();
        let d = resource::parse_write(&name)?;
        let cache = self.state.cache.clone();
        if cache.contains(&d) {
            self.state.uploads.remove(&name);
            return Ok(Response::new(bs::WriteResponse {
                committed_size: d.size as i64,
            }));
        }
        if first.write_offset == 0
            && first.finish_write
            && first.data.len() as u64 == d.size
            && d.size <= INLINE_WRITE
        {
            // A small blob in one message (Bazel's Action and Directory uploads): verify and
            // install it here instead of through an upload session and the blocking pool.
            self.state.uploads.remove(&name);
            cache
                .put_bytes(&first.data, Some(&d))
                .map_err(Failure::from)?;
            return Ok(Response::new(bs::WriteResponse {
                committed_size: d.size as i64,
            }));
        }
        let session = self.state.uploads.get_or_create(&name);
        let mut s = session.lock().await;
        s.last_used = Instant::now();
        if first.write_offset == 0 {
            s.upload = None;
        } else if first.write_offset as u64 != s.committed() {
            return Err(Failure::InvalidArgument(format!(
                "{name}: write_offset {} but {} bytes are committed",
                first.write_offset,
                s.committed()
            ))
            .into());
        }
        if s.upload.is_none() {
            s.upload = Some(cache.new_upload().map_err(Failure::from)?);
        }
        let mut msg = first;
        loop {
            if !msg.resource_name.is_empty() && msg.resource_name != name {
                return Err(Failure::InvalidArgument(format!(
                    "resource name changed mid-stream from '{name}' to '{}'",
                    msg.resource_name
                ))
                .into());
            }
            let committed = s.committed();
            if msg.write_offset as u64 != committed {
                return Err(Failure::InvalidArgument(format!(
                    "{name}: write_offset {} but {committed} bytes are committed",
                    msg.write_offset
                ))
                .into());
            }
            if committed + msg.data.len() as u64 > d.size {
                s.upload = None;
                return Err(Failure::InvalidArgument(format!(
                    "{name}: more than the {} bytes the digest says",
                    d.size
                ))
                .into());
            }
            let up = s.upload.as_mut().expect("upload created above");
            up.write_chunk(&msg.data).map_err(Failure::from)?;
            s.last_used = Instant::now();
            if msg.finish_write {
                break;
            }
            match stream.message().await? {
                Some(m) => msg = m,
                // The client stopped without finishing: keep the session for a resumed Write.
                None => {
                    return Err(Status::aborted(format!(
                        "{name}: stream ended before finish_write"
                    )))
                }
            }
        }
        let up = s.upload.take().expect("upload present");
        drop(s);
        self.state.uploads.remove(&name);
        if up.written != d.size {
            return Err(Failure::InvalidArgument(format!(
                "{name}: finish_write after {} bytes, the digest says {}",
                up.written, d.size
            ))
            .into());
        }
        blocking(move || cache.commit_upload(up, &d).map_err(Failure::from)).await?;
        Ok(Response::new(bs::WriteResponse {
            committed_size: d.size as i64,
        }))
    }

    async fn query_write_status(
        &self,
        request: Request<bs::QueryWriteStatusRequest>,
    ) -> Result<Response<bs::QueryWriteStatusResponse>, Status> {
        let name = request.into_inner().resource_name;
        let d = resource::parse_write(&name)?;
        let cache = self.state.cache.clone();
        if blocking(move || Ok(cache.contains(&d))).await? {
            return Ok(Response::new(bs::QueryWriteStatusResponse {
                committed_size: d.size as i64,
                complete: true,
            }));
        }
        let committed = match self.state.uploads.get(&name) {
            Some(s) => s.lock().await.committed(),
            None => 0,
        };
        Ok(Response::new(bs::QueryWriteStatusResponse {
            committed_size: committed as i64,
            complete: false,
        }))
    }
}
