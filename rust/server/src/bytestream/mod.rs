//! ByteStream: streamed reads of CAS blobs (with offset and limit) and streamed writes into
//! the CAS, verified against the digest in the resource name before the blob is installed.
//! Files: `resource` (names), `write_call` (Write: offsets, resumption, the end of a stream),
//! `uploads` (the sessions Writes resume from, and their bounds), `memory` (what compressed
//! uploads' decoders may hold), `invocation` (whom a session counts against). A Write for a blob
//! the CAS already holds answers at once with the full size (-1 for a compressed upload), as
//! REAPI says, so the client stops sending.
//!
//! zstd `compressed-blobs` (REAPI; Bazel 7+ `--remote_cache_compression`): a compressed Write
//! is decompressed as it streams in (`crate::zstd`), bounded by the digest's size, and
//! verified like any other; a resumed one is a new zstd stream from an uncompressed offset
//! (`write_call`). A compressed Read is compressed on the fly from `read_offset`, an offset into
//! the uncompressed blob; a `read_limit` on it is INVALID_ARGUMENT, as the spec says.

mod invocation;
mod memory;
mod resource;
mod uploads;
mod write_call;

pub(crate) use uploads::Uploads;
pub use uploads::{UploadGauge, SESSIONS_PER_CLIENT as UPLOAD_SESSIONS_PER_CLIENT};

use resource::Encoding;

use crate::failure::{blocking, Failure};
use crate::state::State;
use crate::zstd;
use bazel_remote_apis::google::bytestream as bs;
use bs::byte_stream_server::ByteStream;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
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

/// Exactly `left` bytes of `inner`: a file that ends early is an error (as `read_exact` makes
/// it for plain reads), not a shorter blob compressed.
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(self.left as usize);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{} bytes short of the digest's size", self.left),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A failure about a resource, with its name in the message (InvalidArgument ones).
fn in_name(name: &str, f: Failure) -> Failure {
    match f {
        Failure::InvalidArgument(m) => Failure::InvalidArgument(format!("{name}: {m}")),
        f => f,
    }
}

pub(crate) struct ByteStreamService {
    pub state: Arc<State>,
    /// Upload sessions of interrupted Writes; this service alone uses them.
    pub uploads: Uploads,
}

#[tonic::async_trait]
impl ByteStream for ByteStreamService {
    type ReadStream = ReceiverStream<Result<bs::ReadResponse, Status>>;

    async fn read(
        &self,
        request: Request<bs::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let req = request.into_inner();
        let blob = resource::parse_read(&req.resource_name)?;
        let d = blob.digest;
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
        let zstd = blob.encoding == Encoding::Zstd;
        if zstd && req.read_limit != 0 {
            return Err(Failure::InvalidArgument(format!(
                "{}: read_limit {} on a compressed blob (REAPI allows none)",
                req.resource_name, req.read_limit
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
            let mut data = read_small(&cache, &d, offset, len)?;
            if zstd {
                data = zstd::compress(&data);
            }
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
            if zstd {
                // One frame of the rest of the blob, in READ_CHUNK pieces; stops when the
                // client goes away.
                let exact = Exact {
                    inner: file,
                    left: len,
                };
                let sent = zstd::compress_stream(exact, READ_CHUNK, |data| {
                    tx.blocking_send(Ok(bs::ReadResponse { data })).is_ok()
                });
                if let Err(e) = sent {
                    let _ = tx.blocking_send(Err(Status::internal(format!("read blob {d}: {e}"))));
                }
                return;
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
        write_call::write(&self.state, &self.uploads, request).await
    }

    async fn query_write_status(
        &self,
        request: Request<bs::QueryWriteStatusRequest>,
    ) -> Result<Response<bs::QueryWriteStatusResponse>, Status> {
        let name = request.into_inner().resource_name;
        let blob = resource::parse_write(&name)?;
        let d = blob.digest;
        let cache = self.state.cache.clone();
        if blocking(move || Ok(cache.contains(&d))).await? {
            return Ok(Response::new(bs::QueryWriteStatusResponse {
                committed_size: match blob.encoding {
                    Encoding::Zstd => -1,
                    Encoding::Identity => d.size as i64,
                },
                complete: true,
            }));
        }
        // The session's lock is held only while a message is written, never across a wait
        // for the next one. No session: 0, which makes Bazel start over (a NOT_FOUND, as
        // google.bytestream allows, would fail its upload: it retries only UNIMPLEMENTED).
        let committed = match self.uploads.get(&name) {
            Some(s) => s.lock().await.committed(),
            None => 0,
        };
        Ok(Response::new(bs::QueryWriteStatusResponse {
            committed_size: committed as i64,
            complete: false,
        }))
    }
}
