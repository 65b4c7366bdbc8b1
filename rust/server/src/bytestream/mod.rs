//! ByteStream: streamed reads of CAS blobs (with offset and limit) and streamed writes into
//! the CAS, verified against the digest in the resource name before the blob is installed.
//! Writes resume: see `uploads`. A Write for a blob the CAS already holds answers at once with
//! the full size (-1 for a compressed upload), as REAPI says, so the client stops sending.
//!
//! zstd `compressed-blobs` (REAPI; Bazel 7+ `--remote_cache_compression`): a compressed Write
//! is decompressed as it streams in (`crate::zstd`), bounded by the digest's size, and verified like
//! any other; its offsets and committed sizes count compressed bytes from 0, which is what
//! Bazel's uploader sends, expects back (`committed_size` == compressed bytes sent, or -1) and
//! resumes at. A compressed Read is compressed on the fly from `read_offset`, an offset into
//! the uncompressed blob; a `read_limit` on it is INVALID_ARGUMENT, as the spec says.

mod resource;
mod uploads;

pub use uploads::UploadGauge;
pub(crate) use uploads::Uploads;

use resource::Encoding;

use crate::failure::{blocking, Failure};
use crate::state::State;
use crate::zstd;
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
        let mut stream = request.into_inner();
        let Some(first) = stream.message().await? else {
            return Err(Failure::InvalidArgument("Write without any request".into()).into());
        };
        let name = first.resource_name.clone();
        let blob = resource::parse_write(&name)?;
        let d = blob.digest;
        let zstd = blob.encoding == Encoding::Zstd;
        // What a Write of a blob the CAS holds answers (REAPI: -1 for compressed uploads).
        let already = if zstd { -1 } else { d.size as i64 };
        let cache = self.state.cache.clone();
        if cache.contains(&d) {
            self.uploads.remove(&name);
            return Ok(Response::new(bs::WriteResponse {
                committed_size: already,
            }));
        }
        if first.write_offset == 0
            && first.finish_write
            && d.size <= INLINE_WRITE
            && (zstd || first.data.len() as u64 == d.size)
        {
            // A small blob in one message (Bazel's Action and Directory uploads): verify and
            // install it here instead of through an upload session and the blocking pool.
            self.uploads.remove(&name);
            let sent = first.data.len();
            let data = if zstd {
                zstd::decompress(&first.data, d.size).map_err(|f| in_name(&name, f))?
            } else {
                first.data
            };
            cache.put_bytes(&data, Some(&d)).map_err(Failure::from)?;
            return Ok(Response::new(bs::WriteResponse {
                committed_size: sent as i64,
            }));
        }
        let session = self.uploads.get_or_create(&name);
        let mut s = session.lock().await;
        s.last_used = Instant::now();
        if first.write_offset == 0 {
            s.clear();
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
            s.zstd = zstd.then(|| zstd::Decompressor::new(d.size));
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
            let s = &mut *s;
            let up = s.upload.as_mut().expect("upload created above");
            let wrote = match s.zstd.as_mut() {
                Some(z) => z.feed(&msg.data, &mut |out| {
                    up.write_chunk(out).map_err(Failure::from)
                }),
                None if committed + msg.data.len() as u64 > d.size => {
                    Err(Failure::InvalidArgument(format!(
                        "more than the {} bytes the digest says",
                        d.size
                    )))
                }
                None => up.write_chunk(&msg.data).map_err(Failure::from),
            };
            if let Err(f) = wrote {
                // What was received cannot be continued: a retry starts over.
                s.clear();
                self.uploads.remove(&name);
                return Err(in_name(&name, f).into());
            }
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
        let z = s.zstd.take();
        drop(s);
        self.uploads.remove(&name);
        if let Some(z) = &z {
            z.finish().map_err(|f| in_name(&name, f))?;
        }
        if up.written != d.size {
            return Err(Failure::InvalidArgument(format!(
                "{name}: finish_write after {} bytes, the digest says {}",
                up.written, d.size
            ))
            .into());
        }
        blocking(move || cache.commit_upload(up, &d).map_err(Failure::from)).await?;
        // Bazel checks a compressed upload's committed_size against the compressed bytes it
        // sent; an uncompressed one against the blob's size.
        Ok(Response::new(bs::WriteResponse {
            committed_size: z.map_or(d.size, |z| z.consumed()) as i64,
        }))
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
