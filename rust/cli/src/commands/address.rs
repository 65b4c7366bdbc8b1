//! `clonestage address`: how Bazel reaches the running server. The bare form prints the
//! executor flag the launcher adds (the unix socket, Bazel 6+); `--tcp` the loopback
//! executor; `--bazelrc` the private rc file holding the TCP executor and token; and
//! `--for-bazel VERSION` the one `~/.bazelrc` line that works on that Bazel version, for
//! users without the launcher. Bazel 4.x/5.x exit 37 with no message on a `unix:` executor,
//! so the unix line is never printed without saying it is for Bazel 6+.

use std::path::Path;
use std::process::ExitCode;

/// What `clonestage address` prints.
pub enum AddressMode {
    /// `--remote_executor=unix://...` (what the launcher adds for Bazel 6+).
    Unix,
    /// `--remote_executor=grpc://127.0.0.1:<port>` (no token).
    Tcp,
    /// The path of `<cache>/server/tcp.bazelrc`.
    Bazelrc,
    /// The `.bazelrc` line for this Bazel version string.
    ForBazel(String),
}

/// The first Bazel release whose remote executor takes `unix://` addresses.
const FIRST_UNIX_MAJOR: u32 = 6;

/// Exit 0 with the lines on stdout; 3 when no server runs for `cache`; 2 for a version
/// string that names no Bazel release; 4 with `same_version` when the running server is
/// another clonestage version (tools/bazel then restarts it with its own).
pub fn address(cache: &Path, mode: AddressMode, same_version: bool) -> anyhow::Result<ExitCode> {
    if same_version {
        if let Err(m) = clonestage_server::check_same_version(cache) {
            eprintln!("clonestage: {m}");
            return Ok(ExitCode::from(4));
        }
    }
    let lines = match &mode {
        AddressMode::Unix => clonestage_server::address(cache, false),
        AddressMode::Tcp => clonestage_server::address(cache, true),
        AddressMode::Bazelrc => {
            clonestage_server::tcp_bazelrc(cache).map(|p| vec![p.display().to_string()])
        }
        AddressMode::ForBazel(version) => {
            let Some(major) = bazel_major(version) else {
                eprintln!(
                    "clonestage: cannot tell a Bazel release from {version:?}; pass its version \
                     as `bazel --version` prints it, e.g. --for-bazel 7.4.1 or --for-bazel 5 \
                     (Bazel {FIRST_UNIX_MAJOR}+ take the unix socket, 4.x/5.x the TCP rc file)"
                );
                return Ok(ExitCode::from(2));
            };
            rc_line(cache, major)
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

/// The `.bazelrc` line for Bazel `major`: the unix socket (6+; no token) or a `try-import` of
/// the server's private TCP rc file (4.x/5.x; the token stays in that 0600 file). Both paths
/// stay the same across server restarts.
fn rc_line(cache: &Path, major: u32) -> anyhow::Result<Vec<String>> {
    Ok(vec![if major >= FIRST_UNIX_MAJOR {
        let flag = clonestage_server::address(cache, false)?.remove(0);
        format!("build {}", rc_quote(&flag))
    } else {
        let path = clonestage_server::tcp_bazelrc(cache)?;
        format!("try-import {}", rc_quote(&path.display().to_string()))
    }])
}

/// The major release in what `bazel --version` (`bazel 7.4.1`), `bazel info release`
/// (`release 7.4.1`), .bazelversion or a person writes (`7`, `6.5.0rc2`, `8.x`). Development
/// builds (`bazel no_version`, `development version`) name none.
pub(crate) fn bazel_major(version: &str) -> Option<u32> {
    let v = version.trim();
    let v = v
        .strip_prefix("bazel ")
        .or_else(|| v.strip_prefix("release "))
        .unwrap_or(v)
        .trim();
    let digits: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
    let rest = &v[digits.len()..];
    if digits.is_empty() || !(rest.is_empty() || rest.starts_with('.')) {
        return None;
    }
    digits.parse().ok().filter(|m| *m > 0)
}

/// One rc-file word: Bazel splits rc lines at whitespace and honours double quotes.
fn rc_quote(word: &str) -> String {
    if word
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\')
    {
        format!("\"{}\"", word.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        word.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_from_the_forms_bazel_prints() {
        assert_eq!(bazel_major("4.2.3"), Some(4));
        assert_eq!(bazel_major("bazel 5.4.1"), Some(5));
        assert_eq!(bazel_major("release 6.0.0"), Some(6));
        assert_eq!(bazel_major("7"), Some(7));
        assert_eq!(bazel_major("8.0.0rc2\n"), Some(8));
        assert_eq!(bazel_major("8.x"), Some(8));
        assert_eq!(bazel_major("10.1.0"), Some(10));
        assert_eq!(bazel_major("bazel no_version"), None);
        assert_eq!(bazel_major("development version"), None);
        assert_eq!(bazel_major(""), None);
        assert_eq!(bazel_major("7rc"), None);
        assert_eq!(bazel_major("0.29.1"), None);
    }

    #[test]
    fn rc_words_with_spaces_are_quoted() {
        assert_eq!(rc_quote("/a/b"), "/a/b");
        assert_eq!(
            rc_quote("/Users/x/Library/Application Support/c"),
            "\"/Users/x/Library/Application Support/c\""
        );
        assert_eq!(rc_quote("a\"b"), "\"a\\\"b\"");
    }
}
