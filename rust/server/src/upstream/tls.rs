//! TLS for `grpcs://` upstreams: rustls with the system's roots, behind the cargo feature
//! `tls` (on by default), or with Mozilla's roots compiled in, behind `tls-webpki` (the macOS
//! release archives, tools/release.sh); tonic trusts the roots of whichever is on. A build
//! with neither refuses a `grpcs://` upstream at startup, naming the features; the only such
//! build is the macOS type-check on Linux (rust/server/Cargo.toml).

use tonic::transport::Endpoint;

#[cfg(any(feature = "tls", feature = "tls-webpki"))]
pub(super) fn configure(endpoint: Endpoint, uri: &str) -> anyhow::Result<Endpoint> {
    endpoint
        .tls_config(tonic::transport::ClientTlsConfig::new().with_enabled_roots())
        .map_err(|e| anyhow::anyhow!("--upstream: TLS for {uri}: {e}"))
}

#[cfg(not(any(feature = "tls", feature = "tls-webpki")))]
pub(super) fn configure(_endpoint: Endpoint, uri: &str) -> anyhow::Result<Endpoint> {
    anyhow::bail!(
        "--upstream: {uri}: this clonestage was built without TLS (cargo feature `tls` or `tls-webpki`)"
    )
}
