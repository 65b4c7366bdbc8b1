//! Linux: no Xcode, no code-signature verification at exec (nothing to exempt a session
//! from), and ext4, the common root filesystem, has no clones: hardlinks are staging's
//! supported path there.

pub const NAME: &str = "Linux";
pub const APPLE: bool = false;
pub const CLONES_EXPECTED: bool = false;
/// Enough to time the first runs; there are no kills to count.
pub const EXEC_RUNS: u32 = 20;

pub fn developer_tool_status() -> Option<String> {
    None
}

/// The Debian package (and its version) that installed `bazel`, for distribution builds that
/// are unstamped (Debian's bazel-bootstrap says `bazel no_version`): `dpkg-query -S` of its
/// real path, then `dpkg-query -W`. None without dpkg or when no package owns it.
pub fn packaged_version(bazel: &std::path::Path) -> Option<(String, String)> {
    let real = std::fs::canonicalize(bazel).ok()?;
    let q = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new("dpkg-query")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let owner = q(&["-S".as_ref(), real.as_os_str()])?;
    let package = owner.split(':').next()?.trim().to_string();
    let version = q(&["-W".as_ref(), "-f=${Version}".as_ref(), package.as_ref()])?;
    (!version.is_empty()).then_some((package, version))
}
