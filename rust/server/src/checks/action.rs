//! Loading and checking an Execute request's Action and Command before anything is staged.
//! Everything a client can get wrong is refused here with INVALID_ARGUMENT naming the field
//! (empty arguments, NUL bytes, duplicate or malformed environment variables, bad working
//! directory or output paths, output paths the filesystem cannot hold (a component over
//! NAME_MAX, or longer than PATH_MAX once under the work dir), a negative timeout or one over
//! `MAX_TIMEOUT`); missing Action, Command or input blobs are
//! FAILED_PRECONDITION listing every missing digest, so Bazel uploads them all in one go.

use super::output_spec::OutputSpec;
use crate::failure::{digest_arg, Failure};
use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use clonestage_engine::{tree, Cache, Digest};
use prost::Message;
use std::collections::HashSet;
use std::time::Duration;

/// A checked action, ready to stage and run.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub digest: Digest,
    pub input_root: Digest,
    pub command: pb::Command,
    /// Relative to the input root; "" for the root itself.
    pub working_dir: String,
    pub outputs: OutputSpec,
    pub timeout: Option<Duration>,
    pub do_not_cache: bool,
}

/// The longest `Action.timeout` accepted: REAPI says a server MUST reject a timeout over its
/// maximum (rather than clamp it). This is the spawn wrapper's own bound (`--timeout`, 1e9 s).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(1_000_000_000);

/// Bytes a work dir adds in front of an output path: `<cache>/work/<pid>-<n>/root/`, with the
/// widest pid and sequence number.
fn work_prefix_len(cache: &Cache) -> usize {
    cache.root().join("work").as_os_str().len() + "/".len() + 10 + "-".len() + 20 + "/root/".len()
}

fn invalid(what: String) -> Failure {
    Failure::InvalidArgument(what)
}

fn decode<M: Message + Default>(
    cache: &Cache,
    d: &Digest,
    what: &str,
) -> Result<Option<M>, Failure> {
    match cache.read(d).map_err(Failure::from)? {
        None => Ok(None),
        Some(b) => M::decode(b.as_slice())
            .map(Some)
            .map_err(|e| invalid(format!("{what} {d} is not a valid {what} message: {e}"))),
    }
}

pub(crate) fn prepare(cache: &Cache, digest: Digest) -> Result<Prepared, Failure> {
    let action: pb::Action = decode(cache, &digest, "Action")?.ok_or_else(|| Failure::Missing {
        digests: vec![digest],
        what: "the Action".into(),
    })?;
    let command_digest = digest_arg(action.command_digest.as_ref(), "Action.command_digest")?;
    let input_root = digest_arg(
        action.input_root_digest.as_ref(),
        "Action.input_root_digest",
    )?;
    let Some(command) = decode::<pb::Command>(cache, &command_digest, "Command")? else {
        let mut digests = vec![command_digest];
        digests.extend(tree::find_missing(cache, &input_root).unwrap_or_default());
        return Err(Failure::Missing {
            digests,
            what: "the Command and input root".into(),
        });
    };
    let timeout = match &action.timeout {
        None => None,
        Some(t) if t.seconds < 0 || t.nanos < 0 => {
            return Err(invalid(format!(
                "Action.timeout {}s {}ns is negative",
                t.seconds, t.nanos
            )))
        }
        Some(t) if t.nanos > 999_999_999 => {
            return Err(invalid(format!(
                "Action.timeout {}s {}ns: nanos must be below one second",
                t.seconds, t.nanos
            )))
        }
        Some(t) if t.seconds == 0 && t.nanos == 0 => None,
        Some(t) => {
            let d = Duration::new(t.seconds as u64, t.nanos as u32);
            if d > MAX_TIMEOUT {
                return Err(invalid(format!(
                    "Action.timeout {}s is over this server's maximum of {}s",
                    t.seconds,
                    MAX_TIMEOUT.as_secs()
                )));
            }
            Some(d)
        }
    };
    check_command(&command)?;
    let working_dir = working_dir(&command.working_directory)?;
    let outputs = OutputSpec::from_command(&command)?;
    outputs.check_lengths(&working_dir, work_prefix_len(cache))?;
    Ok(Prepared {
        digest,
        input_root,
        command,
        working_dir,
        outputs,
        timeout,
        do_not_cache: action.do_not_cache,
    })
}

fn check_command(c: &pb::Command) -> Result<(), Failure> {
    if c.arguments.is_empty() || c.arguments[0].is_empty() {
        return Err(invalid("Command.arguments is empty: nothing to run".into()));
    }
    if let Some(i) = c.arguments.iter().position(|a| a.contains('\0')) {
        return Err(invalid(format!(
            "Command.arguments[{i}] contains a NUL byte"
        )));
    }
    let mut seen = HashSet::new();
    for (i, v) in c.environment_variables.iter().enumerate() {
        if v.name.is_empty() || v.name.contains('=') || v.name.contains('\0') {
            return Err(invalid(format!(
                "Command.environment_variables[{i}]: name {:?} is empty or contains '=' or NUL",
                v.name
            )));
        }
        if v.value.contains('\0') {
            return Err(invalid(format!(
                "Command.environment_variables[{i}] ({}): value contains NUL",
                v.name
            )));
        }
        if !seen.insert(v.name.as_str()) {
            return Err(invalid(format!(
                "Command.environment_variables: '{}' is set twice",
                v.name
            )));
        }
    }
    Ok(())
}

fn working_dir(wd: &str) -> Result<String, Failure> {
    let wd = wd.trim_end_matches('/');
    if wd.is_empty() || wd == "." {
        return Ok(String::new());
    }
    let parts = tree::check_output_path(wd)
        .map_err(|e| invalid(format!("Command.working_directory '{wd}': {e}")))?;
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> pb::Command {
        pb::Command {
            arguments: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn commands_are_checked() {
        assert!(check_command(&cmd(&["/bin/true"])).is_ok());
        assert!(check_command(&cmd(&[])).is_err());
        assert!(check_command(&cmd(&["a\0b"])).is_err());
        let mut c = cmd(&["x"]);
        for n in ["A", "A"] {
            c.environment_variables
                .push(pb::command::EnvironmentVariable {
                    name: n.into(),
                    value: "1".into(),
                });
        }
        let e = check_command(&c).unwrap_err();
        assert!(e.message().contains("'A' is set twice"), "{}", e.message());
        assert_eq!(working_dir("").unwrap(), "");
        assert_eq!(working_dir("a/b/").unwrap(), "a/b");
        assert!(working_dir("../x").is_err());
        assert!(working_dir("/abs").is_err());
    }
}
