//! Whom an upload session counts against (`uploads::SESSIONS_PER_CLIENT`): the Bazel command
//! that sent the Write.
//!
//! On a local server the peer says nothing: every client is the same user, unix-socket peers
//! have no address, and a loopback TCP peer's port changes with each of the many connections
//! one Bazel opens (`--remote_max_connections`). What does name a client is REAPI's
//! `RequestMetadata` (`remote_execution.proto` v2.12.0, lines 2469-2492: the header
//! `build.bazel.remote.execution.v2.requestmetadata-bin`), whose `tool_invocation_id` Bazel sets
//! to its command's id on every call (`TracingMetadataUtils.buildMetadata`; its
//! `ByteStreamUploader` attaches it to each Write). So one interrupted build can leave at most
//! its share of sessions behind, and cannot push out the live uploads of the next. Clients
//! that send no metadata (scripts, grpcio, tonic) share one bucket. The id is the client's
//! word, so this is fairness, not a defence: the total cap is what bounds a hostile client.

use bazel_remote_apis::build::bazel::remote::execution::v2::RequestMetadata;
use prost::Message;
use std::sync::Arc;

const METADATA: &str = "build.bazel.remote.execution.v2.requestmetadata-bin";

/// Longest id kept (they are UUIDs in Bazel).
const MAX_ID: usize = 100;

/// The client key of `req`.
pub(crate) fn of<T>(req: &tonic::Request<T>) -> Arc<str> {
    let id = req
        .metadata()
        .get_bin(METADATA)
        .and_then(|v| v.to_bytes().ok())
        .and_then(|b| RequestMetadata::decode(b).ok())
        .map(|m| m.tool_invocation_id)
        .filter(|id| !id.is_empty());
    match id {
        Some(id) => {
            let id: String = id.chars().take(MAX_ID).collect();
            format!("tool invocation {id:?}").into()
        }
        None => "clients without RequestMetadata".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::metadata::MetadataValue;

    #[test]
    fn the_tool_invocation_names_the_client() {
        let mut req = tonic::Request::new(());
        assert_eq!(&*of(&req), "clients without RequestMetadata");
        let m = RequestMetadata {
            tool_invocation_id: "b7e1".into(),
            action_id: "a".into(),
            ..Default::default()
        };
        req.metadata_mut()
            .insert_bin(METADATA, MetadataValue::from_bytes(&m.encode_to_vec()));
        assert_eq!(&*of(&req), "tool invocation \"b7e1\"");
        // Not a RequestMetadata: the anonymous bucket, not an error.
        req.metadata_mut()
            .insert_bin(METADATA, MetadataValue::from_bytes(b"\xff\xff"));
        assert_eq!(&*of(&req), "clients without RequestMetadata");
    }
}
