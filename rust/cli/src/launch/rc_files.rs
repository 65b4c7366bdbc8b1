//! What the launcher reads from the rc files Bazel reads: a `--digest_function` on a `startup`
//! line of the workspace's `.bazelrc` or the user's `~/.bazelrc` (the server hashes with
//! SHA-256 only, so another digest function makes the launcher stand aside). Bazel reads the
//! workspace's rc before the user's (`OptionProcessor::GetRcFiles` in
//! `src/main/cpp/option_processor.cc`), so a later value wins, and the command line wins over
//! both. Their `import` lines are not followed.

use std::path::{Path, PathBuf};

/// The effective `--digest_function` and where it came from (None: the command line).
#[derive(Debug, PartialEq, Eq)]
pub struct DigestFunction {
    pub value: String,
    pub from: Option<PathBuf>,
}

/// The digest function Bazel will use: the command line's, else the last `startup` line's of
/// the rc files in Bazel's order (`files`, those the command line did not turn off).
pub fn digest_function(command_line: Option<&str>, files: &[PathBuf]) -> Option<DigestFunction> {
    if let Some(v) = command_line {
        return Some(DigestFunction {
            value: v.to_string(),
            from: None,
        });
    }
    let mut found = None;
    for f in files {
        if let Some(v) = startup_digest_function(f) {
            found = Some(DigestFunction {
                value: v,
                from: Some(f.clone()),
            });
        }
    }
    found
}

/// The last `--digest_function` of the `startup` lines of rc file `path` (a missing or
/// unreadable file has none).
fn startup_digest_function(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut found = None;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        if words.next() != Some("startup") {
            continue;
        }
        while let Some(w) = words.next() {
            if let Some(v) = w.strip_prefix("--digest_function=") {
                found = Some(v.to_string());
            } else if w == "--digest_function" {
                found = words.next().map(str::to_string).or(found);
            }
        }
    }
    found
}

/// Whether `value` is SHA-256, the one function the server hashes with.
pub fn is_sha256(value: &str) -> bool {
    value.eq_ignore_ascii_case("sha256")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_startup_line_wins_and_the_command_line_over_all() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws.bazelrc");
        let home = d.path().join("home.bazelrc");
        std::fs::write(
            &ws,
            "build --jobs=2\nstartup --digest_function=sha256\n\
             startup --host_jvm_args=-Xmx1g   --digest_function  BLAKE3 # team setting\n\
             build --digest_function=ignored\n",
        )
        .unwrap();
        let files = [ws.clone(), home.clone()];
        let got = digest_function(None, &files).unwrap();
        assert_eq!(got.value, "BLAKE3");
        assert_eq!(got.from.as_deref(), Some(ws.as_path()));
        std::fs::write(&home, "startup --digest_function=SHA256\n").unwrap();
        let got = digest_function(None, &files).unwrap();
        assert!(is_sha256(&got.value));
        assert_eq!(got.from.as_deref(), Some(home.as_path()));
        let got = digest_function(Some("blake3"), &files).unwrap();
        assert_eq!((got.value.as_str(), got.from), ("blake3", None));
        assert_eq!(digest_function(None, &[d.path().join("missing")]), None);
    }
}
