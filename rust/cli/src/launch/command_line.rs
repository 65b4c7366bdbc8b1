//! A Bazel command line as the launcher needs to see it: where the startup options end and
//! the command word stands, and the startup options that decide whether clonestage can take
//! part (`--digest_function`, `--ignore_all_rc_files`, which rc files Bazel reads, an output
//! root of the user's own), without Bazel's list of every flag.
//!
//! Bazel's client splits the same way (`OptionProcessor::SplitCommandLine` in
//! `src/main/cpp/option_processor.cc`): arguments starting with `-` are startup options until
//! the first that does not, which is the command; a unary startup option may take its value
//! as the next argument (`--output_base /x`). `UNARY_STARTUP` lists the unary ones
//! (`RegisterUnaryStartupFlag` in `startup_options.cc` and `bazel_startup_options.cc`);
//! a nullary one in the `--opt value` form cannot occur.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Startup options that take a value (`--opt=value` or `--opt value`).
const UNARY_STARTUP: &[&str] = &[
    "--bazelrc",
    "--output_base",
    "--output_user_root",
    "--install_base",
    "--install_md5",
    "--server_javabase",
    "--host_jvm_args",
    "--host_jvm_profile",
    "--io_nice_level",
    "--max_idle_secs",
    "--connect_timeout_secs",
    "--local_startup_timeout_secs",
    "--macos_qos_class",
    "--digest_function",
    "--failure_detail_out",
    "--server_jvm_out",
    "--command_port",
    "--invocation_policy",
    "--unix_digest_hash_attribute_name",
    "--experimental_oom_more_eagerly_threshold",
    "--experimental_cgroup_parent",
];

/// The commands that take build options (they inherit Bazel's `build` command), and so read
/// the `build` lines of the launcher's rc file: every other command runs untouched.
/// `cquery` and `aquery` run no action, but giving them the same options as the builds they
/// sit between keeps one option set per Bazel server.
pub const BUILD_COMMANDS: &[&str] = &[
    "build",
    "test",
    "run",
    "coverage",
    "mobile-install",
    "cquery",
    "aquery",
];

/// What the launcher reads from a command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// Index of the command word; None for `bazel` or `bazel --version`.
    pub command: Option<usize>,
    /// Index of the first `--bazelrc=/dev/null` (or `--bazelrc /dev/null`): Bazel reads no
    /// `--bazelrc` after it, so the launcher's goes before it.
    pub dev_null_rc: Option<usize>,
    pub ignore_all_rc_files: bool,
    pub no_home_rc: bool,
    pub no_workspace_rc: bool,
    /// The value of a `--digest_function` startup option.
    pub digest_function: Option<String>,
    /// `--output_user_root` or `--output_base` given: Bazel's root is the user's to keep.
    pub own_output_root: bool,
}

impl CommandLine {
    pub fn parse(args: &[OsString]) -> CommandLine {
        let mut cl = CommandLine::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_bytes();
            if !arg.starts_with(b"-") {
                cl.command = Some(i);
                break;
            }
            let (name, inline) = match arg.iter().position(|&b| b == b'=') {
                Some(eq) => (&arg[..eq], Some(&arg[eq + 1..])),
                None => (arg, None),
            };
            let unary = UNARY_STARTUP.iter().any(|u| u.as_bytes() == name);
            let opt_at = i;
            let value = match (unary, inline) {
                (_, Some(v)) => Some(v),
                (true, None) => {
                    i += 1;
                    args.get(i).map(|v| v.as_bytes())
                }
                (false, None) => None,
            };
            cl.note(name, value, opt_at);
            i += 1;
        }
        cl
    }

    fn note(&mut self, name: &[u8], value: Option<&[u8]>, at: usize) {
        match (name, value) {
            (b"--bazelrc", Some(b"/dev/null")) if self.dev_null_rc.is_none() => {
                self.dev_null_rc = Some(at);
            }
            (b"--digest_function", Some(v)) => {
                self.digest_function = Some(String::from_utf8_lossy(v).into_owned());
            }
            (b"--ignore_all_rc_files", _) => self.ignore_all_rc_files = true,
            (b"--noignore_all_rc_files", _) => self.ignore_all_rc_files = false,
            (b"--nohome_rc", _) => self.no_home_rc = true,
            (b"--home_rc", _) => self.no_home_rc = false,
            (b"--noworkspace_rc", _) => self.no_workspace_rc = true,
            (b"--workspace_rc", _) => self.no_workspace_rc = false,
            (b"--output_user_root" | b"--output_base", _) => self.own_output_root = true,
            _ => {}
        }
    }

    /// The command word, when there is one.
    pub fn command<'a>(&self, args: &'a [OsString]) -> Option<&'a OsStr> {
        self.command.map(|i| args[i].as_os_str())
    }

    /// Whether the command reads the launcher's `build` lines.
    pub fn takes_build_options(&self, args: &[OsString]) -> bool {
        self.command(args)
            .is_some_and(|c| BUILD_COMMANDS.iter().any(|b| b.as_bytes() == c.as_bytes()))
    }

    /// An executor or remote cache named on the command line itself (before `--`): the flag's
    /// name. The launcher then adds nothing, so its token never reaches another server.
    pub fn names_executor_or_cache(&self, args: &[OsString]) -> Option<String> {
        let start = self.command? + 1;
        args[start..]
            .iter()
            .map(|a| a.as_bytes())
            .take_while(|a| *a != b"--")
            .find_map(|a| {
                let name = a.split(|&b| b == b'=').next().unwrap_or(a);
                matches!(name, b"--remote_executor" | b"--remote_cache")
                    .then(|| String::from_utf8_lossy(name).into_owned())
            })
    }

    /// Where the launcher's `--bazelrc` goes: before a `--bazelrc=/dev/null`, else right before
    /// the command word (after the user's own `--bazelrc` files, which it then overrides).
    pub fn rc_insert_at(&self) -> usize {
        self.dev_null_rc.or(self.command).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> (CommandLine, Vec<OsString>) {
        let a: Vec<OsString> = args.iter().map(OsString::from).collect();
        (CommandLine::parse(&a), a)
    }

    #[test]
    fn the_command_word_after_startup_options_of_both_forms() {
        let (cl, a) = parse(&["--output_base", "/tmp/ob", "--nohome_rc", "test", "//a:b"]);
        assert_eq!(cl.command, Some(3));
        assert!(cl.takes_build_options(&a));
        assert!(cl.own_output_root && cl.no_home_rc);
        let (cl, a) = parse(&["--host_jvm_args=-Xmx1g", "query", "//x"]);
        assert_eq!(cl.command, Some(1));
        assert!(!cl.takes_build_options(&a));
        assert_eq!(parse(&["--version"]).0.command, None);
        assert_eq!(parse(&[]).0.command, None);
    }

    #[test]
    fn every_command_that_takes_build_options() {
        for c in BUILD_COMMANDS {
            let (cl, a) = parse(&[c, "//x"]);
            assert!(cl.takes_build_options(&a), "{c}");
        }
        for c in [
            "version", "query", "fetch", "sync", "shutdown", "info", "clean", "help",
        ] {
            let (cl, a) = parse(&[c]);
            assert!(!cl.takes_build_options(&a), "{c}");
        }
    }

    #[test]
    fn dev_null_rc_in_both_forms() {
        let (cl, _) = parse(&["--bazelrc=/dev/null", "--nohome_rc", "build"]);
        assert_eq!(cl.rc_insert_at(), 0);
        let (cl, _) = parse(&[
            "--host_jvm_args",
            "-Xmx1g",
            "--bazelrc",
            "/dev/null",
            "build",
        ]);
        assert_eq!(cl.dev_null_rc, Some(2));
        assert_eq!(cl.rc_insert_at(), 2);
        let (cl, _) = parse(&["--bazelrc=/tmp/mine.rc", "build"]);
        assert_eq!(cl.rc_insert_at(), 1);
    }

    #[test]
    fn digest_function_and_rc_switches() {
        let (cl, _) = parse(&["--digest_function", "BLAKE3", "build"]);
        assert_eq!(cl.digest_function.as_deref(), Some("BLAKE3"));
        let (cl, _) = parse(&["--digest_function=sha256", "build"]);
        assert_eq!(cl.digest_function.as_deref(), Some("sha256"));
        let (cl, _) = parse(&["--ignore_all_rc_files", "--noignore_all_rc_files", "build"]);
        assert!(!cl.ignore_all_rc_files);
        let (cl, _) = parse(&["--ignore_all_rc_files", "build"]);
        assert!(cl.ignore_all_rc_files);
    }

    #[test]
    fn an_executor_named_after_the_command_but_not_after_dashdash() {
        let (cl, a) = parse(&["build", "--remote_executor=grpcs://x:443", "//x"]);
        assert_eq!(
            cl.names_executor_or_cache(&a).as_deref(),
            Some("--remote_executor")
        );
        let (cl, a) = parse(&["test", "--remote_cache", "grpc://c:9092", "//x"]);
        assert_eq!(
            cl.names_executor_or_cache(&a).as_deref(),
            Some("--remote_cache")
        );
        let (cl, a) = parse(&["run", "//tool", "--", "--remote_executor=x"]);
        assert_eq!(cl.names_executor_or_cache(&a), None);
    }
}
