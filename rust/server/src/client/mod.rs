//! The client side of the server: what the CLI and the launcher ask of the server running on
//! a cache (`clonestage address`, `status`, `stop`, `doctor`, `tools/bazel`'s launcher). It
//! reads the files the server writes (`layout`) and the lock it holds (`server_lock`), and
//! signals it; it never talks to it over gRPC and never touches the serving state.
//!
//! A module of the server crate rather than a crate of its own: it reads exactly the file
//! formats the server writes (`layout`: the `tcp-port` text, the paths) and the lock's holder
//! (`server_lock`), which stay defined once, beside their writer. The layering is one way and
//! checked by `tests/layout/check.py`: the serving code does not import `client`, and
//! `client` imports no service, nor the shared state or the server's start.

mod address;
mod running;
mod stop;

pub use address::{address, tcp_bazelrc, AddressForm};
pub use running::{
    check_same_version, running, upstream_description, RunningServer, VersionMismatch,
};
pub use stop::{stop, Stopped};
