//! `clonestage self-install`: what it puts where (the per-version home the launcher reads
//! first), atomically and 0755, and the spawn paths it refuses (exit 2, nothing written).

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
