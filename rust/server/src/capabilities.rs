//! Capabilities: what this server tells clients it does. SHA-256 only (`digest_functions`,
//! v2.3; requests naming another function are refused, see `failure::check_digest_function`),
//! zstd for ByteStream `compressed-blobs` and batch calls (Bazel 7+ `--remote_cache_compression`
//! checks `supported_compressors`), execution enabled,
//! action cache updates allowed, batch limits, symlinks with relative targets only (inputs with
//! absolute or escaping targets are refused), and API versions 2.0 through 2.3, which covers
//! Bazel 4.2.3 (2.0: `output_files`/`output_directories`) through 8.x (2.1+: `output_paths`).

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use bazel_remote_apis::build::bazel::semver::SemVer;
use pb::capabilities_server::Capabilities;
use tonic::{Request, Response, Status};

/// Largest total of blob bytes in one BatchUpdateBlobs / BatchReadBlobs request. Clients send
/// bigger blobs through ByteStream. gRPC's usual 4 MiB message limit bounds it.
pub const MAX_BATCH_TOTAL_SIZE: i64 = 4 * 1024 * 1024 - 64 * 1024;

/// Largest gRPC message the server accepts or sends (batch requests plus framing). A larger
/// request is refused by tonic before any handler runs, with OUT_OF_RANGE "Error, decoded
/// message length too large: found N bytes, the limit is: 16777216 bytes" (tonic 0.14
/// `codec/decode.rs`; the text is not configurable). That code is right for it: REAPI gives
/// FindMissingBlobs no errors of its own, and Bazel does not retry OUT_OF_RANGE
/// (`RemoteRetrier.RETRIABLE_GRPC_ERRORS`) where it would retry RESOURCE_EXHAUSTED. Bazel
/// never sends one that large: it splits FindMissingBlobs at `maxMissingBlobsDigestsPerMessage`,
/// computed from `RemoteOptions.maxOutboundMessageSize` (1 MiB, not a user flag) in
/// `GrpcCacheClient.computeMaxMissingBlobsDigestsPerMessage`: about 14,000 SHA-256 digests.
/// 16 MiB holds about 230,000 (`tests/cas.rs`).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

pub(crate) struct CapabilitiesService;

fn version(major: i32, minor: i32) -> SemVer {
    SemVer {
        major,
        minor,
        patch: 0,
        prerelease: String::new(),
    }
}

pub(crate) fn server_capabilities() -> pb::ServerCapabilities {
    let sha256 = pb::digest_function::Value::Sha256 as i32;
    let zstd = pb::compressor::Value::Zstd as i32;
    pb::ServerCapabilities {
        cache_capabilities: Some(pb::CacheCapabilities {
            digest_functions: vec![sha256],
            action_cache_update_capabilities: Some(pb::ActionCacheUpdateCapabilities {
                update_enabled: true,
            }),
            max_batch_total_size_bytes: MAX_BATCH_TOTAL_SIZE,
            symlink_absolute_path_strategy: pb::symlink_absolute_path_strategy::Value::Disallowed
                as i32,
            supported_compressors: vec![zstd],
            supported_batch_update_compressors: vec![zstd],
            ..Default::default()
        }),
        execution_capabilities: Some(pb::ExecutionCapabilities {
            digest_function: sha256,
            exec_enabled: true,
            digest_functions: vec![sha256],
            ..Default::default()
        }),
        deprecated_api_version: None,
        low_api_version: Some(version(2, 0)),
        high_api_version: Some(version(2, 3)),
    }
}

#[tonic::async_trait]
impl Capabilities for CapabilitiesService {
    async fn get_capabilities(
        &self,
        _request: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::ServerCapabilities>, Status> {
        Ok(Response::new(server_capabilities()))
    }
}
