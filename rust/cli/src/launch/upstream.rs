//! The team's upstream cache (docs/upstream.md) for the server the launcher starts: the
//! `CLONESTAGE_UPSTREAM*` settings of this environment, else of
//! `${XDG_CONFIG_HOME:-~/.config}/clonestage/upstream.env` (KEY=value lines, `#` comments,
//! `export ` and quotes allowed, outside every workspace; only these keys). They reach the
//! `serve` this launcher starts and only it.
//!
//! - An auth file inside the workspace is in reach of every build and of version control: it
//!   is refused (said once per command), and the server then starts without an upstream.
//! - A running server started with another setting serves other Bazel commands too, so it is
//!   kept: the launcher notes the setting it started a server with, next to that server's
//!   `tcp-port` text (port and pid: which server), and says so once per setting when a
//!   command asks for another.

use crate::dirs::{self, Env};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The keys `clonestage serve` reads from its environment.
pub const KEYS: &[&str] = &[
    "CLONESTAGE_UPSTREAM",
    "CLONESTAGE_UPSTREAM_INSTANCE",
    "CLONESTAGE_UPSTREAM_AUTH_FILE",
    "CLONESTAGE_UPSTREAM_AUTH_HELPER",
    "CLONESTAGE_UPSTREAM_WRITE",
    "CLONESTAGE_UPSTREAM_TIMEOUT_MS",
    "CLONESTAGE_UPSTREAM_QUEUE_MAX",
];

/// The settings for the server: (key, value) in `KEYS` order, empty values left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub values: Vec<(&'static str, OsString)>,
}

impl Settings {
    /// From `env` and the config file; `say` gets the lines worth telling the user.
    pub fn read(env: Env, workspace: &Path, say: &mut dyn FnMut(String)) -> Settings {
        let conf = config_file(env);
        let file = read_config(&conf, say);
        let mut values = Vec::new();
        for &key in KEYS {
            let v = match env(key) {
                Some(v) => v,
                None => match file.iter().find(|(k, _)| k == key) {
                    Some((_, v)) => OsString::from(v),
                    None => continue,
                },
            };
            if !v.is_empty() {
                values.push((key, v));
            }
        }
        // `serve` runs in `/`: a relative auth file is made absolute from here.
        for (k, v) in values.iter_mut() {
            if *k == "CLONESTAGE_UPSTREAM_AUTH_FILE" {
                *v = absolute_from_cwd(v).into_os_string();
            }
        }
        let s = Settings { values };
        match s.get("CLONESTAGE_UPSTREAM_AUTH_FILE") {
            Some(auth) if inside(workspace, Path::new(auth)) => {
                say(format!(
                    "the upstream auth file {} lies inside the workspace {} (in reach of every \
                     build and of version control): refused, so the clonestage server starts \
                     without an upstream; keep it outside, 0600, e.g. in {}/",
                    Path::new(auth).display(),
                    real(workspace).display(),
                    conf.parent().unwrap_or(&conf).display()
                ));
                Settings::default()
            }
            _ => s,
        }
    }

    fn get(&self, key: &str) -> Option<&OsString> {
        self.values.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// `KEY=value` lines: what a running server is compared by.
    pub fn text(&self) -> String {
        self.values
            .iter()
            .map(|(k, v)| format!("{k}={}\n", v.to_string_lossy()))
            .collect()
    }
}

fn config_file(env: Env) -> PathBuf {
    let base = dirs::absolute(env("XDG_CONFIG_HOME")).unwrap_or_else(|| {
        dirs::absolute(env("HOME"))
            .unwrap_or_else(|| "/".into())
            .join(".config")
    });
    base.join("clonestage").join("upstream.env")
}

/// The file's KEY=value pairs (only `KEYS`; others named once through `say`).
fn read_config(path: &Path, say: &mut dyn FnMut(String)) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = ['"', '\'']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(*q)
                    .and_then(|v| v.strip_suffix(*q))
                    .filter(|_| value.len() >= 2)
            })
            .unwrap_or(value);
        if KEYS.contains(&key) {
            out.push((key.to_string(), value.to_string()));
        } else {
            say(format!(
                "{}: ignoring {key} (this file sets only the CLONESTAGE_UPSTREAM* keys of \
                 docs/upstream.md)",
                path.display()
            ));
        }
    }
    out
}

fn absolute_from_cwd(p: &OsString) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p))
}

/// The real path of `p`'s directory joined with its name (links resolved where they exist).
fn real(p: &Path) -> PathBuf {
    if let Ok(r) = p.canonicalize() {
        return r;
    }
    match (p.parent(), p.file_name()) {
        (Some(d), Some(n)) => real(d).join(n),
        _ => p.to_path_buf(),
    }
}

fn inside(workspace: &Path, file: &Path) -> bool {
    real(file).starts_with(real(workspace))
}

/// After starting a server: note the setting it got, for `check_running`.
pub fn record(cache: &Path, settings: &Settings) {
    let id = std::fs::read_to_string(cache.join("server/tcp-port")).unwrap_or_default();
    let launcher = cache.join("launcher");
    let _ = std::fs::write(
        launcher.join("upstream.server"),
        format!("{id}--\n{}", settings.text()),
    );
    let _ = std::fs::remove_file(launcher.join("upstream.warned"));
}

/// The line to say when the running server's upstream setting is not the one this command
/// asks for (once per server and setting), else None.
pub fn check_running(cache: &Path, settings: &Settings) -> Option<String> {
    let rec = cache.join("launcher/upstream.server");
    let warned = cache.join("launcher/upstream.warned");
    let text = settings.text();
    let recorded = std::fs::read_to_string(&rec).ok();
    if text.is_empty() && recorded.is_none() {
        return None;
    }
    let id = std::fs::read_to_string(cache.join("server/tcp-port")).ok()?;
    if id.is_empty() {
        return None;
    }
    let (rec_id, rec_text) = recorded
        .as_deref()
        .and_then(|r| r.split_once("--\n"))
        .unwrap_or(("", ""));
    let cache_d = cache.display();
    let msg = if rec_id == id {
        if rec_text == text {
            return None;
        }
        format!(
            "the clonestage server on {cache_d} runs with upstream setting [{}], this command \
             asks for [{}]: it keeps its own (other Bazel commands use it); `clonestage --cache \
             {cache_d} stop` and the next command starts one with yours",
            show(rec_text),
            show(&text)
        )
    } else if !text.is_empty() {
        format!(
            "the clonestage server on {cache_d} was not started by this launcher, so its \
             upstream setting is not known here (`clonestage --cache {cache_d} status` shows \
             it); this command asks for [{}]; `clonestage --cache {cache_d} stop` and the next \
             command starts one with yours",
            show(&text)
        )
    } else {
        return None;
    };
    let mark = format!("{id}--\n{text}");
    if std::fs::read_to_string(&warned).ok().as_deref() == Some(mark.as_str()) {
        return None;
    }
    // A server started by hand: the launcher directory may not exist yet.
    let _ = dirs::create_private(&cache.join("launcher"));
    let _ = std::fs::write(&warned, mark);
    Some(msg)
}

fn show(text: &str) -> String {
    let t = text.trim_end_matches('\n');
    if t.is_empty() {
        "none".to_string()
    } else {
        t.replace('\n', " ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn file_values_with_quotes_and_export_the_environment_wins_other_keys_named() {
        let d = tempfile::tempdir().unwrap();
        let conf = d.path().join("xdg/clonestage");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("upstream.env"),
            "# team\nCLONESTAGE_UPSTREAM=grpcs://c:443\n\n  CLONESTAGE_UPSTREAM_INSTANCE=\"team\"\n\
             export CLONESTAGE_UPSTREAM_WRITE='none'\nCLONESTAGE_CACHE=/elsewhere\n",
        )
        .unwrap();
        let vars: HashMap<&str, OsString> = [
            ("XDG_CONFIG_HOME", d.path().join("xdg").into_os_string()),
            ("CLONESTAGE_UPSTREAM_WRITE", "all".into()),
        ]
        .into_iter()
        .collect();
        let env = |k: &str| vars.get(k).cloned();
        let mut said = Vec::new();
        let s = Settings::read(&env, d.path(), &mut |l| said.push(l));
        assert_eq!(
            s.text(),
            "CLONESTAGE_UPSTREAM=grpcs://c:443\nCLONESTAGE_UPSTREAM_INSTANCE=team\n\
             CLONESTAGE_UPSTREAM_WRITE=all\n"
        );
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("ignoring CLONESTAGE_CACHE"), "{said:?}");
    }

    #[test]
    fn an_auth_file_inside_the_workspace_drops_the_upstream() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join("secrets")).unwrap();
        let auth = ws.join("secrets/auth");
        let vars: HashMap<&str, OsString> = [
            ("HOME", d.path().into()),
            ("CLONESTAGE_UPSTREAM", "grpc://127.0.0.1:9".into()),
            (
                "CLONESTAGE_UPSTREAM_AUTH_FILE",
                auth.clone().into_os_string(),
            ),
        ]
        .into_iter()
        .collect();
        let env = |k: &str| vars.get(k).cloned();
        let mut said = Vec::new();
        let s = Settings::read(&env, &ws, &mut |l| said.push(l));
        assert_eq!(s, Settings::default());
        assert!(said[0].contains("inside the workspace"), "{said:?}");
    }
}
