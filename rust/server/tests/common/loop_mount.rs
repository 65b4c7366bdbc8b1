//! The loop mounts `.ci/mount-cow.sh` makes (XFS, btrfs, ext4), as the integration tests of the
//! server and of the CLI find them: one file, included by both crates' `tests/common`.

/// The loop mount `.ci/mount-cow.sh` exported in `var` (`CLONESTAGE_TEST_XFS`, ...); None (a
/// skip, said on stderr) when unset, a failure when `CLONESTAGE_REQUIRE_FS=1` (CI).
pub fn loop_mount(var: &str) -> Option<std::path::PathBuf> {
    match std::env::var_os(var) {
        Some(p) if !p.is_empty() => Some(p.into()),
        _ if std::env::var("CLONESTAGE_REQUIRE_FS").as_deref() == Ok("1") => {
            panic!("{var} is not set but CLONESTAGE_REQUIRE_FS=1: run .ci/mount-cow.sh")
        }
        _ => {
            eprintln!("SKIP: {var} not set (run .ci/mount-cow.sh as root)");
            None
        }
    }
}
