//! `clonestage self-install`: what it puts where (the per-version home the launcher reads
//! first), atomically and 0755, and the spawn paths it refuses (exit 2, nothing written); with
//! --launcher, what it does to a workspace: the launcher and bazelrc copies, the one .bazelrc
//! line, --check, the migration from older installs, --force, --as and --no-bazelrc.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn self_install(home: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .arg("self-install")
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap()
}

fn fake_spawn(dir: &Path, mode: u32) -> std::path::PathBuf {
    let p = dir.join("my-spawn");
    std::fs::write(&p, "#!/bin/sh\necho spawn\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "self-install failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn installs_both_binaries_into_the_per_version_home() {
    let t = tempfile::tempdir().unwrap();
    let spawn = fake_spawn(t.path(), 0o700);
    let o = self_install(t.path(), &["--spawn".as_ref(), spawn.as_os_str()]);
    let want = t
        .path()
        .join(".local/share/clonestage")
        .join(VERSION)
        .join("bin");
    assert_eq!(stdout(&o), want.display().to_string());
    assert_eq!(
        std::fs::read(want.join("clonestage-spawn")).unwrap(),
        std::fs::read(&spawn).unwrap()
    );
    assert_eq!(
        std::fs::read(want.join("clonestage")).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_clonestage")).unwrap()
    );
    assert_eq!(mode(&want.join("clonestage")), 0o755);
    assert_eq!(mode(&want.join("clonestage-spawn")), 0o755);
    // The copy runs and is this version.
    let v = Command::new(want.join("clonestage"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("clonestage {VERSION}")
    );
    // No temporary names left behind.
    let mut names: Vec<String> = std::fs::read_dir(&want)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["clonestage", "clonestage-spawn"]);
}

#[test]
fn xdg_data_home_and_dir_choose_the_directory() {
    let t = tempfile::tempdir().unwrap();
    let spawn = fake_spawn(t.path(), 0o755);
    let xdg = t.path().join("xdg");
    let o = Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .args(["self-install", "--spawn"])
        .arg(&spawn)
        .env("HOME", t.path())
        .env("XDG_DATA_HOME", &xdg)
        .output()
        .unwrap();
    let want = xdg.join("clonestage").join(VERSION).join("bin");
    assert_eq!(stdout(&o), want.display().to_string());
    assert!(want.join("clonestage").is_file());

    let dir = t.path().join("elsewhere/bin");
    let o = self_install(
        t.path(),
        &[
            "--spawn".as_ref(),
            spawn.as_os_str(),
            "--dir".as_ref(),
            dir.as_os_str(),
        ],
    );
    assert_eq!(stdout(&o), dir.display().to_string());
    assert!(dir.join("clonestage-spawn").is_file());
}

#[test]
fn a_second_install_replaces_the_first() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("bin");
    let spawn = fake_spawn(t.path(), 0o755);
    let args = [
        "--spawn".as_ref(),
        spawn.as_os_str(),
        "--dir".as_ref(),
        dir.as_os_str(),
    ];
    stdout(&self_install(t.path(), &args));
    std::fs::write(&spawn, "#!/bin/sh\necho newer\n").unwrap();
    stdout(&self_install(t.path(), &args));
    assert_eq!(
        std::fs::read_to_string(dir.join("clonestage-spawn")).unwrap(),
        "#!/bin/sh\necho newer\n"
    );
}

#[test]
fn refuses_a_spawn_that_is_not_an_executable_regular_file() {
    let t = tempfile::tempdir().unwrap();
    let not_exec = fake_spawn(t.path(), 0o644);
    let a_dir = t.path().join("a-dir");
    std::fs::create_dir(&a_dir).unwrap();
    std::fs::set_permissions(&a_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let missing = t.path().join("missing");
    let dest = t.path().join("dest");
    for (spawn, why) in [
        (&not_exec, "is not executable"),
        (&a_dir, "is not a regular file"),
        (&missing, "cannot stat"),
    ] {
        let o = self_install(
            t.path(),
            &[
                "--spawn".as_ref(),
                spawn.as_os_str(),
                "--dir".as_ref(),
                dest.as_os_str(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{spawn:?}: {err}");
        assert!(
            err.contains(&spawn.display().to_string()) && err.contains(why),
            "{spawn:?}: {err}"
        );
        assert!(!dest.exists(), "{spawn:?} created {dest:?}");
    }
}

/// The files `bazel run @clonestage//:install` hands to `self-install --launcher`.
struct Install {
    t: tempfile::TempDir,
    ws: std::path::PathBuf,
    launcher: std::path::PathBuf,
    bazelrc: std::path::PathBuf,
    spawn: std::path::PathBuf,
}

impl Install {
    fn new() -> Install {
        let t = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let ws = t.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let spawn = fake_spawn(t.path(), 0o755);
        Install {
            launcher: root.join("tools/bazel"),
            bazelrc: root.join("strategy/clonestage.bazelrc"),
            t,
            ws,
            spawn,
        }
    }

    fn run(&self, extra: &[&str]) -> Output {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "--spawn".as_ref(),
            self.spawn.as_os_str(),
            "--launcher".as_ref(),
            self.launcher.as_os_str(),
            "--bazelrc".as_ref(),
            self.bazelrc.as_os_str(),
        ];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        args.push(self.ws.as_os_str());
        self_install(self.t.path(), &args)
    }

    fn home_bin(&self) -> std::path::PathBuf {
        self.t
            .path()
            .join(".local/share/clonestage")
            .join(VERSION)
            .join("bin")
    }

    fn bazelrc_text(&self) -> String {
        std::fs::read_to_string(self.ws.join(".bazelrc")).unwrap_or_default()
    }
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_workspace_install_adds_the_import_and_applies_no_config() {
    let i = Install::new();
    std::fs::write(i.ws.join(".bazelrc"), "build --disk_cache=/team\n").unwrap();
    let before = i.run(&["--check"]);
    assert_eq!(before.status.code(), Some(1), "{}", out(&before));
    let o = i.run(&[]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read(i.ws.join("tools/bazel")).unwrap(),
        std::fs::read(&i.launcher).unwrap()
    );
    assert_eq!(mode(&i.ws.join("tools/bazel")), 0o755);
    assert_eq!(
        std::fs::read(i.ws.join("tools/clonestage.bazelrc")).unwrap(),
        std::fs::read(&i.bazelrc).unwrap()
    );
    assert!(i.home_bin().join("clonestage").is_file());
    assert!(i.home_bin().join("clonestage-spawn").is_file());
    let rc = i.bazelrc_text();
    assert!(rc.starts_with("build --disk_cache=/team\n"), "{rc}");
    assert!(
        rc.lines()
            .any(|l| l == "try-import %workspace%/tools/clonestage.bazelrc"),
        "{rc}"
    );
    // Nothing that changes a build where clonestage is not in the loop.
    assert!(!rc.contains("--config=clonestage"), "{rc}");
    let after = i.run(&["--check"]);
    assert_eq!(after.status.code(), Some(0), "{}", out(&after));
    let again = i.run(&[]);
    assert!(again.status.success(), "{}", out(&again));
    assert_eq!(i.bazelrc_text(), rc, "a second install changes nothing");
    assert!(
        out(&again).contains(&format!(
            "up to date: {}",
            i.ws.join("tools/bazel").display()
        )),
        "{}",
        out(&again)
    );
}

/// Installs before this one appended `build --config=clonestage`: --check names it, and
/// installing again removes it (with the comment it came with) and keeps everything else.
#[test]
fn an_older_install_is_found_by_check_and_fixed_by_installing_again() {
    let i = Install::new();
    let old = "build --disk_cache=/team\n\
               # clonestage: actions run through clonestage serve (added by bazel run @clonestage//:install)\n\
               try-import %workspace%/tools/clonestage.bazelrc\n\
               build --config=clonestage\n";
    std::fs::write(i.ws.join(".bazelrc"), old).unwrap();
    assert!(i.run(&[]).status.success());
    std::fs::write(i.ws.join(".bazelrc"), old).unwrap();
    let check = i.run(&["--check"]);
    assert_eq!(check.status.code(), Some(1), "{}", out(&check));
    assert!(
        out(&check).contains("line 4 of") && out(&check).contains("build --config=clonestage"),
        "{}",
        out(&check)
    );
    let fix = i.run(&[]);
    assert!(fix.status.success(), "{}", out(&fix));
    assert!(out(&fix).contains("removed from"), "{}", out(&fix));
    assert_eq!(
        i.bazelrc_text(),
        "build --disk_cache=/team\ntry-import %workspace%/tools/clonestage.bazelrc\n"
    );
    assert_eq!(i.run(&["--check"]).status.code(), Some(0));
}

#[test]
fn a_foreign_launcher_is_kept_unless_forced_and_as_installs_beside_it() {
    let i = Install::new();
    std::fs::create_dir_all(i.ws.join("tools")).unwrap();
    let team = "#!/bin/sh\n# the team launcher\nexec \"$BAZEL_REAL\" \"$@\"\n";
    std::fs::write(i.ws.join("tools/bazel"), team).unwrap();
    let o = i.run(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    let text = out(&o);
    assert!(text.contains("is not clonestage's launcher"), "{text}");
    assert!(text.contains("--as clonestage-bazel"), "{text}");
    assert!(
        text.contains(r#"exec "$(dirname "$0")/clonestage-bazel" "$@""#),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(i.ws.join("tools/bazel")).unwrap(),
        team
    );
    assert!(!i.home_bin().exists(), "refused before installing anything");
    assert!(!i.ws.join(".bazelrc").exists());

    let beside = i.run(&["--as", "clonestage-bazel"]);
    assert!(beside.status.success(), "{}", out(&beside));
    assert_eq!(
        std::fs::read_to_string(i.ws.join("tools/bazel")).unwrap(),
        team
    );
    assert_eq!(
        std::fs::read(i.ws.join("tools/clonestage-bazel")).unwrap(),
        std::fs::read(&i.launcher).unwrap()
    );
    assert!(out(&beside).contains("Call tools/clonestage-bazel from your tools/bazel"));

    let forced = i.run(&["--force"]);
    assert!(forced.status.success(), "{}", out(&forced));
    assert_eq!(
        std::fs::read(i.ws.join("tools/bazel")).unwrap(),
        std::fs::read(&i.launcher).unwrap()
    );
}

#[test]
fn an_older_clonestage_launcher_is_replaced_without_force() {
    let i = Install::new();
    std::fs::create_dir_all(i.ws.join("tools")).unwrap();
    std::fs::write(
        i.ws.join("tools/bazel"),
        "#!/usr/bin/env bash\n# tools/bazel: clonestage's Bazel launcher.\n",
    )
    .unwrap();
    let o = i.run(&[]);
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(
        std::fs::read(i.ws.join("tools/bazel")).unwrap(),
        std::fs::read(&i.launcher).unwrap()
    );
}

#[test]
fn no_bazelrc_prints_the_changes_and_bad_arguments_are_refused() {
    let i = Install::new();
    let o = i.run(&["--no-bazelrc"]);
    assert!(o.status.success(), "{}", out(&o));
    assert!(
        out(&o).contains("try-import %workspace%/tools/clonestage.bazelrc"),
        "{}",
        out(&o)
    );
    assert!(!i.ws.join(".bazelrc").exists());
    for bad in ["a/b", "..", ""] {
        let o = i.run(&["--as", bad]);
        assert_eq!(o.status.code(), Some(2), "--as {bad:?}: {}", out(&o));
    }
    // No workspace named and no `bazel run`.
    let o = Command::new(env!("CARGO_BIN_EXE_clonestage"))
        .args(["self-install", "--spawn"])
        .arg(&i.spawn)
        .arg("--launcher")
        .arg(&i.launcher)
        .arg("--bazelrc")
        .arg(&i.bazelrc)
        .env("HOME", i.t.path())
        .env_remove("BUILD_WORKSPACE_DIRECTORY")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(out(&o).contains("run it with bazel run"), "{}", out(&o));
}
