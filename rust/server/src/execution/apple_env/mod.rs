//! The Apple environment of an action, resolved the way Bazel's `XcodeLocalEnvProvider` does
//! for local spawns. A remotely executed Apple action carries only `XCODE_VERSION_OVERRIDE`,
//! `APPLE_SDK_PLATFORM` and `APPLE_SDK_VERSION_OVERRIDE`; the executor is to add:
//! - `DEVELOPER_DIR`: the Xcode whose version matches `XCODE_VERSION_OVERRIDE` as Bazel's
//!   xcode-locator matches (full `X.Y.Z.BUILD`, `X.Y.Z`, `X.Y`, `X`; a bundle under the
//!   applications folder beats one elsewhere, then the newer one wins a shared prefix), among
//!   the bundles of `xcode-select -p`, the server's own `DEVELOPER_DIR`, Spotlight and
//!   `/Applications/Xcode*.app`. Without an override: the server's `DEVELOPER_DIR` (the user's
//!   pin), else `xcode-select -p`.
//! - `SDKROOT`: `xcrun --sdk <sdk> --show-sdk-path` run with that `DEVELOPER_DIR` (with the
//!   action's own one when it carries one): `<platform><APPLE_SDK_VERSION_OVERRIDE>` first, as
//!   Bazel 4.2.3 asks, then the platform alone, as Bazel 8-9 ask (`sdk`).
//!
//! `TMPDIR` is not Apple's: every action gets it (`tmpdir`).
//!
//! A variable the action sets itself wins (nothing is looked up for it). Answers are cached
//! per (version, platform, SDK version, the action's own DEVELOPER_DIR) for the server's life
//! in one mutex map; failures are not cached (an Xcode installed later is found). Two first
//! lookups of the same key at the same time both run the tools (the lock is not held while
//! they run) and store the same answer. A version that is not installed, or a tool that fails
//! or hangs (bounded by `tools::TOOL_TIMEOUT`), fails the action with FAILED_PRECONDITION
//! naming what was asked and what is installed; the server carries on.
//!
//! Actions without those keys are untouched. On a host without Xcode (Linux) nothing is
//! resolved and the environment passes through unchanged, as Bazel's Linux provider does;
//! the server says so once in its log. Where the tools are is the OS side (`linux.rs`,
//! `macos.rs`); `CLONESTAGE_APPLE_TOOLS=DIR` (tests and diagnostics only) takes stub programs
//! and bundles from DIR instead, on any OS.

mod sdk;
mod tools;

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod os;

#[cfg(test)]
mod tests;

pub(crate) use tools::Tools;

use crate::failure::Failure;
use bazel_remote_apis::build::bazel::remote::execution::v2::command::EnvironmentVariable;
use std::cmp::Ordering as Cmp;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

pub(crate) const XCODE_VERSION: &str = "XCODE_VERSION_OVERRIDE";
pub(crate) const SDK_PLATFORM: &str = "APPLE_SDK_PLATFORM";
pub(crate) const SDK_VERSION: &str = "APPLE_SDK_VERSION_OVERRIDE";
/// Test/diagnostic only: a directory of stub `xcrun`, `xcode-select`, `mdfind`, `plutil`
/// and an `Applications/` folder, used instead of the host's.
pub(crate) const TOOLS_DIR_ENV: &str = "CLONESTAGE_APPLE_TOOLS";

/// What one lookup depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    version: Option<String>,
    platform: Option<String>,
    sdk_version: Option<String>,
    /// The action's own DEVELOPER_DIR (then none is looked up, and xcrun runs with it).
    developer_dir: Option<String>,
    /// False when the action sets SDKROOT itself.
    want_sdkroot: bool,
}

/// What a lookup found: the values to add (None: the action has its own, or none applies).
#[derive(Debug, Clone, PartialEq)]
struct Resolved {
    developer_dir: Option<String>,
    sdkroot: Option<String>,
}

pub(crate) struct AppleEnv {
    /// None: this host has no Xcode; Apple keys pass through.
    tools: Option<Tools>,
    cache: Mutex<HashMap<Key, Resolved>>,
    said_pass_through: AtomicBool,
    /// Keys whose failure was logged as a warning: Bazel's `--remote_local_fallback` runs
    /// such an action locally without a word, so the server's log says it, once per key.
    warned: Mutex<HashSet<Key>>,
}

impl AppleEnv {
    /// The host's tools (`CLONESTAGE_APPLE_TOOLS` first).
    pub fn for_this_host() -> AppleEnv {
        match std::env::var_os(TOOLS_DIR_ENV).filter(|v| !v.is_empty()) {
            Some(dir) => {
                tracing::warn!(
                    dir = %Path::new(&dir).display(),
                    "{TOOLS_DIR_ENV} is set: Apple tools and Xcode bundles come from this directory (tests and diagnostics only)"
                );
                AppleEnv::new(Some(Tools::in_dir(Path::new(&dir))))
            }
            None => AppleEnv::new(os::tools()),
        }
    }

    pub fn new(tools: Option<Tools>) -> AppleEnv {
        AppleEnv {
            tools,
            cache: Mutex::new(HashMap::new()),
            said_pass_through: AtomicBool::new(false),
            warned: Mutex::new(HashSet::new()),
        }
    }

    /// Whether this host has Xcode tools to resolve with (false on Linux: keys pass through).
    pub fn resolves(&self) -> bool {
        self.tools.is_some()
    }

    /// The variables to add to an action's environment: none for an action without the Apple
    /// keys or on a host without Xcode; never one the action sets itself.
    pub fn additions(
        &self,
        env: &[EnvironmentVariable],
    ) -> Result<Vec<(&'static str, String)>, Failure> {
        let get = |n: &str| env.iter().find(|v| v.name == n).map(|v| v.value.clone());
        let (version, platform) = (get(XCODE_VERSION), get(SDK_PLATFORM));
        if version.is_none() && platform.is_none() {
            return Ok(Vec::new());
        }
        let Some(tools) = &self.tools else {
            if !self.said_pass_through.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    "an action carries {XCODE_VERSION}/{SDK_PLATFORM}, but this host has no Xcode: \
                     DEVELOPER_DIR and SDKROOT are not resolved and the environment passes through unchanged \
                     (as Bazel's local provider does on Linux); said once"
                );
            }
            return Ok(Vec::new());
        };
        let key = Key {
            version,
            want_sdkroot: platform.is_some() && get("SDKROOT").is_none(),
            platform,
            sdk_version: get(SDK_VERSION),
            developer_dir: get("DEVELOPER_DIR"),
        };
        let cached = self.cache.lock().unwrap().get(&key).cloned();
        let r = match cached {
            Some(r) => r,
            None => {
                // Not under the lock: a slow xcrun must not hold up other keys' actions.
                let r = match resolve(tools, &key) {
                    Ok(r) => r,
                    Err(f) => {
                        if self.warned.lock().unwrap().insert(key) {
                            tracing::warn!(error = %f.message(), "an Apple action cannot run here (said once per Xcode/SDK asked for)");
                        }
                        return Err(f);
                    }
                };
                tracing::info!(
                    version = key.version.as_deref().unwrap_or("-"),
                    platform = key.platform.as_deref().unwrap_or("-"),
                    sdk_version = key.sdk_version.as_deref().unwrap_or("-"),
                    developer_dir = r
                        .developer_dir
                        .as_deref()
                        .or(key.developer_dir.as_deref())
                        .unwrap_or("-"),
                    sdkroot = r.sdkroot.as_deref().unwrap_or("-"),
                    "Apple environment resolved (cached for the server's life)"
                );
                self.cache.lock().unwrap().insert(key, r.clone());
                r
            }
        };
        let mut add = Vec::new();
        if let Some(d) = r.developer_dir {
            add.push(("DEVELOPER_DIR", d));
        }
        if let Some(s) = r.sdkroot {
            add.push(("SDKROOT", s));
        }
        Ok(add)
    }
}

fn precondition(m: String) -> Failure {
    Failure::FailedPrecondition(m)
}

/// Run the lookups `key` needs.
fn resolve(t: &Tools, key: &Key) -> Result<Resolved, Failure> {
    let developer_dir = match (&key.developer_dir, &key.version) {
        (Some(_), _) => None,
        (None, Some(v)) => Some(locate(t, v)?),
        (None, None) => Some(match &t.pinned_developer_dir {
            Some(p) => p.clone(),
            None => t.selected_developer_dir().map_err(|e| {
                precondition(format!(
                    "the action asks for an Apple SDK ({SDK_PLATFORM}) without {XCODE_VERSION}, and no Xcode is selected on this host: {e}"
                ))
            })?,
        }),
    };
    let sdkroot = match (&key.platform, key.want_sdkroot) {
        (Some(platform), true) => {
            let dd = key.developer_dir.as_deref().or(developer_dir.as_deref());
            Some(sdk::root(t, dd, platform, key.sdk_version.as_deref())?)
        }
        _ => None,
    };
    Ok(Resolved {
        developer_dir,
        sdkroot,
    })
}

/// An installed Xcode.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Installed {
    /// `X.Y.Z` or `X.Y.Z.BUILD`, as xcode-locator expands it.
    pub version: String,
    pub developer_dir: String,
    /// Under an applications folder (preferred over, e.g., a mounted image).
    pub preferred: bool,
}

/// The `.app` bundle of a developer dir (`<app>/Contents/Developer`); None for, e.g., the
/// Command Line Tools.
fn bundle_of(developer_dir: &str) -> Option<PathBuf> {
    let p = Path::new(developer_dir.trim_end_matches('/'));
    if p.ends_with("Contents/Developer") {
        p.parent()?.parent().map(Path::to_path_buf)
    } else {
        None
    }
}

/// Every Xcode this host has, and what could not be asked (a failing tool is not fatal while
/// another source may still find the version).
fn installed(t: &Tools) -> (Vec<Installed>, Vec<String>) {
    let mut notes = Vec::new();
    let mut bundles = Vec::new();
    match t.selected_developer_dir() {
        Ok(d) => bundles.extend(bundle_of(&d)),
        Err(e) => notes.push(e.message),
    }
    if let Some(p) = &t.pinned_developer_dir {
        bundles.extend(bundle_of(p));
    }
    match t.spotlight() {
        Ok(found) => bundles.extend(found),
        Err(e) => notes.push(e.message),
    }
    bundles.extend(t.applications_bundles());
    let apps: Vec<PathBuf> = t
        .applications
        .iter()
        .map(|a| a.canonicalize().unwrap_or_else(|_| a.clone()))
        .collect();
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for b in bundles {
        let b = b.canonicalize().unwrap_or(b);
        if !seen.insert(b.clone()) {
            continue;
        }
        let Some((short, build)) = t.bundle_version(&b) else {
            continue;
        };
        found.push(Installed {
            version: expand_version(&short, build.as_deref()),
            developer_dir: b.join("Contents/Developer").to_string_lossy().into_owned(),
            preferred: apps.iter().any(|a| b.starts_with(a)),
        });
    }
    found.sort_by(|a, b| a.developer_dir.cmp(&b.developer_dir));
    (found, notes)
}

/// The developer dir of the Xcode `want` names, or FAILED_PRECONDITION naming it and the
/// installed ones.
fn locate(t: &Tools, want: &str) -> Result<String, Failure> {
    let (found, notes) = installed(t);
    let table = version_table(&found);
    if let Some(&i) = table.get(want) {
        return Ok(found[i].developer_dir.clone());
    }
    let list = if found.is_empty() {
        "none".to_string()
    } else {
        found
            .iter()
            .map(|x| format!("{} at {}", x.version, x.developer_dir))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let places: Vec<String> = t
        .applications
        .iter()
        .map(|a| format!("{}/Xcode*.app", a.display()))
        .collect();
    let mut m = format!(
        "Xcode {want} ({XCODE_VERSION}) is not installed on the clonestage server's host; installed: {list} \
         (looked at xcode-select -p, the server's DEVELOPER_DIR, Spotlight and {}). \
         Install Xcode {want}, or build with --xcode_version naming an installed one",
        places.join(", ")
    );
    if !notes.is_empty() {
        m.push_str(&format!("; could not ask: {}", notes.join("; ")));
    }
    Err(precondition(m))
}

/// At least three components (`15` -> `15.0.0`), then `.BUILD` when the bundle has one.
pub(crate) fn expand_version(short: &str, build: Option<&str>) -> String {
    let mut v = short.trim().to_string();
    for _ in v.split('.').count()..3 {
        v.push_str(".0");
    }
    if let Some(b) = build.filter(|b| !b.is_empty()) {
        v.push('.');
        v.push_str(b);
    }
    v
}

/// Dotted versions compared component by component, numerically where both are numbers.
pub(crate) fn compare_versions(a: &str, b: &str) -> Cmp {
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return Cmp::Equal,
            (None, Some(_)) => return Cmp::Less,
            (Some(_), None) => return Cmp::Greater,
            (Some(p), Some(q)) => {
                let c = match (p.parse::<u64>(), q.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    _ => p.cmp(q),
                };
                if c != Cmp::Equal {
                    return c;
                }
            }
        }
    }
}

/// Every name an installed Xcode answers to, as xcode-locator builds its table: the full
/// version and each shorter prefix. A bundle elsewhere than the applications folder never
/// replaces a name already taken; one under it takes a full version, and a shared prefix
/// from a bundle elsewhere or from an older one. (xcode-locator compares version strings, so
/// 9 sorts above 10; numbers here, which is what its comment intends.)
pub(crate) fn version_table(found: &[Installed]) -> HashMap<String, usize> {
    let mut table: HashMap<String, usize> = HashMap::new();
    for (i, e) in found.iter().enumerate() {
        if table.contains_key(&e.version) && !e.preferred {
            continue;
        }
        table.insert(e.version.clone(), i);
        let mut sub = e.version.as_str();
        while let Some(dot) = sub.rfind('.') {
            if dot == 0 {
                break;
            }
            sub = &sub[..dot];
            match table.get(sub) {
                Some(&j) => {
                    let old = &found[j];
                    let better = e.preferred
                        && (!old.preferred
                            || compare_versions(&e.version, &old.version) == Cmp::Greater);
                    if better {
                        table.insert(sub.to_string(), i);
                    }
                }
                None => {
                    table.insert(sub.to_string(), i);
                }
            }
        }
    }
    table
}
