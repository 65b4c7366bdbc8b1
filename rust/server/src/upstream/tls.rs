//! TLS for `grpcs://` upstreams: rustls with the system's roots, behind the cargo feature
//! `tls` (on by default). A build without it refuses a `grpcs://` upstream at startup, naming
//! the feature; the only such build is the macOS type-check on Linux (rust/server/Cargo.toml).

use tonic::transport::Endpoint;

#[cfg(feature = "tls")]
pub(super) fn configure(endpoint: Endpoint, uri: &str) -> anyhow::Result<Endpoint> {
    endpoint
        .tls_config(tonic::transport::ClientTlsConfig::new().with_native_roots())
        .map_err(|e| anyhow::anyhow!("--upstream: TLS for {uri}: {e}"))
}

#[cfg(not(feature = "tls"))]
pub(super) fn configure(_endpoint: Endpoint, uri: &str) -> anyhow::Result<Endpoint> {
    anyhow::bail!("--upstream: {uri}: this clonestage was built without TLS (cargo feature `tls`)")
}
