//! `clonestage address`: how Bazel reaches the running server. The bare form prints the
//! executor flag the launcher adds (the unix socket, Bazel 6+); `--tcp` the loopback
//! executor; `--bazelrc` the private rc file holding the TCP executor and token; and
//! `--for-bazel VERSION` the `~/.bazelrc` lines for that Bazel version, for users without the
//! launcher: the executor line that works there, then the version-specific settings of the
//! launcher's own table (`bazel::settings`) as `build:clonestage` lines, which apply with
//! `--config=clonestage` as the launcher applies them. Bazel 4.x/5.x exit 37 with no message
//! on a `unix:` executor, so the unix line is never printed without saying it is for Bazel 6+.

use crate::bazel::{rc_word, settings, Version};
use crate::launch::FIRST_UNIX_MAJOR;
use clonestage_server::client::{self, AddressForm};
use std::path::Path;
use std::process::ExitCode;

/// What `clonestage address` prints.
pub enum AddressMode {
    /// `--remote_executor=unix:/...` (the executor the launcher gives Bazel 6+).
    Unix,
    /// `--remote_executor=grpc://127.0.0.1:<port>` (no token).
    Tcp,
    /// The path of `<cache>/server/tcp.bazelrc`.
    Bazelrc,
    /// The `.bazelrc` line for this Bazel version string.
    ForBazel(String),
}

/// Exit 0 with the lines on stdout; 3 when no server runs for `cache`; 2 for a version
/// string that names no Bazel release; 4 with `same_version` when the running server is
/// another clonestage version (tools/bazel then restarts it with its own).
pub fn address(cache: &Path, mode: AddressMode, same_version: bool) -> anyhow::Result<ExitCode> {
    if same_version {
        if let Err(m) = client::check_same_version(cache) {
            eprintln!("clonestage: {m}");
            return Ok(ExitCode::from(4));
        }
    }
    let lines = match &mode {
        AddressMode::Unix => client::address(cache, AddressForm::Unix),
        AddressMode::Tcp => client::address(cache, AddressForm::Tcp),
        AddressMode::Bazelrc => client::tcp_bazelrc(cache).map(|p| vec![p.display().to_string()]),
        AddressMode::ForBazel(version) => {
            let Some(v) = Version::parse(version) else {
                eprintln!(
                    "clonestage: cannot tell a Bazel release from {version:?}; pass its version \
                     as `bazel --version` prints it, e.g. --for-bazel 7.4.1 or --for-bazel 5 \
                     (Bazel {FIRST_UNIX_MAJOR}+ take the unix socket, 4.x/5.x the TCP rc file)"
                );
                return Ok(ExitCode::from(2));
            };
            rc_lines(cache, v)
        }
    };
    match lines {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            if matches!(mode, AddressMode::Unix) {
                // The launcher reads stdout only; a person pasting this line gets told that
                // an older Bazel would die on it without a word.
                eprintln!(
                    "clonestage: this executor is for Bazel {FIRST_UNIX_MAJOR}+ (Bazel 4.x/5.x \
                     exit 37 without a message on unix: addresses); `clonestage address \
                     --for-bazel VERSION` prints the ~/.bazelrc line for yours"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("clonestage: {e:#}");
            Ok(ExitCode::from(3))
        }
    }
}

/// The `.bazelrc` lines for Bazel `v`: the unix socket (6+; no token) or a `try-import` of the
/// server's private TCP rc file (4.x/5.x; the token stays in that 0600 file), both the same
/// across server restarts; then the settings only some releases have, as `build:clonestage`.
fn rc_lines(cache: &Path, v: Version) -> anyhow::Result<Vec<String>> {
    let mut lines = vec![if v.major >= FIRST_UNIX_MAJOR {
        let flag = client::address(cache, AddressForm::Unix)?.remove(0);
        format!("build {}", rc_word(&flag))
    } else {
        let path = client::tcp_bazelrc(cache)?;
        format!("try-import {}", rc_word(&path.display().to_string()))
    }];
    lines.extend(
        settings::rows_for(Some(v))
            .iter()
            .map(|row| row.rc_line("build:clonestage")),
    );
    Ok(lines)
}
