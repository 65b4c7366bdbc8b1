//! ContentAddressableStorage: FindMissingBlobs, BatchUpdateBlobs (each blob verified against
//! its digest; a blob that lies gets INVALID_ARGUMENT in its own slot; zstd entries are
//! decompressed first, bounded by the digest's size), BatchReadBlobs (zstd when the client
//! lists it in `acceptable_compressors`) and GetTree, all over the engine's cache. The chunking RPCs (SplitBlob, SpliceBlob, ...) are
//! not offered: Capabilities does not advertise them.

use crate::capabilities::MAX_BATCH_TOTAL_SIZE;
use crate::failure::{blocking, check_digest_function, digest_arg, Failure};
use crate::state::State;
use crate::zstd;
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::google::rpc;
use clonestage_engine::{tree, Digest};
use pb::content_addressable_storage_server::ContentAddressableStorage;
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status};

/// FindMissingBlobs with at most this many digests is answered on the request's own thread
/// (one stat each; Bazel asks about 4 to 10 for a small action).
const INLINE_FIND_MISSING: usize = 64;

/// Directories per GetTree page when the client does not say.
const DEFAULT_TREE_PAGE: usize = 1000;

pub(crate) struct CasService {
    pub state: Arc<State>,
}

fn ok() -> Option<rpc::Status> {
    Some(rpc::Status {
        code: Code::Ok as i32,
        ..Default::default()
    })
}

fn err(f: &Failure) -> Option<rpc::Status> {
    Some(rpc::Status {
        code: f.code() as i32,
        message: f.message(),
        details: vec![],
    })
}

const IDENTITY: i32 = pb::compressor::Value::Identity as i32;
const ZSTD: i32 = pb::compressor::Value::Zstd as i32;

/// The bytes of one BatchUpdateBlobs entry, decompressed if it says so.
fn entry_bytes(
    r: pb::batch_update_blobs_request::Request,
    d: &Digest,
    what: &str,
) -> Result<Vec<u8>, Failure> {
    match r.compressor {
        IDENTITY => Ok(r.data),
        // Bounded: a batch blob is at most the batch limit uncompressed, so a highly
        // compressible one cannot make the server hold gigabytes.
        ZSTD if d.size as i64 > MAX_BATCH_TOTAL_SIZE => Err(Failure::InvalidArgument(format!(
            "{what}: blob {d} exceeds max_batch_total_size_bytes {MAX_BATCH_TOTAL_SIZE} uncompressed; use ByteStream"
        ))),
        ZSTD => zstd::decompress(&r.data, d.size)
            .map_err(|f| Failure::InvalidArgument(format!("{what}: {}", f.message()))),
        c => Err(Failure::InvalidArgument(format!(
            "{what}: compressor {} is not supported (identity and ZSTD are)",
            pb::compressor::Value::try_from(c)
                .map(|v| v.as_str_name().to_string())
                .unwrap_or_else(|_| c.to_string())
        ))),
    }
}

#[tonic::async_trait]
impl ContentAddressableStorage for CasService {
    async fn find_missing_blobs(
        &self,
        request: Request<pb::FindMissingBlobsRequest>,
    ) -> Result<Response<pb::FindMissingBlobsResponse>, Status> {
        let req = request.into_inner();
        check_digest_function(req.digest_function)?;
        let digests = req
            .blob_digests
            .iter()
            .enumerate()
            .map(|(i, d)| digest_arg(Some(d), &format!("blob_digests[{i}]")))
            .collect::<Result<Vec<Digest>, _>>()?;
        // A few stats are cheaper than a hop to the blocking pool and back.
        let missing = if digests.len() <= INLINE_FIND_MISSING {
            self.state.cache.find_missing(&digests)
        } else {
            let cache = self.state.cache.clone();
            blocking(move || Ok(cache.find_missing(&digests))).await?
        };
        Ok(Response::new(pb::FindMissingBlobsResponse {
            missing_blob_digests: missing.iter().map(Digest::to_proto).collect(),
        }))
    }

    async fn batch_update_blobs(
        &self,
        request: Request<pb::BatchUpdateBlobsRequest>,
    ) -> Result<Response<pb::BatchUpdateBlobsResponse>, Status> {
        let req = request.into_inner();
        check_digest_function(req.digest_function)?;
        let total: usize = req.requests.iter().map(|r| r.data.len()).sum();
        if total as i64 > MAX_BATCH_TOTAL_SIZE {
            return Err(Failure::InvalidArgument(format!(
                "batch of {total} bytes exceeds max_batch_total_size_bytes {MAX_BATCH_TOTAL_SIZE}; use ByteStream"
            ))
            .into());
        }
        let cache = self.state.cache.clone();
        let responses = blocking(move || {
            Ok(req
                .requests
                .into_iter()
                .enumerate()
                .map(|(i, r)| {
                    let what = format!("requests[{i}]");
                    let d = r.digest.clone();
                    let res = digest_arg(r.digest.as_ref(), &what).and_then(|d| {
                        let data = entry_bytes(r, &d, &what)?;
                        if data.len() as u64 != d.size {
                            return Err(Failure::InvalidArgument(format!(
                                "{what}: digest {d} says {} bytes, data has {}",
                                d.size,
                                data.len()
                            )));
                        }
                        cache.put_bytes(&data, Some(&d)).map_err(Failure::from)
                    });
                    pb::batch_update_blobs_response::Response {
                        digest: d,
                        status: match &res {
                            Ok(_) => ok(),
                            Err(f) => {
                                tracing::warn!(error = %f.message(), "BatchUpdateBlobs refused a blob");
                                err(f)
                            }
                        },
                    }
                })
                .collect())
        })
        .await?;
        Ok(Response::new(pb::BatchUpdateBlobsResponse { responses }))
    }

    async fn batch_read_blobs(
        &self,
        request: Request<pb::BatchReadBlobsRequest>,
    ) -> Result<Response<pb::BatchReadBlobsResponse>, Status> {
        let req = request.into_inner();
        check_digest_function(req.digest_function)?;
        let digests = req
            .digests
            .iter()
            .enumerate()
            .map(|(i, d)| digest_arg(Some(d), &format!("digests[{i}]")))
            .collect::<Result<Vec<Digest>, _>>()?;
        let total: u64 = digests.iter().map(|d| d.size).sum();
        if total as i64 > MAX_BATCH_TOTAL_SIZE {
            return Err(Failure::InvalidArgument(format!(
                "blobs totalling {total} bytes exceed max_batch_total_size_bytes {MAX_BATCH_TOTAL_SIZE}; use ByteStream"
            ))
            .into());
        }
        // zstd only when the client lists it (REAPI: the server may pick any it accepts).
        let compressor = if req.acceptable_compressors.contains(&ZSTD) {
            ZSTD
        } else {
            IDENTITY
        };
        let cache = self.state.cache.clone();
        let responses = blocking(move || {
            Ok(digests
                .into_iter()
                .map(|d| {
                    let (data, compressor, status) = match cache.read(&d) {
                        Ok(Some(data)) if compressor == ZSTD => (zstd::compress(&data), ZSTD, ok()),
                        Ok(Some(data)) => (data, IDENTITY, ok()),
                        Ok(None) => (
                            vec![],
                            IDENTITY,
                            err(&Failure::NotFound(format!("blob {d} not in the CAS"))),
                        ),
                        Err(e) => (vec![], IDENTITY, err(&Failure::from(e))),
                    };
                    pb::batch_read_blobs_response::Response {
                        digest: Some(d.to_proto()),
                        data,
                        compressor,
                        status,
                    }
                })
                .collect())
        })
        .await?;
        Ok(Response::new(pb::BatchReadBlobsResponse { responses }))
    }

    type GetTreeStream = ReceiverStream<Result<pb::GetTreeResponse, Status>>;

    async fn get_tree(
        &self,
        request: Request<pb::GetTreeRequest>,
    ) -> Result<Response<Self::GetTreeStream>, Status> {
        let req = request.into_inner();
        check_digest_function(req.digest_function)?;
        let root = digest_arg(req.root_digest.as_ref(), "root_digest")?;
        let page = if req.page_size > 0 {
            req.page_size as usize
        } else {
            DEFAULT_TREE_PAGE
        };
        let start: usize = if req.page_token.is_empty() {
            0
        } else {
            req.page_token.parse().map_err(|_| {
                Failure::InvalidArgument(format!(
                    "page_token '{}' is not one this server issued",
                    req.page_token
                ))
            })?
        };
        let cache = self.state.cache.clone();
        let dirs = blocking(move || {
            if !cache.contains(&root) {
                return Err(Failure::NotFound(format!(
                    "root directory {root} not in the CAS"
                )));
            }
            tree::get_tree(&cache, &root).map_err(|e| match e {
                clonestage_engine::Error::Missing { digests, path } => Failure::NotFound(format!(
                    "directory {} (at '{path}') not in the CAS",
                    digests[0]
                )),
                e => e.into(),
            })
        })
        .await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut i = start.min(dirs.len());
            loop {
                let end = (i + page).min(dirs.len());
                let next = if end < dirs.len() {
                    end.to_string()
                } else {
                    String::new()
                };
                let msg = pb::GetTreeResponse {
                    directories: dirs[i..end].to_vec(),
                    next_page_token: next,
                };
                if tx.send(Ok(msg)).await.is_err() || end >= dirs.len() {
                    break;
                }
                i = end;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn split_blob(
        &self,
        _: Request<pb::SplitBlobRequest>,
    ) -> Result<Response<pb::SplitBlobResponse>, Status> {
        Err(Status::unimplemented("SplitBlob is not supported"))
    }

    type GetChunkMappingStream = ReceiverStream<Result<pb::GetChunkMappingResponse, Status>>;

    async fn get_chunk_mapping(
        &self,
        _: Request<pb::GetChunkMappingRequest>,
    ) -> Result<Response<Self::GetChunkMappingStream>, Status> {
        Err(Status::unimplemented("GetChunkMapping is not supported"))
    }

    async fn splice_blob(
        &self,
        _: Request<pb::SpliceBlobRequest>,
    ) -> Result<Response<pb::SpliceBlobResponse>, Status> {
        Err(Status::unimplemented("SpliceBlob is not supported"))
    }

    async fn register_chunk_mapping(
        &self,
        _: Request<tonic::Streaming<pb::RegisterChunkMappingRequest>>,
    ) -> Result<Response<pb::RegisterChunkMappingResponse>, Status> {
        Err(Status::unimplemented(
            "RegisterChunkMapping is not supported",
        ))
    }
}
