//! Where the server keeps its files inside a cache directory. One place, so `serve`,
//! `address` and the tests agree:
//!
//! ```text
//! <cache>/server/            0700: only the owner may reach the socket or read the token
//! <cache>/server/lock        flock'ed by the running server; holds its pid
//! <cache>/server/clonestage.sock   the unix socket (0600)
//! <cache>/server/token       the TCP token, 64 hex digits (0600)
//! <cache>/server/tcp-port    the loopback port and the server's pid, one per line,
//!                            written once the server is ready
//! <cache>/server/tcp.bazelrc the Bazel rc lines for TCP: executor and token header (0600);
//!                            written at start, removed at a clean stop
//! <cache>/server/last-port   the TCP port of the last start, tried first by the next one
//! <cache>/server/version     the running server's clonestage version (`0.1.0\n`), written
//!                            before tcp-port, so a ready server's file is its own; read by
//!                            `address --same-version`, `status` and tools/bazel
//! <cache>/work/<id>/         one action's work dir: root/ (the staged input root), stdout,
//!                            stderr; removed after the action (by the janitor while no
//!                            action runs), swept at start
//! <cache>/work-making/<id>/  a work dir made ahead of time while it is being filled; renamed
//!                            into work/ once whole, so no reader of work/ sees half of one;
//!                            swept at start
//! <cache>/ac/<hh>/<hash>-<size>    ActionResult messages keyed by action digest
//! <cache>/server/upstream    the running server's upstream (`URL (instance "N", write M)`),
//!                            for `clonestage status`; absent without one
//! <cache>/upstream/queue/<hash>-<size>  results waiting for upload (`upstream::write_behind`)
//! ```
//!
//! The work dirs sit inside the cache so outputs move into the CAS by rename.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub cache: PathBuf,
}

impl Layout {
    pub fn new(cache: &Path) -> Layout {
        Layout {
            cache: cache.to_path_buf(),
        }
    }

    pub fn server_dir(&self) -> PathBuf {
        self.cache.join("server")
    }

    pub fn lock(&self) -> PathBuf {
        self.server_dir().join("lock")
    }

    pub fn socket(&self) -> PathBuf {
        self.server_dir().join("clonestage.sock")
    }

    pub fn token(&self) -> PathBuf {
        self.server_dir().join("token")
    }

    pub fn tcp_port(&self) -> PathBuf {
        self.server_dir().join("tcp-port")
    }

    pub fn tcp_bazelrc(&self) -> PathBuf {
        self.server_dir().join("tcp.bazelrc")
    }

    pub fn version(&self) -> PathBuf {
        self.server_dir().join("version")
    }

    pub fn last_port(&self) -> PathBuf {
        self.server_dir().join("last-port")
    }

    pub fn upstream(&self) -> PathBuf {
        self.server_dir().join("upstream")
    }

    pub fn work_dir(&self) -> PathBuf {
        self.cache.join("work")
    }

    pub fn work_making_dir(&self) -> PathBuf {
        self.cache.join("work-making")
    }

    pub fn ac_dir(&self) -> PathBuf {
        self.cache.join("ac")
    }
}

/// What the server writes into `tcp-port` once it is ready.
pub(crate) fn tcp_port_text(port: u16) -> String {
    format!("{port}\n{}\n", std::process::id())
}

/// The port and writer pid in a `tcp-port` file's text.
pub(crate) fn parse_tcp_port(text: &str) -> Option<(u16, i32)> {
    let mut lines = text.lines();
    let port = lines.next()?.trim().parse().ok()?;
    let pid = lines.next()?.trim().parse().ok()?;
    Some((port, pid))
}
