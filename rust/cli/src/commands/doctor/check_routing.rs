//! `routing` (macOS): whether this workspace's Xcode config keeps Apple actions away from
//! clonestage. Bazel's `XcodeConfigInfo` (Starlark `XcodeVersionConfig`) adds `no-remote` to
//! its `execution_info()` when the selected Xcode's availability is LOCAL
//! (bazelbuild/bazel src/main/java/com/google/devtools/build/lib/rules/apple/XcodeConfigInfo.java,
//! the constructor's switch on availability); apple_support's `xcode_config` computes that
//! availability from `local_versions`/`remote_versions` (apple_support 2.8.0
//! xcode/xcode_config.bzl, `_resolve_xcode_from_local_and_remote`), and rules_swift copies
//! the requirements onto every Swift action. Such actions never reach a remote executor.
//!
//! How it tells: in the workspace the doctor runs in, `bazel cquery
//! 'deps(@bazel_tools//tools/osx:current_xcode_config)' --output=starlark` (the alias of
//! whatever `--xcode_version_config` names; the query IDE plugins use) prints each target's
//! `XcodeVersionConfig` availability and execution_info. Skipped off macOS (Bazel routes by
//! Xcode config only there), outside a Bazel workspace, and without Bazel.

use super::report::Outcome;
use super::{platform, tail, Context};
use std::path::{Path, PathBuf};

const QUERY: &str = "deps(@bazel_tools//tools/osx:current_xcode_config)";
const EXPR: &str = "(str(target.label) + \" availability=\" + providers(target)[\"XcodeVersionConfig\"].availability() + \" execution_info=\" + str(providers(target)[\"XcodeVersionConfig\"].execution_info())) if providers(target) and \"XcodeVersionConfig\" in providers(target) else \"\"";

pub fn check(ctx: &mut Context) -> Outcome {
    if !platform::APPLE {
        return Outcome::skip(format!(
            "Bazel marks Apple actions no-remote by their Xcode config only on macOS hosts; nothing to route on {}",
            platform::NAME
        ));
    }
    let Some(ws) = std::env::current_dir().ok().and_then(|d| workspace_of(&d)) else {
        return Outcome::skip("not run inside a Bazel workspace: run clonestage doctor from your workspace to check its Xcode config");
    };
    let Some(bazel) = ctx.bazel.clone() else {
        return Outcome::skip("no bazel to query the workspace's Xcode config with (--bazel PATH)");
    };
    let out = std::process::Command::new(&bazel)
        .args(["cquery", QUERY, "--output=starlark"])
        .arg(format!("--starlark:expr={EXPR}"))
        .current_dir(&ws)
        .stdin(std::process::Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => return Outcome::fail(format!("cannot run {}: {e}", bazel.display())),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Outcome::fail(format!(
            "`bazel cquery '{QUERY}'` failed in {}: {}",
            ws.display(),
            tail(&String::from_utf8_lossy(&out.stderr), 3)
        ));
    }
    verdict(&text, &ws)
}

/// The nearest directory at or above `dir` holding a WORKSPACE, WORKSPACE.bazel or
/// MODULE.bazel file.
fn workspace_of(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| {
            ["MODULE.bazel", "WORKSPACE", "WORKSPACE.bazel"]
                .iter()
                .any(|f| d.join(f).is_file())
        })
        .map(Path::to_path_buf)
}

/// Read the query's lines (`LABEL availability=A execution_info={...}`).
fn verdict(text: &str, ws: &Path) -> Outcome {
    let configs: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" availability="))
        .collect();
    let Some(first) = configs.first() else {
        return Outcome::fail(format!(
            "no Xcode config found in {} (no XcodeVersionConfig among the deps of @bazel_tools//tools/osx:current_xcode_config)",
            ws.display()
        ));
    };
    if let Some(local) = configs.iter().find(|l| l.contains("\"no-remote\"")) {
        return Outcome::fail(format!(
            "this workspace's Xcode config marks Apple actions no-remote, so SwiftCompile and ObjcCompile never reach clonestage ({local}): the selected Xcode is available only locally; list it under remote_versions too (availability both), or pass --xcode_version to one that is"
        ));
    }
    Outcome::pass(format!(
        "Apple actions may run remote: {} (no no-remote in its execution_info)",
        first.trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_only_xcode_is_found_and_named() {
        let ws = Path::new("/ws");
        let local = "@@apple_support+//xcode:host_xcodes availability=local execution_info={\"requires-darwin\": \"\", \"no-remote\": \"\", \"supports-xcode-requirements-set\": \"\"}\n\n";
        let o = verdict(local, ws);
        assert_eq!(o.status, super::super::report::Status::Fail);
        assert!(
            o.detail.contains("no-remote") && o.detail.contains("host_xcodes"),
            "{}",
            o.detail
        );
        let both = "//:xcodes availability=both execution_info={\"requires-darwin\": \"\", \"supports-xcode-requirements-set\": \"\"}\n";
        assert_eq!(verdict(both, ws).status, super::super::report::Status::Pass);
        assert_eq!(
            verdict("\n\n", ws).status,
            super::super::report::Status::Fail
        );
    }

    #[test]
    fn the_workspace_is_found_from_a_subdirectory() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("MODULE.bazel"), "").unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        assert_eq!(
            workspace_of(&t.path().join("a/b")).as_deref(),
            Some(t.path())
        );
    }
}
