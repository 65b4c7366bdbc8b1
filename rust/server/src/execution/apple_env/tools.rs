//! The programs and places the Apple environment is read from: `xcode-select -p`, Spotlight
//! (`mdfind`), the `Xcode*.app` bundles of the applications folders, each bundle's
//! `Contents/version.plist`, and `xcrun --sdk <sdk> --show-sdk-path`. Every program runs with a
//! bounded timeout in its own process group (killed whole when it hangs), with a minimal
//! environment, so a broken Xcode install gives an error naming the program, never a hang.
//!
//! The OS files say where these live (`macos.rs`: /usr/bin, /Applications); tests and
//! diagnostics point them at a directory of stub programs (`Tools::in_dir`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one tool may run. xcrun's first call after an Xcode install or switch fills its
/// own cache and can take seconds; a tool still running after this is taken to be hung.
pub(crate) const TOOL_TIMEOUT: Duration = Duration::from_secs(30);

/// Spotlight's query for Xcode bundles (the bundle id xcode-locator asks Launch Services for).
pub(crate) const XCODE_BUNDLE_QUERY: &str = "kMDItemCFBundleIdentifier == 'com.apple.dt.Xcode'";

/// Where the Apple tools and Xcode bundles are on one host.
#[derive(Debug, Clone)]
pub(crate) struct Tools {
    pub xcrun: PathBuf,
    pub xcode_select: PathBuf,
    pub mdfind: PathBuf,
    /// Converts a binary plist to XML (`plutil -convert xml1 -o - FILE`).
    pub plutil: PathBuf,
    /// Folders whose `Xcode*.app` are candidates; a bundle under one of them is preferred
    /// over one elsewhere of the same version (xcode-locator prefers /Applications/).
    pub applications: Vec<PathBuf>,
    /// The server's own `DEVELOPER_DIR` (the user pinned an Xcode), if set and non-empty.
    pub pinned_developer_dir: Option<String>,
    pub timeout: Duration,
}

/// A tool that could not answer: the message names the program, its arguments and what
/// happened (not found, exit status and stderr, or the timeout).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolError {
    pub message: String,
    /// The tool ran and said no (a non-zero exit, or nothing printed); false when it could
    /// not be run or did not answer in time, where asking it something else would not help.
    pub refused: bool,
}

impl ToolError {
    fn broken(message: String) -> ToolError {
        ToolError {
            message,
            refused: false,
        }
    }

    fn refused(message: String) -> ToolError {
        ToolError {
            message,
            refused: true,
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Tools {
    /// Stub programs `xcrun`, `xcode-select`, `mdfind`, `plutil` in `dir`, bundles in
    /// `dir/Applications`; the pin from the server's environment.
    pub fn in_dir(dir: &Path) -> Tools {
        Tools {
            xcrun: dir.join("xcrun"),
            xcode_select: dir.join("xcode-select"),
            mdfind: dir.join("mdfind"),
            plutil: dir.join("plutil"),
            applications: vec![dir.join("Applications")],
            pinned_developer_dir: pinned_from_env(),
            timeout: TOOL_TIMEOUT,
        }
    }

    /// Run `program args` with `DEVELOPER_DIR` set to `developer_dir` (and otherwise only a
    /// PATH); its trimmed stdout when it exits 0.
    pub fn run_tool(
        &self,
        program: &Path,
        args: &[&str],
        developer_dir: Option<&str>,
    ) -> Result<String, ToolError> {
        let shown = || {
            let mut s = program.display().to_string();
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        if let Some(d) = developer_dir {
            cmd.env("DEVELOPER_DIR", d);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::broken(format!("cannot run `{}`: {e}", shown())))?;
        let out = reader(child.stdout.take());
        let err = reader(child.stderr.take());
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if start.elapsed() >= self.timeout => {
                    // The whole group: a script's own children hold the pipes too.
                    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                    let _ = child.wait();
                    return Err(ToolError::broken(format!(
                        "`{}` did not answer within {:?}; killed",
                        shown(),
                        self.timeout
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(ToolError::broken(format!("wait for `{}`: {e}", shown()))),
            }
        };
        // A descendant that outlives the tool may keep a pipe open: wait only so long.
        let left = self
            .timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        let stdout = out.recv_timeout(left).unwrap_or_default();
        let stderr = err
            .recv_timeout(Duration::from_millis(100))
            .unwrap_or_default();
        if !status.success() {
            return Err(ToolError::refused(format!(
                "`{}` failed ({status}): {}",
                shown(),
                String::from_utf8_lossy(&stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&stdout).trim().to_string())
    }

    /// `xcode-select -p`: the selected developer dir (run without DEVELOPER_DIR, which it
    /// would otherwise echo back).
    pub fn selected_developer_dir(&self) -> Result<String, ToolError> {
        let d = self.run_tool(&self.xcode_select, &["-p"], None)?;
        if d.is_empty() {
            return Err(ToolError::refused(format!(
                "`{} -p` printed nothing",
                self.xcode_select.display()
            )));
        }
        Ok(d)
    }

    /// Xcode bundles Spotlight knows of, one path a line.
    pub fn spotlight(&self) -> Result<Vec<PathBuf>, ToolError> {
        let out = self.run_tool(&self.mdfind, &[XCODE_BUNDLE_QUERY], None)?;
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .collect())
    }

    /// `Xcode*.app` directly in the applications folders.
    pub fn applications_bundles(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for dir in &self.applications {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("Xcode") && name.ends_with(".app") {
                    found.push(e.path());
                }
            }
        }
        found
    }

    /// `CFBundleShortVersionString` and `ProductBuildVersion` of a bundle, from its
    /// `Contents/version.plist` (XML, or binary through plutil). None: not an Xcode bundle
    /// we can read (the reason is logged).
    pub fn bundle_version(&self, app: &Path) -> Option<(String, Option<String>)> {
        let plist = app.join("Contents/version.plist");
        let bytes = match std::fs::read(&plist) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(path = %plist.display(), error = %e, "not an Xcode bundle");
                return None;
            }
        };
        let xml = if bytes.starts_with(b"bplist") {
            let p = plist.to_string_lossy();
            match self.run_tool(&self.plutil, &["-convert", "xml1", "-o", "-", &p], None) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(path = %plist.display(), error = %e, "cannot read a binary version.plist");
                    return None;
                }
            }
        } else {
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let short = plist_string(&xml, "CFBundleShortVersionString")?;
        Some((short, plist_string(&xml, "ProductBuildVersion")))
    }

    /// `xcrun --sdk SDK --show-sdk-path` with that developer dir.
    pub fn sdk_path(&self, developer_dir: Option<&str>, sdk: &str) -> Result<String, ToolError> {
        let p = self.run_tool(
            &self.xcrun,
            &["--sdk", sdk, "--show-sdk-path"],
            developer_dir,
        )?;
        if p.is_empty() {
            return Err(ToolError::refused(format!(
                "`{} --sdk {sdk} --show-sdk-path` printed nothing",
                self.xcrun.display()
            )));
        }
        Ok(p)
    }
}

/// The server's `DEVELOPER_DIR`, if set and non-empty.
pub(crate) fn pinned_from_env() -> Option<String> {
    std::env::var_os("DEVELOPER_DIR")
        .map(|v| v.to_string_lossy().into_owned())
        .filter(|v| !v.is_empty())
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut p) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}

/// The `<string>` value following `<key>KEY</key>` in an XML plist (top-level keys of
/// version.plist are plain strings).
pub(crate) fn plist_string(xml: &str, key: &str) -> Option<String> {
    let tag = format!("<key>{key}</key>");
    let rest = &xml[xml.find(&tag)? + tag.len()..];
    let rest = rest.trim_start().strip_prefix("<string>")?;
    let v = &rest[..rest.find("</string>")?];
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_string())
}
