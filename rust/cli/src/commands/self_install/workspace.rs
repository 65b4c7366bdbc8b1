//! The workspace half of `clonestage self-install` (what `bazel run @clonestage//:install`
//! does after building the binaries): the launcher copied to `tools/bazel` (Bazelisk and
//! Bazel's wrapper only run `<workspace>/tools/bazel`), the bazelrc to
//! `tools/clonestage.bazelrc`, and one line in the workspace's `.bazelrc`:
//!
//! ```text
//! try-import %workspace%/tools/clonestage.bazelrc
//! ```
//!
//! which defines clonestage's configs (`clonestage_swift_only`, `clonestage_local_links`,
//! ...) without applying any: a machine without clonestage builds exactly as before. The
//! launcher applies clonestage's settings itself, and only when it hands Bazel the executor.
//!
//! Installs before this one also appended `build --config=clonestage`, which applied those
//! settings (resetting a team's `--remote_cache` and `--disk_cache`) even where the launcher
//! stood aside. `--check` reports that line and an install removes it, with the comment line
//! it came with; any other `--config=clonestage` in the file is named, not touched.

use super::binaries::same;
use std::path::{Path, PathBuf};

/// The line that imports the configs.
pub const IMPORT_LINE: &str = "try-import %workspace%/tools/clonestage.bazelrc";
/// What earlier installs appended, and no longer should be there.
const OLD_CONFIG_LINE: &str = "build --config=clonestage";
const OLD_COMMENT_PREFIX: &str = "# clonestage: actions run through clonestage serve (added by";
/// The header line every clonestage launcher, old and new, carries.
const LAUNCHER_MARK: &str = "# tools/bazel: clonestage's Bazel launcher";

/// The workspace's `.bazelrc`, as the install sees it.
pub struct Bazelrc {
    pub path: PathBuf,
    text: String,
}

impl Bazelrc {
    pub fn read(workspace: &Path) -> Bazelrc {
        let path = workspace.join(".bazelrc");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        Bazelrc { path, text }
    }

    /// Whether a line imports tools/clonestage.bazelrc.
    pub fn imports(&self) -> bool {
        self.text.lines().any(|l| {
            let w: Vec<&str> = words(l);
            matches!(w.as_slice(), ["import" | "try-import", p] if p.ends_with("tools/clonestage.bazelrc"))
        })
    }

    /// The line numbers (1-based) of the old `build --config=clonestage` line.
    pub fn old_config_lines(&self) -> Vec<usize> {
        let old: Vec<&str> = OLD_CONFIG_LINE.split(' ').collect();
        self.lines_where(|w| w == old.as_slice())
    }

    /// Other lines that name `--config=clonestage` (e.g. `build:ci --config=clonestage`).
    pub fn other_config_lines(&self) -> Vec<(usize, String)> {
        let old = self.old_config_lines();
        self.text
            .lines()
            .enumerate()
            .filter(|(i, l)| !old.contains(&(i + 1)) && words(l).contains(&"--config=clonestage"))
            .map(|(i, l)| (i + 1, l.trim().to_string()))
            .collect()
    }

    fn lines_where(&self, f: impl Fn(&[&str]) -> bool) -> Vec<usize> {
        self.text
            .lines()
            .enumerate()
            .filter(|(_, l)| f(&words(l)))
            .map(|(i, _)| i + 1)
            .collect()
    }

    /// The text with the old line (and the comment an install put above it) removed and the
    /// import appended when missing.
    pub fn fixed(&self) -> String {
        let old = self.old_config_lines();
        let kept: Vec<&str> = self
            .text
            .lines()
            .enumerate()
            .filter(|(i, l)| {
                let old_comment = !old.is_empty() && l.starts_with(OLD_COMMENT_PREFIX);
                !old.contains(&(i + 1)) && !old_comment
            })
            .map(|(_, l)| l)
            .collect();
        let mut text = kept.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        if !self.imports() {
            text.push_str(
                "# clonestage's configs (opt-in: they apply only when named). The launcher \
                 tools/bazel\n# applies clonestage's settings itself, only when it runs the \
                 build through clonestage.\n",
            );
            text.push_str(IMPORT_LINE);
            text.push('\n');
        }
        text
    }

    /// Whether `fixed` would change the file.
    pub fn needs_fix(&self) -> bool {
        !self.imports() || !self.old_config_lines().is_empty()
    }

    pub fn write_fixed(&self) -> std::io::Result<()> {
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(&tmp, self.fixed())?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// A line's words, without a trailing comment.
fn words(line: &str) -> Vec<&str> {
    line.split('#')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect()
}

/// Whether `path` is one of clonestage's launchers (the shim or an older one).
pub fn is_launcher(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .map(|t| t.lines().take(5).any(|l| l.starts_with(LAUNCHER_MARK)))
        .unwrap_or(false)
}

/// What the install reports for one copy: up to date, or to be (re)placed.
pub fn copy_state(src: &Path, dst: &Path) -> &'static str {
    if same(src, dst) {
        "up to date"
    } else {
        "missing or out of date"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(text: &str) -> Bazelrc {
        Bazelrc {
            path: PathBuf::from("/ws/.bazelrc"),
            text: text.to_string(),
        }
    }

    #[test]
    fn an_empty_file_gets_the_import_only() {
        let r = rc("");
        assert!(r.needs_fix());
        let fixed = r.fixed();
        assert!(fixed.ends_with(&format!("{IMPORT_LINE}\n")), "{fixed}");
        assert!(!fixed.contains("--config=clonestage"), "{fixed}");
        assert!(!rc(&fixed).needs_fix());
    }

    #[test]
    fn an_old_install_loses_its_config_line_and_its_comment_and_keeps_the_rest() {
        let old = format!(
            "build --disk_cache=/team\n\n{OLD_COMMENT_PREFIX} bazel run @clonestage//:install)\n\
             {IMPORT_LINE}\nbuild --config=clonestage\ntest --test_output=errors\n\
             build:ci --config=clonestage\n"
        );
        let r = rc(&old);
        assert_eq!(r.old_config_lines(), [5]);
        assert_eq!(
            r.other_config_lines(),
            [(7, "build:ci --config=clonestage".to_string())]
        );
        assert!(r.needs_fix());
        let fixed = r.fixed();
        assert_eq!(
            fixed,
            format!(
                "build --disk_cache=/team\n\n{IMPORT_LINE}\ntest --test_output=errors\n\
                 build:ci --config=clonestage\n"
            )
        );
        assert!(!rc(&fixed).needs_fix());
    }

    #[test]
    fn a_hand_written_import_counts() {
        let r = rc("try-import %workspace%/tools/clonestage.bazelrc # ours\n");
        assert!(r.imports() && !r.needs_fix());
        assert!(!rc("# try-import %workspace%/tools/clonestage.bazelrc\n").imports());
    }
}
