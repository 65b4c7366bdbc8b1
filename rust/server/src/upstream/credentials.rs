//! The headers every upstream call carries: the auth file's (read once at start) and a
//! credential helper's, following Bazel's protocol: run `PROG get` with `{"uri": URL}` on
//! stdin, read `{"headers": {"Name": ["value", ...]}, "expires": "RFC3339"?}` from stdout.
//! The helper runs at start, again once `expires` passes, and again when the upstream
//! answers UNAUTHENTICATED (`invalidate`); a failed run is retried at most every
//! `RETRY_AFTER`. Values are never logged.

use super::config::{header, Header};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long a helper run may take.
const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// A failed helper run is not repeated sooner than this.
const RETRY_AFTER: Duration = Duration::from_secs(30);

#[derive(serde::Deserialize)]
struct HelperAnswer {
    #[serde(default)]
    headers: BTreeMap<String, Vec<String>>,
    expires: Option<String>,
}

struct Fetched {
    headers: Vec<Header>,
    /// None: never expires.
    expires: Option<SystemTime>,
}

pub(crate) struct Credentials {
    fixed: Vec<Header>,
    helper: Option<PathBuf>,
    url: String,
    state: Mutex<HelperState>,
}

#[derive(Default)]
struct HelperState {
    fetched: Option<Fetched>,
    last_failure: Option<Instant>,
}

impl Credentials {
    pub fn new(fixed: Vec<Header>, helper: Option<PathBuf>, url: &str) -> Credentials {
        Credentials {
            fixed,
            helper,
            url: url.to_string(),
            state: Mutex::default(),
        }
    }

    /// The headers for the next call, running the helper when it has none valid (blocking:
    /// call from the blocking pool or at start).
    pub fn headers(&self) -> Vec<Header> {
        let mut out = self.fixed.clone();
        let Some(helper) = &self.helper else {
            return out;
        };
        let mut st = self.state.lock().unwrap();
        let valid = st
            .fetched
            .as_ref()
            .is_some_and(|f| f.expires.is_none_or(|t| SystemTime::now() < t));
        let may_retry = st.last_failure.is_none_or(|t| t.elapsed() >= RETRY_AFTER);
        if !valid && may_retry {
            match run_helper(helper, &self.url) {
                Ok(f) => {
                    st.fetched = Some(f);
                    st.last_failure = None;
                }
                Err(e) => {
                    tracing::warn!(helper = %helper.display(), error = %e, "the upstream credential helper failed; calls go without its headers");
                    st.fetched = None;
                    st.last_failure = Some(Instant::now());
                }
            }
        }
        if let Some(f) = &st.fetched {
            out.extend(f.headers.iter().cloned());
        }
        out
    }

    /// The upstream refused the credentials: the next call runs the helper again.
    pub fn invalidate(&self) {
        if self.helper.is_some() {
            let mut st = self.state.lock().unwrap();
            st.fetched = None;
            st.last_failure = None;
        }
    }

    pub fn has_helper(&self) -> bool {
        self.helper.is_some()
    }
}

fn run_helper(helper: &Path, url: &str) -> Result<Fetched> {
    let what = || format!("credential helper {} get", helper.display());
    let mut child = Command::new(helper)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(what)?;
    let request = serde_json::json!({ "uri": url }).to_string();
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that does not read its stdin is fine (EPIPE is ignored).
        let _ = stdin.write_all(request.as_bytes());
    }
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(HELPER_TIMEOUT) {
        Ok(r) => r.with_context(what)?,
        Err(_) => {
            // SAFETY: kill(2) on the child's pid, which is not reaped until the thread's
            // wait returns.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            bail!("{}: no answer within {HELPER_TIMEOUT:?}; killed", what());
        }
    };
    if !out.status.success() {
        bail!("{}: exited with {}", what(), out.status);
    }
    let answer: HelperAnswer = serde_json::from_slice(&out.stdout)
        .map_err(|e| anyhow::anyhow!("{}: stdout is not the expected JSON: {e}", what()))?;
    let mut headers = Vec::new();
    for (name, values) in &answer.headers {
        for v in values {
            headers.push(header(name, v, &what())?);
        }
    }
    let expires = match &answer.expires {
        None => None,
        Some(t) => Some(
            humantime::parse_rfc3339_weak(t)
                .map_err(|e| anyhow::anyhow!("{}: expires {t:?}: {e}", what()))?,
        ),
    };
    Ok(Fetched { headers, expires })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("helper");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        p
    }

    #[test]
    fn helper_headers_expiry_and_invalidate() {
        let d = tempfile::tempdir().unwrap();
        let runs = d.path().join("runs");
        let h = script(
            d.path(),
            &format!(
                "cat > {0}.in; echo run >> {0}; echo '{{\"headers\":{{\"X-Token\":[\"t1\"]}},\"expires\":\"2000-01-01T00:00:00Z\"}}'",
                runs.display()
            ),
        );
        let c = Credentials::new(vec![], Some(h), "grpc://h:1");
        let got = c.headers();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.as_str(), "x-token");
        let input = std::fs::read_to_string(format!("{}.in", runs.display())).unwrap();
        assert_eq!(input, r#"{"uri":"grpc://h:1"}"#);
        // Expired in 2000: every call runs it again.
        c.headers();
        assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2);
    }

    #[test]
    fn helper_failure_is_not_retried_at_once() {
        let d = tempfile::tempdir().unwrap();
        let runs = d.path().join("runs");
        let h = script(d.path(), &format!("echo run >> {}; exit 3", runs.display()));
        let c = Credentials::new(vec![], Some(h), "grpc://h:1");
        assert!(c.headers().is_empty());
        assert!(c.headers().is_empty());
        assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1);
        c.invalidate();
        c.headers();
        assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 2);
    }
}
