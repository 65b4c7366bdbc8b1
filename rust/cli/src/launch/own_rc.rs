//! The launcher's own rc file: what it hands Bazel, and only when it hands Bazel the executor.
//! `build` lines only, which Bazel applies to the commands that inherit `build` (the ones
//! the launcher passes it to), so no command can fail on them; passed as
//! `--bazelrc=<cache>/launcher/bazelrc/<name>`:
//!
//! - the executor (`transport`), then clonestage's settings for this Bazel release
//!   (`bazel::settings`). Bazel reads `--bazelrc` files after the workspace's and the user's
//!   rc files (`OptionProcessor::GetRcFiles`), so these lines override a team's `build`
//!   lines, while a `--config` or flag on the command line still overrides them. The
//!   workspace's `.bazelrc` carries none of this: when the launcher stands aside, Bazel runs
//!   with exactly the team's own settings.
//! - Several `--bazelrc` are read in order, up to a `--bazelrc=/dev/null` (checked with 4.2.3;
//!   Bazel's "Write bazelrc configuration files" page says the same for 6.x to 8.x, e.g.
//!   bazel.build/versions/8.4.0/run/bazelrc; `GetAllUnaryOptionValues(..., "--bazelrc",
//!   "/dev/null")` in option_processor.cc).
//! - A different `--bazelrc` path does not restart Bazel's server: rc options travel with
//!   each command (`GetBlazercAndEnvCommandArgs`, `--default_override=`), and the startup
//!   options that the client compares to decide a restart (`GetServerExeArgs` in blaze.cc) do
//!   not include `--bazelrc` (checked with 4.2.3 too). The name still stays fixed per
//!   content: a short hash of it, so one cache serves workspaces on several Bazel releases
//!   without two launchers ever writing different text to one file.
//!
//! Written once (0600, in the 0700 launcher directory, through a temporary name and a rename),
//! then only `stat`ed on the fast path. It holds no secret: over TCP it `try-import`s the
//! server's private file.

use crate::bazel::{settings, Version};
use crate::launch::transport::Transport;
use clonestage_server::client::RunningServer;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The file's text for `server`, `transport` and Bazel `version`.
pub fn content(server: &RunningServer, transport: Transport, version: Option<Version>) -> String {
    let mut text = format!(
        "# Written by clonestage's launcher (tools/bazel, clonestage {}), which passes it to \
         Bazel as --bazelrc for the commands that build.\n\
         # Bazel {}, {}: the executor, then clonestage's settings (strategy/README.md).\n",
        crate::dirs::VERSION,
        version.map_or_else(|| "of unknown version".to_string(), |v| v.to_string()),
        match transport {
            Transport::Unix => "unix socket",
            Transport::Tcp => "loopback TCP (the token stays in the server's 0600 file)",
        },
    );
    text.push_str(&transport.executor_line(server));
    text.push('\n');
    for flag in settings::common() {
        text.push_str("build ");
        text.push_str(&flag);
        text.push('\n');
    }
    for row in settings::rows_for(version) {
        text.push_str(&row.rc_line("build"));
        text.push('\n');
    }
    text
}

/// Where `content` lives: `<cache>/launcher/bazelrc/<transport>-<version>-<hash>.bazelrc`.
pub fn path(cache: &Path, transport: Transport, version: Option<Version>, text: &str) -> PathBuf {
    let hash = clonestage_engine::Digest::of_bytes(text.as_bytes()).hex();
    cache.join("launcher").join("bazelrc").join(format!(
        "{}-{}-{}.bazelrc",
        transport.name(),
        version.map_or_else(|| "unknown".to_string(), |v| v.to_string()),
        &hash[..12]
    ))
}

/// Writes `text` at `path` unless it is there already; Err names the file.
pub fn ensure(path: &Path, text: &str) -> Result<(), String> {
    if path.is_file() {
        return Ok(());
    }
    write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().expect("the rc file is in a directory");
    crate::dirs::create_private(dir)?;
    let tmp = dir.join(format!(".tmp.{}", std::process::id()));
    let r = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(cache: &Path) -> RunningServer {
        RunningServer {
            cache: cache.to_path_buf(),
            pid: 1,
            tcp_port: Some(40001),
            socket: cache.join("server/clonestage.sock"),
            tcp_bazelrc: cache.join("server/tcp.bazelrc"),
            version: Some(crate::dirs::VERSION.to_string()),
        }
    }

    #[test]
    fn build_lines_only_with_the_executor_first() {
        let c = Path::new("/c");
        let text = content(&server(c), Transport::Unix, Version::parse("7.4.1"));
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines[0],
            "build --remote_executor=unix:/c/server/clonestage.sock"
        );
        assert!(lines.iter().all(|l| l.starts_with("build --")), "{text}");
        assert!(lines.contains(&"build --noremote_cache_compression  # Bazel 7.0.0 and later"));
        let text = content(&server(c), Transport::Tcp, None);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines[0], "try-import /c/server/tcp.bazelrc");
        assert!(
            lines[1..].iter().all(|l| l.starts_with("build --")),
            "{text}"
        );
        assert!(
            !text.contains("compression"),
            "no version-specific line: {text}"
        );
    }

    #[test]
    fn the_name_follows_the_content_and_the_file_is_written_once_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let v = Version::parse("7.4.1");
        let a = content(&server(d.path()), Transport::Unix, v);
        let b = content(&server(d.path()), Transport::Tcp, v);
        let (pa, pb) = (
            path(d.path(), Transport::Unix, v, &a),
            path(d.path(), Transport::Tcp, v, &b),
        );
        assert_ne!(pa, pb);
        assert!(pa
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("unix-7.4.1-"));
        ensure(&pa, &a).unwrap();
        assert_eq!(std::fs::read_to_string(&pa).unwrap(), a);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&pa), 0o600);
        assert_eq!(mode(pa.parent().unwrap()), 0o700);
        std::fs::write(&pa, "kept").unwrap();
        ensure(&pa, &a).unwrap();
        assert_eq!(
            std::fs::read_to_string(&pa).unwrap(),
            "kept",
            "not rewritten"
        );
    }
}
