//! The Apple environment against stub `xcrun`/`xcode-select`/`mdfind`/`plutil` scripts and
//! fake Xcode bundles in a temp dir: each stub counts its calls in `<name>.calls`, and the
//! stub xcrun answers with a path under the DEVELOPER_DIR it was given, so a test sees which
//! Xcode the SDK lookup ran with.

use super::*;
use crate::failure::Failure;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

struct Host {
    _dir: tempfile::TempDir,
    /// The temp dir canonical (on macOS /var is a symlink to /private/var, and the bundles
    /// found are reported by their real paths).
    root: PathBuf,
}

impl Host {
    /// Xcode 14.3.1 (14E300, selected) and 15.2 (15C500b) in Applications; Spotlight also
    /// knows a 16.0 beta on a mounted volume.
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let h = Host {
            root: dir.path().canonicalize().unwrap(),
            _dir: dir,
        };
        h.xcode("Applications/Xcode_14.3.1.app", "14.3.1", Some("14E300"));
        h.xcode("Applications/Xcode_15.2.app", "15.2", Some("15C500b"));
        h.xcode("Volumes/Xcode16/Xcode-beta.app", "16.0", Some("16A5171c"));
        let selected = h.developer_dir("Applications/Xcode_14.3.1.app");
        h.stub("xcode-select", &format!("echo '{selected}'"));
        let vol = h.p().join("Volumes/Xcode16/Xcode-beta.app");
        h.stub("mdfind", &format!("echo '{}'", vol.display()));
        h.stub(
            "xcrun",
            r#"test "$1" = --sdk && test "$3" = --show-sdk-path || exit 64
dd=${DEVELOPER_DIR:-SELECTED}
case "$2" in
  iphoneos17.2|iphoneos|macosx*) echo "$dd/SDKs/$2.sdk" ;;
  *) echo "xcrun: error: SDK \"$2\" cannot be located" >&2; exit 1 ;;
esac"#,
        );
        h
    }

    fn p(&self) -> &Path {
        &self.root
    }

    fn xcode(&self, rel: &str, short: &str, build: Option<&str>) {
        let app = self.p().join(rel);
        std::fs::create_dir_all(app.join("Contents/Developer")).unwrap();
        let build = build
            .map(|b| format!("\t<key>ProductBuildVersion</key>\n\t<string>{b}</string>\n"))
            .unwrap_or_default();
        std::fs::write(
            app.join("Contents/version.plist"),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<dict>\n\
                 \t<key>BuildVersion</key>\n\t<string>3</string>\n\
                 \t<key>CFBundleShortVersionString</key>\n\t<string>{short}</string>\n{build}</dict>\n</plist>\n"
            ),
        )
        .unwrap();
    }

    fn developer_dir(&self, rel: &str) -> String {
        self.p()
            .join(rel)
            .join("Contents/Developer")
            .to_string_lossy()
            .into_owned()
    }

    /// A `#!/bin/sh` stub that counts its calls, then runs `body`.
    fn stub(&self, name: &str, body: &str) {
        let path = self.p().join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho x >> \"$0.calls\"\n{body}\n"),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn calls(&self, name: &str) -> usize {
        std::fs::read_to_string(self.p().join(format!("{name}.calls")))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn tools(&self) -> Tools {
        let mut t = Tools::in_dir(self.p());
        t.pinned_developer_dir = None;
        t.timeout = Duration::from_secs(10);
        t
    }

    fn env(&self) -> AppleEnv {
        AppleEnv::new(Some(self.tools()))
    }
}

fn vars(kv: &[(&str, &str)]) -> Vec<EnvironmentVariable> {
    kv.iter()
        .map(|(k, v)| EnvironmentVariable {
            name: k.to_string(),
            value: v.to_string(),
        })
        .collect()
}

fn get<'a>(add: &'a [(&'static str, String)], k: &str) -> Option<&'a str> {
    add.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str())
}

const IOS: [(&str, &str); 2] = [(SDK_PLATFORM, "iPhoneOS"), (SDK_VERSION, "17.2")];

#[test]
fn an_overridden_xcode_is_found_by_every_form_of_its_version() {
    let h = Host::new();
    let x15 = h.developer_dir("Applications/Xcode_15.2.app");
    for v in ["15.2.0.15C500b", "15.2.0", "15.2", "15"] {
        let env = h.env();
        let mut kv = IOS.to_vec();
        kv.push((XCODE_VERSION, v));
        let add = env.additions(&vars(&kv)).unwrap();
        assert_eq!(get(&add, "DEVELOPER_DIR"), Some(x15.as_str()), "{v}");
        // xcrun ran with that Xcode, for platform lowercased + SDK version.
        assert_eq!(
            get(&add, "SDKROOT"),
            Some(format!("{x15}/SDKs/iphoneos17.2.sdk").as_str()),
            "{v}"
        );
        assert_eq!(get(&add, "TMPDIR"), None, "every action's, not Apple's");
    }
    // The Spotlight-only beta is found too.
    let add = h
        .env()
        .additions(&vars(&[(XCODE_VERSION, "16.0.0.16A5171c")]))
        .unwrap();
    assert_eq!(
        get(&add, "DEVELOPER_DIR"),
        Some(h.developer_dir("Volumes/Xcode16/Xcode-beta.app").as_str())
    );
    // No platform: no SDK lookup.
    assert_eq!(get(&add, "SDKROOT"), None);
}

#[test]
fn a_pinned_xcode_is_used_without_an_override() {
    let h = Host::new();
    let pinned = h.developer_dir("Applications/Xcode_15.2.app");
    let mut t = h.tools();
    t.pinned_developer_dir = Some(pinned.clone());
    let add = AppleEnv::new(Some(t)).additions(&vars(&IOS)).unwrap();
    assert_eq!(get(&add, "DEVELOPER_DIR"), Some(pinned.as_str()));
    assert_eq!(
        get(&add, "SDKROOT"),
        Some(format!("{pinned}/SDKs/iphoneos17.2.sdk").as_str())
    );
    assert_eq!(h.calls("xcode-select"), 0, "the pin is not second-guessed");
}

#[test]
fn the_default_xcode_is_xcode_selects() {
    let h = Host::new();
    let selected = h.developer_dir("Applications/Xcode_14.3.1.app");
    let add = h.env().additions(&vars(&IOS)).unwrap();
    assert_eq!(get(&add, "DEVELOPER_DIR"), Some(selected.as_str()));
    assert_eq!(
        get(&add, "SDKROOT"),
        Some(format!("{selected}/SDKs/iphoneos17.2.sdk").as_str())
    );
}

#[test]
fn a_missing_xcode_fails_naming_it_and_the_installed_ones() {
    let h = Host::new();
    let mut kv = IOS.to_vec();
    kv.push((XCODE_VERSION, "13.4.1.13F100"));
    let e = h.env().additions(&vars(&kv)).unwrap_err();
    assert!(matches!(e, Failure::FailedPrecondition(_)), "{e:?}");
    let m = e.message();
    for want in [
        "Xcode 13.4.1.13F100",
        "14.3.1.14E300 at ",
        "15.2.0.15C500b at ",
        "16.0.0.16A5171c at ",
        "--xcode_version",
    ] {
        assert!(m.contains(want), "{want:?} not in {m}");
    }
    assert_eq!(h.calls("xcrun"), 0, "no SDK lookup for an Xcode not found");
}

#[test]
fn a_failed_lookup_is_not_cached() {
    let h = Host::new();
    let env = h.env();
    let v = vars(&[(XCODE_VERSION, "15.3")]);
    assert!(env.additions(&v).is_err());
    assert!(env.additions(&v).is_err());
    assert!(env.additions(&vars(&[(XCODE_VERSION, "15.4")])).is_err());
    assert_eq!(
        env.warned.lock().unwrap().len(),
        2,
        "one warning per key asked for"
    );
    assert_eq!(h.calls("xcode-select"), 3, "each failed lookup asked again");
    h.xcode("Applications/Xcode_15.3.app", "15.3", Some("15E204a"));
    let add = env.additions(&v).unwrap();
    assert_eq!(
        get(&add, "DEVELOPER_DIR"),
        Some(h.developer_dir("Applications/Xcode_15.3.app").as_str())
    );
}

#[test]
fn explicit_action_values_win() {
    let h = Host::new();
    let mut kv = IOS.to_vec();
    kv.extend([
        (XCODE_VERSION, "15.2"),
        ("DEVELOPER_DIR", "/opt/MyXcode.app/Contents/Developer"),
        ("SDKROOT", "/opt/sdk"),
        ("TMPDIR", "/private/tmp/mine"),
    ]);
    let add = h.env().additions(&vars(&kv)).unwrap();
    assert!(add.is_empty(), "{add:?}");
    assert_eq!(h.calls("xcrun") + h.calls("mdfind"), 0);

    // Its own DEVELOPER_DIR is what xcrun runs with.
    let add = h
        .env()
        .additions(&vars(&[
            (SDK_PLATFORM, "MacOSX"),
            ("DEVELOPER_DIR", "/opt/MyXcode.app/Contents/Developer"),
        ]))
        .unwrap();
    assert_eq!(get(&add, "DEVELOPER_DIR"), None);
    assert_eq!(
        get(&add, "SDKROOT"),
        Some("/opt/MyXcode.app/Contents/Developer/SDKs/macosx.sdk")
    );
}

#[test]
fn a_cache_hit_runs_no_tool() {
    let h = Host::new();
    let env = h.env();
    let mut kv = IOS.to_vec();
    kv.push((XCODE_VERSION, "15.2"));
    let first = env.additions(&vars(&kv)).unwrap();
    let counts = |h: &Host| (h.calls("xcode-select"), h.calls("mdfind"), h.calls("xcrun"));
    assert_eq!(counts(&h), (1, 1, 1));
    for _ in 0..3 {
        assert_eq!(env.additions(&vars(&kv)).unwrap(), first);
    }
    assert_eq!(counts(&h), (1, 1, 1));
    // Another SDK version is another key (one this Xcode lacks: then the platform alone).
    kv[1] = (SDK_VERSION, "18.0");
    let other = env.additions(&vars(&kv)).unwrap();
    assert_ne!(get(&other, "SDKROOT"), get(&first, "SDKROOT"));
    assert_eq!(h.calls("xcrun"), 3);
    assert_eq!(env.additions(&vars(&kv)).unwrap(), other);
    assert_eq!(h.calls("xcrun"), 3);
}

/// Issue 22 item 5: Bazel 4.2.3 asks xcrun for `<platform><APPLE_SDK_VERSION_OVERRIDE>`,
/// Bazel 8-9 for the platform alone. A pinned SDK version this Xcode lacks builds locally
/// under Bazel 8-9, so here it falls back to the platform alone; one it has is still found
/// by its version first.
#[test]
fn an_sdk_version_the_xcode_lacks_falls_back_to_the_platform_alone() {
    let h = Host::new();
    let mut kv = IOS.to_vec();
    kv.push((XCODE_VERSION, "15.2"));
    kv[1] = (SDK_VERSION, "17.4");
    let x15 = h.developer_dir("Applications/Xcode_15.2.app");
    let add = h.env().additions(&vars(&kv)).unwrap();
    assert_eq!(
        get(&add, "SDKROOT"),
        Some(format!("{x15}/SDKs/iphoneos.sdk").as_str())
    );
    assert_eq!(h.calls("xcrun"), 2, "the versioned form, then the platform");
    // The exact version when xcrun has it: one call.
    kv[1] = (SDK_VERSION, "17.2");
    let add = h.env().additions(&vars(&kv)).unwrap();
    assert_eq!(
        get(&add, "SDKROOT"),
        Some(format!("{x15}/SDKs/iphoneos17.2.sdk").as_str())
    );
    assert_eq!(h.calls("xcrun"), 3);
}

#[test]
fn a_hanging_tool_times_out_with_a_clear_error() {
    let h = Host::new();
    // A child holding the pipes too: the whole group is killed.
    h.stub("xcrun", "sleep 60 & sleep 60");
    let mut t = h.tools();
    t.timeout = Duration::from_millis(500);
    let start = Instant::now();
    let e = AppleEnv::new(Some(t)).additions(&vars(&IOS)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(matches!(e, Failure::FailedPrecondition(_)), "{e:?}");
    let m = e.message();
    assert!(m.contains("did not answer within"), "{m}");
    assert!(
        m.contains("xcrun --sdk iphoneos17.2 --show-sdk-path"),
        "{m}"
    );
    assert_eq!(h.calls("xcrun"), 1, "a hung xcrun is not asked again");
}

#[test]
fn a_failing_or_missing_tool_is_named() {
    let h = Host::new();
    // A platform this Xcode lacks: both forms are asked for, and named.
    let kv = [(SDK_PLATFORM, "AppleTVOS"), (SDK_VERSION, "99.0")];
    let m = h.env().additions(&vars(&kv)).unwrap_err().message();
    assert!(m.contains("'appletvos99.0'"), "{m}");
    assert!(m.contains("then 'appletvos'"), "{m}");
    assert!(m.contains("cannot be located"), "the tool's stderr: {m}");

    std::fs::remove_file(h.p().join("xcode-select")).unwrap();
    let m = h.env().additions(&vars(&IOS)).unwrap_err().message();
    assert!(m.contains("xcode-select -p"), "{m}");
    assert!(m.contains("no Xcode is selected"), "{m}");

    // Without xcode-select and Spotlight, the applications folder still finds it; the
    // message of a miss says what could not be asked.
    std::fs::remove_file(h.p().join("mdfind")).unwrap();
    let ok = h
        .env()
        .additions(&vars(&[(XCODE_VERSION, "14.3.1")]))
        .unwrap();
    assert_eq!(
        get(&ok, "DEVELOPER_DIR"),
        Some(h.developer_dir("Applications/Xcode_14.3.1.app").as_str())
    );
    let m = h
        .env()
        .additions(&vars(&[(XCODE_VERSION, "16")]))
        .unwrap_err()
        .message();
    assert!(m.contains("could not ask"), "{m}");
    assert!(m.contains("mdfind"), "{m}");
}

#[test]
fn a_binary_version_plist_is_read_through_plutil() {
    let h = Host::new();
    let app = h.p().join("Applications/Xcode_15.4.app");
    std::fs::create_dir_all(app.join("Contents/Developer")).unwrap();
    std::fs::write(app.join("Contents/version.plist"), b"bplist00\x01\x02").unwrap();
    h.stub(
        "plutil",
        "test \"$1 $2 $3 $4\" = '-convert xml1 -o -' || exit 64\n\
         printf '<dict><key>CFBundleShortVersionString</key><string>15.4</string><key>ProductBuildVersion</key><string>15F31d</string></dict>'",
    );
    let add = h
        .env()
        .additions(&vars(&[(XCODE_VERSION, "15.4.0.15F31d")]))
        .unwrap();
    assert_eq!(
        get(&add, "DEVELOPER_DIR"),
        Some(h.developer_dir("Applications/Xcode_15.4.app").as_str())
    );
}

#[test]
fn other_actions_and_hosts_without_xcode_pass_through() {
    let h = Host::new();
    let add = h
        .env()
        .additions(&vars(&[("PATH", "/bin"), ("FOO", "1")]))
        .unwrap();
    assert!(add.is_empty());
    assert_eq!(h.calls("xcode-select") + h.calls("xcrun"), 0);
    // Linux: the keys pass through unchanged, nothing added.
    let mut kv = IOS.to_vec();
    kv.push((XCODE_VERSION, "15.2"));
    assert!(AppleEnv::new(None)
        .additions(&vars(&kv))
        .unwrap()
        .is_empty());
}

#[test]
fn versions_are_matched_as_xcode_locator_matches_them() {
    assert_eq!(expand_version("15", None), "15.0.0");
    assert_eq!(expand_version("15.2", Some("15C500b")), "15.2.0.15C500b");
    assert_eq!(expand_version("14.3.1", Some("")), "14.3.1");
    assert_eq!(compare_versions("9.4.1", "10.0.0"), Cmp::Less);
    assert_eq!(compare_versions("15.2.0", "15.2.0.15C500b"), Cmp::Less);
    let x = |v: &str, preferred| Installed {
        version: v.into(),
        developer_dir: v.into(),
        preferred,
    };
    // "15" goes to the newer of the two in Applications, never to the mounted 15.9.
    let found = [
        x("15.0.0.15A240d", true),
        x("15.9.0.15Z1", false),
        x("15.2.0.15C500b", true),
        x("9.4.1.9F2000", true),
    ];
    let t = version_table(&found);
    let at = |k: &str| t.get(k).map(|&i| found[i].version.as_str());
    assert_eq!(at("15"), Some("15.2.0.15C500b"));
    assert_eq!(at("15.0"), Some("15.0.0.15A240d"));
    assert_eq!(at("15.9"), Some("15.9.0.15Z1"));
    assert_eq!(at("9"), Some("9.4.1.9F2000"));
    assert_eq!(at("16"), None);
    // The same version twice: the one in Applications wins whatever the order.
    for order in [[false, true], [true, false]] {
        let f = [x("15.2.0.15C500b", order[0]), x("15.2.0.15C500b", order[1])];
        let t = version_table(&f);
        assert!(f[t["15.2.0.15C500b"]].preferred);
        assert!(f[t["15"]].preferred);
    }
}
