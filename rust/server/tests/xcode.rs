//! The Apple environment end to end: a server whose Apple tools are stub programs
//! (`CLONESTAGE_APPLE_TOOLS`, test/diagnostic only) runs `env` for an action carrying
//! `XCODE_VERSION_OVERRIDE`/`APPLE_SDK_PLATFORM`/`APPLE_SDK_VERSION_OVERRIDE`, and the command
//! sees DEVELOPER_DIR, SDKROOT and TMPDIR; an Xcode that is not installed makes that action a
//! failed one (exit 1) whose stderr names it, and the server carries on. One test function:
//! the variable is set once, before the server reads it.

mod common;

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn stub(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn xcode(dir: &Path, name: &str, short: &str, build: &str) -> String {
    let app = dir.join("Applications").join(name);
    std::fs::create_dir_all(app.join("Contents/Developer")).unwrap();
    std::fs::write(
        app.join("Contents/version.plist"),
        format!(
            "<plist version=\"1.0\"><dict><key>CFBundleShortVersionString</key><string>{short}</string>\
             <key>ProductBuildVersion</key><string>{build}</string></dict></plist>"
        ),
    )
    .unwrap();
    app.join("Contents/Developer")
        .to_string_lossy()
        .into_owned()
}

fn env_cmd(vars: &[(&str, &str)]) -> pb::Command {
    let mut c = sh("env");
    for (k, v) in vars {
        c.environment_variables
            .push(pb::command::EnvironmentVariable {
                name: k.to_string(),
                value: v.to_string(),
            });
    }
    c.environment_variables.sort_by(|a, b| a.name.cmp(&b.name));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apple_actions_get_developer_dir_sdkroot_and_tmpdir() {
    let tools = tempfile::tempdir().unwrap();
    // Canonical: on macOS /var is a symlink, and bundles are reported by their real paths.
    let t = &tools.path().canonicalize().unwrap();
    let x14 = xcode(t, "Xcode_14.3.1.app", "14.3.1", "14E300");
    let x15 = xcode(t, "Xcode_15.2.app", "15.2", "15C500b");
    stub(t, "xcode-select", &format!("echo '{x14}'"));
    stub(t, "mdfind", "exit 0");
    stub(
        t,
        "xcrun",
        r#"case "$2" in iphonesimulator17.2|iphonesimulator) echo "$DEVELOPER_DIR/SDKs/$2.sdk" ;; *) echo "no SDK $2" >&2; exit 1 ;; esac"#,
    );
    std::env::set_var("CLONESTAGE_APPLE_TOOLS", t);
    std::env::remove_var("DEVELOPER_DIR");

    let mut s = TestServer::start().await;
    let mut c = s.clients().await;
    let root = empty_root(&mut c).await;
    let apple = [
        ("APPLE_SDK_PLATFORM", "iPhoneSimulator"),
        ("APPLE_SDK_VERSION_OVERRIDE", "17.2"),
        ("XCODE_VERSION_OVERRIDE", "15.2.0.15C500b"),
    ];

    let action = upload_action(&mut c, &env_cmd(&apple), root, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    assert_eq!(resp.status.as_ref().map_or(0, |s| s.code), 0, "{resp:?}");
    let r = resp.result.unwrap();
    let out = String::from_utf8(c.read_proto(r.stdout_digest.as_ref().unwrap()).await).unwrap();
    assert_eq!(r.exit_code, 0, "{out}");
    let tmpdir = std::env::var("TMPDIR")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    for want in [
        format!("DEVELOPER_DIR={x15}\n"),
        format!("SDKROOT={x15}/SDKs/iphonesimulator17.2.sdk\n"),
        format!("TMPDIR={tmpdir}\n"),
        "XCODE_VERSION_OVERRIDE=15.2.0.15C500b\n".to_string(),
    ] {
        assert!(
            out.contains(&want),
            "{want:?} not in the action's env:\n{out}"
        );
    }

    // An SDK version this Xcode lacks: the platform alone, as Bazel 8-9 ask xcrun for it.
    let mut other_sdk = apple;
    other_sdk[1] = ("APPLE_SDK_VERSION_OVERRIDE", "17.4");
    let action = upload_action(&mut c, &env_cmd(&other_sdk), root, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    let r = resp.result.unwrap();
    let out = String::from_utf8(c.read_proto(r.stdout_digest.as_ref().unwrap()).await).unwrap();
    assert_eq!(r.exit_code, 0, "{out}");
    let want = format!("SDKROOT={x15}/SDKs/iphonesimulator.sdk\n");
    assert!(
        out.contains(&want),
        "{want:?} not in the action's env:\n{out}"
    );

    // A non-Apple action's environment is what it carries, plus the TMPDIR every action gets.
    let action = upload_action(&mut c, &env_cmd(&[("FOO", "1")]), root, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    let r = resp.result.unwrap();
    let out = String::from_utf8(c.read_proto(r.stdout_digest.as_ref().unwrap()).await).unwrap();
    for absent in ["DEVELOPER_DIR=", "SDKROOT="] {
        assert!(
            !out.contains(absent),
            "{absent} in a non-Apple action's env:\n{out}"
        );
    }
    assert!(out.contains(&format!("TMPDIR={tmpdir}\n")), "{out}");

    // An Xcode that is not installed: the action fails (exit 1, status OK, so Bazel prints its
    // stderr and never falls back to a silent local run), naming it and the installed ones.
    let mut missing = apple;
    missing[2] = ("XCODE_VERSION_OVERRIDE", "16.1");
    let action = upload_action(&mut c, &env_cmd(&missing), root, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    assert_eq!(resp.status.as_ref().map_or(0, |s| s.code), 0, "{resp:?}");
    let r = resp.result.expect("a failed action's result");
    assert_eq!(r.exit_code, 1, "{r:?}");
    let err = String::from_utf8(c.read_proto(r.stderr_digest.as_ref().unwrap()).await).unwrap();
    for want in ["Xcode 16.1", "14.3.1.14E300 at ", "15.2.0.15C500b at "] {
        assert!(
            err.contains(want),
            "{want:?} not in the action's stderr: {err}"
        );
    }
    assert!(
        c.cached_result(action).await.is_err(),
        "a failure is not cached"
    );

    // The server carries on: the first action runs again.
    let action = upload_action(&mut c, &env_cmd(&apple), root, None, false).await;
    let (_, resp) = c.execute(action, true).await;
    assert_eq!(resp.status.as_ref().map_or(0, |s| s.code), 0, "{resp:?}");
    s.stop().await;
}
