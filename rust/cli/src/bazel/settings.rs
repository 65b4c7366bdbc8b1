//! clonestage's Bazel settings, defined once: the `build` flags the launcher applies whenever
//! it hands Bazel the executor (its own rc file, `launch::own_rc`), and that
//! `strategy/clonestage.bazelrc` repeats as `build:clonestage` for users without the launcher
//! (a test below checks the two agree, line for line). Flags that only some Bazel releases
//! have are rows of `VERSIONED`, each naming the releases that have it, so that the Bazel
//! actually running decides which apply; `address --for-bazel VERSION` prints the same rows.
//! An unknown version (a development build's `no_version`) gets none of them: an unknown
//! flag fails every command that reads it ("Unrecognized option", exit 2).
//!
//! `strategy/README.md` says why each setting is there.

use super::Version;

/// The compile mnemonics clonestage takes even where a team routes them elsewhere
/// (`--strategy=<M>=remote,local`; a per-mnemonic strategy beats `--spawn_strategy`), and
/// whose Xcode-given `no-remote` it removes on Bazel 7.2+ (`NO_REMOTE_REMOVAL`).
///
/// rules_swift's action names, read at the tags of the releases supported (1.0.0-1.18.0,
/// 2.0.0-2.9.0, 3.0.0-3.6.1): `swift/internal/actions.bzl` (`swift_action_names`, 1.x) and
/// `swift/internal/action_names.bzl` (2.x and 3.x).
/// - `SwiftCompile`, `SwiftDeriveFiles`, `SwiftDumpAST`, `SwiftPrecompileCModule`: every
///   release (1.0.0 actions.bzl:31-46; 3.6.1 action_names.bzl:24, 31, 34, 42).
/// - `SwiftCompileModuleInterface`: 1.10.0 and later (1.18.0 actions.bzl:38; 3.6.1
///   action_names.bzl:27).
/// - `SwiftSymbolGraphExtract`: 2.0.0 and later (2.0.0 and 3.6.1 action_names.bzl:47).
/// - `SwiftSynthesizeInterface`: 3.0.0 and later (3.0.0 and 3.6.1 action_names.bzl:50).
///
/// `SwiftCompileModule` and `SwiftCompileCodegen` are registered by no release (3.x's symbol
/// graph aspect names `SwiftCompileModule` in a filter, swift_symbol_graph_aspect.bzl:102 at
/// 3.0.0, but no action has it). `SwiftModuleWrap` and `SwiftAutolinkExtract` (ELF only) are
/// small and follow `--spawn_strategy`. `ObjcCompile` and `CppCompile` are the C-family
/// compiles (Bazel's, and apple_support's toolchain for Apple targets).
pub const COMPILE_MNEMONICS: &[&str] = &[
    "SwiftCompile",
    "SwiftDeriveFiles",
    "SwiftDumpAST",
    "SwiftPrecompileCModule",
    "SwiftCompileModuleInterface",
    "SwiftSymbolGraphExtract",
    "SwiftSynthesizeInterface",
    "ObjcCompile",
    "CppCompile",
];

/// The settings every Bazel from 4.2.3 on takes (4.2.3 is checked by tests/teamrc).
pub fn common() -> Vec<String> {
    let mut lines = vec![
        "--spawn_strategy=remote,local".to_string(),
        "--remote_local_fallback".to_string(),
        "--remote_download_outputs=all".to_string(),
    ];
    lines.extend(
        COMPILE_MNEMONICS
            .iter()
            .map(|m| format!("--strategy={m}=remote,local")),
    );
    lines.push("--remote_cache=".to_string());
    lines.push("--disk_cache=".to_string());
    lines
}

/// One flag that some Bazel releases have: `from` (inclusive) up to `before` (exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub flag: String,
    pub from: Version,
    pub before: Option<Version>,
}

impl Versioned {
    pub fn applies_to(&self, v: Version) -> bool {
        v >= self.from
            && match self.before {
                Some(b) => v < b,
                None => true,
            }
    }

    /// The rc line for `command` (`build`, `build:clonestage`), naming the releases that
    /// have the flag in a trailing comment.
    pub fn rc_line(&self, command: &str) -> String {
        format!("{command} {}  # {}", self.flag, self.releases())
    }

    /// "Bazel 7.2.0 to 8.x", "Bazel 7.0.0 and later".
    pub fn releases(&self) -> String {
        match self.before {
            Some(b) if b.minor == 0 && b.patch == 0 => {
                format!("Bazel {} to {}.x", self.from, b.major - 1)
            }
            Some(b) => format!("Bazel {} up to (not including) {b}", self.from),
            None => format!("Bazel {} and later", self.from),
        }
    }
}

/// `--modify_execution_info` removing `no-remote` from the compile mnemonics. apple_support's
/// `xcode_config` marks every Apple action `no-remote` when the selected Xcode is available
/// only locally (Bazel's `XcodeConfigInfo` constructor, `case LOCAL:
/// builder.put(ExecutionRequirements.NO_REMOTE, "")`), rules_swift copies that onto each Swift
/// action (`execution_requirements = xcode_config.execution_info()`,
/// swift/toolchains/xcode_swift_toolchain.bzl:850 at 3.6.1, :734 at 2.0.0,
/// swift/internal/xcode_swift_toolchain.bzl:642 at 1.18.0) and apple_support's C++/ObjC
/// toolchain onto its compiles (crosstool/cc_toolchain_config.bzl:106 at HEAD), and no
/// `--strategy` overrides `no-remote`. clonestage runs on the machine that has that Xcode,
/// so the reason for the key does not hold for it. The pattern must match the whole
/// mnemonic (`ExecutionInfoModifier.apply`: `pattern().matcher(mnemonic).matches()`), and
/// expressions are split at commas, so it is one alternation.
pub fn no_remote_removal() -> String {
    format!(
        "--modify_execution_info={}=-no-remote",
        COMPILE_MNEMONICS.join("|")
    )
}

/// The version-specific rows, each with the releases that have the flag.
///
/// - `--noexperimental_remote_cache_compression` / `--noremote_cache_compression`: no zstd
///   over loopback, where a team's compression costs CPU for nothing. The flag came in 5.0.0
///   as `experimental_remote_cache_compression` (bazel PR 14277, "[5.x] Remote: Add support
///   for compression on gRPC cache", in the 5.0.0 release commit 3c156f3) and was renamed in
///   7.0.0 (bazel PR 17990, April 2023, on the 7.0 branch's master), keeping the old name as
///   `oldName` (RemoteOptions.java: `name = "remote_cache_compression", oldName =
///   "experimental_remote_cache_compression"`). 4.2.3 rejects both (checked here).
/// - `--incompatible_modify_execution_info_additive`: several `--modify_execution_info`
///   compose instead of the last one winning (`ExecutionInfoModifier.apply`:
///   `executionInfoList.getLast()` unless additive). In Bazel from 7.2.0 (bazel PR 22316,
///   "[7.2.0] Make --modify_execution_info additive"); on by default from 9.0 (bazel PR
///   25643, April 2025; ExecutionOptions.java at master: `defaultValue = "true"`), so it is
///   not passed there, where a later release may drop the flag. 4.2.3 rejects it (checked).
/// - `no_remote_removal()`: only where it composes with a team's own `--modify_execution_info`
///   lines and `--config=clonestage_local_links` (7.2.0 and later); before that, one more
///   `--modify_execution_info` would silently replace theirs.
///
/// `--experimental_remote_merkle_tree_cache` (5.0.0 on; bazel commit 3947c83) is not here:
/// 4.2.3 rejects it (checked), so nothing here can measure it, bazel issue 18686 reports it
/// slowing builds, bazel-lib dropped it from its presets, and Bazel's master no longer
/// accepts it (bazel issue 28271).
pub fn versioned() -> Vec<Versioned> {
    let row = |flag: &str, from, before| Versioned {
        flag: flag.to_string(),
        from,
        before,
    };
    vec![
        row(
            "--noexperimental_remote_cache_compression",
            Version::new(5, 0, 0),
            Some(Version::new(7, 0, 0)),
        ),
        row("--noremote_cache_compression", Version::new(7, 0, 0), None),
        row(
            "--incompatible_modify_execution_info_additive",
            Version::new(7, 2, 0),
            Some(Version::new(9, 0, 0)),
        ),
        row(&no_remote_removal(), Version::new(7, 2, 0), None),
    ]
}

/// The version-specific rows for `version`; none for an unknown one.
pub fn rows_for(version: Option<Version>) -> Vec<Versioned> {
    let Some(v) = version else {
        return Vec::new();
    };
    versioned()
        .into_iter()
        .filter(|row| row.applies_to(v))
        .collect()
}

/// The version-specific flags for `version`; none for an unknown one.
#[cfg(test)]
pub fn for_version(version: Option<Version>) -> Vec<String> {
    rows_for(version).into_iter().map(|row| row.flag).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(v: &str) -> Vec<String> {
        for_version(Version::parse(v))
    }

    #[test]
    fn each_release_line_gets_only_the_flags_it_has() {
        assert!(flags("4.2.3").is_empty());
        assert!(flags("bazel no_version").is_empty());
        assert_eq!(
            flags("5.4.1"),
            ["--noexperimental_remote_cache_compression"]
        );
        assert_eq!(
            flags("6.5.0"),
            ["--noexperimental_remote_cache_compression"]
        );
        assert_eq!(flags("7.1.2"), ["--noremote_cache_compression"]);
        assert_eq!(
            flags("7.2.0"),
            [
                "--noremote_cache_compression".to_string(),
                "--incompatible_modify_execution_info_additive".to_string(),
                no_remote_removal()
            ]
        );
        assert_eq!(flags("8.4.2").len(), 3);
        assert_eq!(
            flags("9.0.0"),
            [
                "--noremote_cache_compression".to_string(),
                no_remote_removal()
            ]
        );
        // `7.x` may be 7.0 or 7.1: no flag that came in 7.2.
        assert_eq!(flags("7.x"), ["--noremote_cache_compression"]);
    }

    #[test]
    fn the_removal_names_every_compile_mnemonic_in_one_expression() {
        let r = no_remote_removal();
        assert!(!r.contains(','), "Bazel splits expressions at commas: {r}");
        assert_eq!(r.matches('=').count(), 2, "{r}");
        for m in COMPILE_MNEMONICS {
            assert!(r.contains(m), "{m}");
        }
    }

    #[test]
    fn the_release_ranges_read_as_bazel_versions() {
        let rows = versioned();
        assert_eq!(rows[0].releases(), "Bazel 5.0.0 to 6.x");
        assert_eq!(rows[1].releases(), "Bazel 7.0.0 and later");
        assert_eq!(rows[2].releases(), "Bazel 7.2.0 to 8.x");
    }

    /// strategy/clonestage.bazelrc's `build:clonestage` lines are this table's common lines,
    /// in order; its opt-in `clonestage_swift_only` names the same mnemonics.
    #[test]
    fn the_shipped_bazelrc_says_what_the_launcher_applies() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../strategy/clonestage.bazelrc"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let config = |name: &str| -> Vec<String> {
            let prefix = format!("build:{name} ");
            text.lines()
                .filter_map(|l| l.strip_prefix(&prefix))
                .map(|f| f.trim().to_string())
                .collect()
        };
        assert_eq!(config("clonestage"), common());
        let swift_only: Vec<String> = config("clonestage_swift_only")
            .into_iter()
            .filter_map(|f| {
                Some(
                    f.strip_prefix("--strategy=")?
                        .split('=')
                        .next()?
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(swift_only, COMPILE_MNEMONICS);
        for v in versioned() {
            assert!(
                !text.contains(&format!("build:clonestage {}", v.flag)),
                "{}",
                v.flag
            );
        }
    }

    #[test]
    fn no_mnemonic_that_no_rules_swift_release_registers() {
        for gone in ["SwiftCompileModule", "SwiftCompileCodegen"] {
            assert!(!COMPILE_MNEMONICS.contains(&gone));
        }
    }
}
