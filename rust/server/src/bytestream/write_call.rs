//! ByteStream.Write: a stream of WriteRequests into the CAS, resumable through `uploads`.
//!
//! Offsets follow google.bytestream (`bytestream.proto`, WriteRequest.write_offset): the first
//! message of a Write starts at the committed size QueryWriteStatus reports (0 starts over),
//! and each later one at the first's offset plus the data sent since. For compressed uploads
//! REAPI fixes what those numbers mean (`remote_execution.proto` v2.12.0, lines 262-269): the
//! first `write_offset` is an offset into the *uncompressed* blob and later ones add the
//! compressed bytes sent. So a resumed compressed Write is a fresh zstd stream of the blob from
//! an uncompressed offset, which is what Bazel sends: since PR 15669 (5.3.0, and every 6-9
//! release) its `Chunker.seek` re-opens the file at that offset and compresses from there
//! (`Chunker.initialize(srcPos)`), and `ByteStreamUploader.AsyncUpload.call` resumes at the
//! committed size its `query()` returned. The committed size of a compressed upload is thus the
//! uncompressed bytes in the temp file, and its decoder lives and dies with its stream.
//!
//! A first `write_offset` that is not the committed size is ABORTED, the gRPC code for a failed
//! sequencer check ("retry at a higher level"): Bazel retries it, asks QueryWriteStatus again
//! and resumes where the session really is (a session may have expired, or another stream
//! moved on). A wrong offset later in a stream is INVALID_ARGUMENT, a client bug.
//!
//! No lock is held while waiting for the next message, so QueryWriteStatus and a second Write of
//! the name answer while a stream is idle; the second takes the session over (`uploads`).
//!
//! After the message with `finish_write` the stream must end: "Sending any WriteRequests
//! subsequent to one in which finish_write is true will cause an error" (`bytestream.proto`,
//! WriteRequest.finish_write). One that does not is INVALID_ARGUMENT (a malformed request,
//! whatever the server's state; Buildbarn's `byteStreamWriteServerChunkReader.setRequest` and
//! Buildfarm answer the same) and nothing is stored. The server waits at most
//! `HALF_CLOSE_WAIT` for the end: Bazel half-closes right after its last message
//! (`ByteStreamUploader.Writer.run`).

use super::memory::{LeaseWatch, ADMIT_WAIT};
use super::uploads::{Attached, Uploads};
use super::{in_name, resource, Encoding, INLINE_WRITE};
use crate::failure::{blocking, Failure};
use crate::state::State;
use crate::zstd::{self, Decompressor};
use bazel_remote_apis::google::bytestream as bs;
use std::time::Duration;
use tonic::{Request, Response, Status, Streaming};

/// How long the end of a stream is awaited after its `finish_write`.
const HALF_CLOSE_WAIT: Duration = Duration::from_secs(10);

pub(super) async fn write(
    state: &State,
    uploads: &Uploads,
    request: Request<Streaming<bs::WriteRequest>>,
) -> Result<Response<bs::WriteResponse>, Status> {
    let client = super::invocation::of(&request);
    let mut stream = request.into_inner();
    let Some(first) = stream.message().await? else {
        return Err(Failure::InvalidArgument("Write without any request".into()).into());
    };
    let name = first.resource_name.clone();
    let blob = resource::parse_write(&name)?;
    let d = blob.digest;
    let zstd = blob.encoding == Encoding::Zstd;
    let cache = state.cache.clone();
    if cache.contains(&d) {
        // REAPI: answer at once, -1 for a compressed upload, so the client stops sending.
        uploads.remove(&name);
        let already = if zstd { -1 } else { d.size as i64 };
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
        nothing_after(&name, &mut stream).await?;
        uploads.remove(&name);
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

    let att = uploads.attach(&name, client)?;
    let start = begin(&att, state, &name, first.write_offset, d.size).await?;
    let (mut dec, watch) = if zstd {
        let (lease, watch) = uploads.budget().lease();
        let left = d.size - start;
        // Room for the first frame before anything is decoded: wait for it if need be.
        if let Some(need) = zstd::first_frame_memory(&first.data, left) {
            watch
                .admit(need, ADMIT_WAIT)
                .await
                .map_err(|f| in_name(&name, f))?;
        }
        (
            Some(Decompressor::with_memory(left, Box::new(lease))),
            Some(watch),
        )
    } else {
        (None, None)
    };
    let mut offset = start;
    let mut msg = first;
    loop {
        if !msg.resource_name.is_empty() && msg.resource_name != name {
            return Err(Failure::InvalidArgument(format!(
                "resource name changed mid-stream from '{name}' to '{}'",
                msg.resource_name
            ))
            .into());
        }
        if msg.write_offset != offset as i64 {
            return Err(Failure::InvalidArgument(format!(
                "{name}: write_offset {} but this stream is at {offset}",
                msg.write_offset
            ))
            .into());
        }
        apply(&att, &mut dec, watch.as_ref(), &name, &msg.data, d.size).await?;
        offset += msg.data.len() as u64;
        if msg.finish_write {
            break;
        }
        msg = match next(&mut stream, &att, watch.as_ref(), &name).await? {
            Some(m) => m,
            None => {
                // The client stopped without finishing: the session stays for a resumed Write.
                let committed = att.session.lock().await.committed();
                return Err(Status::aborted(format!(
                    "{name}: stream ended before finish_write; {committed} bytes are committed, \
                     a Write from there resumes"
                )));
            }
        };
    }
    if let Err(e) = nothing_after(&name, &mut stream).await {
        att.remove();
        return Err(e);
    }
    let up = {
        let mut s = att.session.lock().await;
        if att.superseded() {
            return Err(superseded(&name));
        }
        s.upload.take()
    };
    att.remove();
    let up =
        up.ok_or_else(|| Failure::Internal(format!("{name}: the upload's temp file is gone")))?;
    if let Some(z) = &dec {
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
    // Bazel checks a compressed upload's committed_size against the offset its stream
    // reached (`checkCommittedSize`: the Chunker's offset, or -1); an uncompressed one against
    // the blob's size.
    Ok(Response::new(bs::WriteResponse {
        committed_size: if zstd { offset } else { d.size } as i64,
    }))
}

/// Where the stream's first message starts: 0 starts over, the committed size resumes.
async fn begin(
    att: &Attached,
    state: &State,
    name: &str,
    offset: i64,
    size: u64,
) -> Result<u64, Status> {
    if offset < 0 || offset as u64 > size {
        return Err(Failure::InvalidArgument(format!(
            "{name}: write_offset {offset} outside the blob's {size} bytes"
        ))
        .into());
    }
    let mut s = att.session.lock().await;
    let committed = s.committed();
    if offset == 0 && committed > 0 {
        s.upload = None;
    } else if offset as u64 != committed {
        return Err(Status::aborted(format!(
            "{name}: write_offset {offset} but {committed} bytes are committed; \
             ask QueryWriteStatus and resume there"
        )));
    }
    if s.upload.is_none() {
        s.upload = Some(state.cache.new_upload().map_err(Failure::from)?);
    }
    att.holds(s.committed());
    Ok(offset as u64)
}

/// Write one message's data into the session's temp file (through the decoder if any).
async fn apply(
    att: &Attached,
    dec: &mut Option<Decompressor>,
    watch: Option<&LeaseWatch>,
    name: &str,
    data: &[u8],
    size: u64,
) -> Result<(), Status> {
    let mut s = att.session.lock().await;
    if att.superseded() {
        return Err(superseded(name));
    }
    let Some(up) = s.upload.as_mut() else {
        return Err(Failure::Internal(format!("{name}: the upload's temp file is gone")).into());
    };
    let wrote = match dec.as_mut() {
        Some(z) => z.feed(data, &mut |out| up.write_chunk(out).map_err(Failure::from)),
        None if up.written + data.len() as u64 > size => Err(Failure::InvalidArgument(format!(
            "more than the {size} bytes the digest says"
        ))),
        None => up.write_chunk(data).map_err(Failure::from),
    };
    if let Err(f) = wrote {
        if watch.is_some_and(|w| w.refused()) {
            // No room for a frame's decoder: nothing of that frame was written, so the temp
            // file holds whole frames and a Write from its size resumes.
            *dec = None;
        } else {
            // What was received cannot be continued: a retry starts over.
            s.upload = None;
            drop(s);
            att.remove();
        }
        return Err(in_name(name, f).into());
    }
    att.holds(s.committed());
    Ok(())
}

/// The stream's next message, waited for without any lock; its decoder may give way to
/// another upload's meanwhile (`memory`), and a later Write of the name stops it.
async fn next(
    stream: &mut Streaming<bs::WriteRequest>,
    att: &Attached,
    watch: Option<&LeaseWatch>,
    name: &str,
) -> Result<Option<bs::WriteRequest>, Status> {
    if let Some(w) = watch {
        w.idle();
    }
    let evicted = async {
        match watch {
            Some(w) => w.evicted().await,
            None => std::future::pending().await,
        }
    };
    let m = tokio::select! {
        m = stream.message() => m?,
        _ = att.stopped() => return Err(superseded(name)),
        _ = evicted => return Err(evicted_status(att, name).await),
    };
    if watch.is_some_and(|w| !w.busy()) {
        return Err(evicted_status(att, name).await);
    }
    Ok(m)
}

async fn evicted_status(att: &Attached, name: &str) -> Status {
    let committed = att.session.lock().await.committed();
    Status::aborted(format!(
        "{name}: the stream was idle and its zstd decoder's memory went to another upload; \
         {committed} bytes are committed, a Write from there resumes"
    ))
}

fn superseded(name: &str) -> Status {
    Status::aborted(format!(
        "{name}: a later Write of the same resource name took this upload over"
    ))
}

/// The stream must end after the message with `finish_write` (module doc).
async fn nothing_after(name: &str, stream: &mut Streaming<bs::WriteRequest>) -> Result<(), Status> {
    match tokio::time::timeout(HALF_CLOSE_WAIT, stream.message()).await {
        Ok(Ok(Some(_))) => Err(Failure::InvalidArgument(format!(
            "{name}: a WriteRequest after the one with finish_write (google.bytestream: \
             nothing may follow it); nothing was stored"
        ))
        .into()),
        Ok(Err(e)) => Err(e),
        Ok(Ok(None)) | Err(_) => Ok(()),
    }
}
