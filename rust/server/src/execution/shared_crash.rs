//! Whether a failed action died on a shared cache directory (`clonestage_engine::shared`), and
//! which: then `respond` clears those directories and runs the action once more, so a cache
//! left corrupt by a crash or a killed compiler never fails builds from then on.
//!
//! The rule. The command failed (not a timeout), its stderr names a shared directory linked
//! into its root (the action-relative path, which absolute paths in the root end with, or the
//! persistent directory's own path), and either
//! - it crashed: it died of a signal, or a compiler below it did and said so: LLVM's crash
//!   report (`Stack dump:` from llvm/lib/Support/PrettyStackTrace.cpp, `PLEASE submit a bug
//!   report` from the same file's bug-report message), clang's driver
//!   (`err_drv_command_signalled`, "... command failed due to signal", DiagnosticDriverKinds.td)
//!   or swiftc's (`error_command_signalled`, "... failed due to signal", swift's
//!   DiagnosticsDriver.def); a Swift frontend's stack dump lists its arguments, and with them
//!   `-module-cache-path`, which names the directory;
//! - or clang reported a module file it could not use (clang's
//!   DiagnosticSerializationKinds.td, llvm/llvm-project 03447f51): `err_fe_pch_malformed`
//!   "malformed or corrupted AST file", `err_fe_pch_malformed_block` "malformed block record
//!   in", `err_module_file_invalid` "is not a valid precompiled", `err_module_file_out_of_date`
//!   "is out of date and needs to be rebuilt", `err_fe_module_file_modified` "has been modified
//!   since the module file", and `note_module_cache_path` "please delete the module cache at",
//!   which asks for exactly this recovery.
//!
//! A compiler bug that crashes whatever the cache holds costs one more run (the second result
//! is the answer, and the directory is built again by the next compiles); a failure that does
//! not name a shared directory, or names none of these, is the action's own and is answered
//! as it is. Only stderr is read, at most `READ_MAX` bytes of it (its head and its tail).

use super::spawn::SpawnStats;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Bytes of stderr looked at: the first and the last half of this.
const READ_MAX: u64 = 4 << 20;

const CRASH_SIGNS: [&str; 3] = [
    "Stack dump:",
    "PLEASE submit a bug report",
    "failed due to signal",
];

const CORRUPTION_SIGNS: [&str; 6] = [
    "malformed or corrupted AST file",
    "malformed block record in",
    "is not a valid precompiled",
    "is out of date and needs to be rebuilt",
    "has been modified since the module file",
    "please delete the module cache at",
];

/// The action-relative paths of the shared directories this failed action crashed on (empty:
/// the failure is the action's own).
pub(crate) fn named_caches(
    stats: &SpawnStats,
    stderr: &Path,
    dirs: &[(String, PathBuf)],
) -> Vec<String> {
    if dirs.is_empty() || stats.timed_out || (stats.exit_code == 0 && stats.signal == 0) {
        return Vec::new();
    }
    let text = read_bounded(stderr);
    let crashed = stats.signal != 0 || CRASH_SIGNS.iter().any(|s| text.contains(s));
    let corrupt = CORRUPTION_SIGNS.iter().any(|s| text.contains(s));
    if !crashed && !corrupt {
        return Vec::new();
    }
    dirs.iter()
        .filter(|(rel, target)| {
            text.contains(rel.as_str()) || text.contains(&*target.to_string_lossy())
        })
        .map(|(rel, _)| rel.clone())
        .collect()
}

fn read_bounded(p: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(p) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    if len <= READ_MAX {
        let _ = f.read_to_end(&mut buf);
    } else {
        let half = READ_MAX / 2;
        let _ = (&mut f).take(half).read_to_end(&mut buf);
        buf.extend_from_slice(b"\n");
        if f.seek(SeekFrom::Start(len - half)).is_ok() {
            let _ = f.take(half).read_to_end(&mut buf);
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REL: &str = "bazel-out/k8-fastbuild/bin/_swift_module_cache";

    fn check(stats: SpawnStats, stderr: &str) -> Vec<String> {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("stderr");
        std::fs::write(&p, stderr).unwrap();
        let dirs = vec![
            (
                REL.to_string(),
                PathBuf::from("/c/shared/0123-_swift_module_cache"),
            ),
            (
                "bazel-out/k8-fastbuild/bin/_objc_module_cache".to_string(),
                PathBuf::from("/c/shared/4567-_objc_module_cache"),
            ),
        ];
        named_caches(&stats, &p, &dirs)
    }

    fn failed(code: i32, signal: i32) -> SpawnStats {
        SpawnStats {
            exit_code: code,
            signal,
            ..Default::default()
        }
    }

    #[test]
    fn a_corrupt_module_file_in_the_cache_is_recovered() {
        let e = format!(
            "<unknown>:0: error: fatal error: malformed or corrupted AST file: '/w/root/{REL}/3K/Foundation-1QX.pcm'\n"
        );
        assert_eq!(check(failed(1, 0), &e), vec![REL.to_string()]);
        let note = "note: after modifying system headers, please delete the module cache at '/c/shared/0123-_swift_module_cache/3K'";
        assert_eq!(check(failed(1, 0), note), vec![REL.to_string()]);
    }

    #[test]
    fn a_crash_whose_report_names_the_cache_is_recovered() {
        let dump = format!(
            "Stack dump:\n0.\tProgram arguments: swift-frontend -frontend -c -module-cache-path {REL} x.swift\n"
        );
        assert_eq!(check(failed(1, 0), &dump), vec![REL.to_string()]);
        // Killed by a signal itself, naming the directory.
        assert_eq!(
            check(failed(134, 6), &format!("reading {REL}/x.pcm\n")),
            vec![REL.to_string()]
        );
    }

    #[test]
    fn failures_of_the_action_itself_are_left_alone() {
        // A compile error in the action's own code.
        assert!(check(
            failed(1, 0),
            "x.swift:1:1: error: cannot find 'y' in scope\n"
        )
        .is_empty());
        // A crash that does not name a shared directory.
        assert!(check(
            failed(1, 0),
            "Stack dump:\n0. Program arguments: swiftc x.swift\n"
        )
        .is_empty());
        // A cache path named by an ordinary error (no crash, no corruption).
        assert!(check(
            failed(1, 0),
            &format!("error: could not build module in {REL}\n")
        )
        .is_empty());
        // Success and timeouts never recover.
        let dump = format!("Stack dump:\n -module-cache-path {REL}\n");
        assert!(check(failed(0, 0), &dump).is_empty());
        let timed = SpawnStats {
            exit_code: 124,
            timed_out: true,
            ..Default::default()
        };
        assert!(check(timed, &dump).is_empty());
    }

    #[test]
    fn a_huge_stderr_is_read_at_its_head_and_tail_only() {
        let mut e = format!("fatal error: malformed or corrupted AST file: '{REL}/a.pcm'\n");
        e.push_str(&"x".repeat((READ_MAX * 2) as usize));
        assert_eq!(check(failed(1, 0), &e), vec![REL.to_string()]);
    }
}
