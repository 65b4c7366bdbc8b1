//! The dead-temp sweep: `tmp/` entries and half-built `subtrees/.b-*` directories left by
//! processes that no longer exist (their names start with the writer's pid, see
//! `Cache::tmp_name`). Run by the server at start and by every `gc`.

use super::Cache;

/// Remove `tmp/` entries, and half-built `subtrees/.b-*` entries, left by processes that no
/// longer exist.
pub fn sweep_dead_tmp(cache: &Cache) -> usize {
    let mut removed = 0;
    let entries = ["tmp", "subtrees"]
        .iter()
        .filter_map(|d| std::fs::read_dir(cache.root.join(d)).ok())
        .flat_map(|rd| rd.flatten());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let name = name.strip_prefix(".b-").unwrap_or(&name);
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid == std::process::id() as i32 || pid_alive(pid) {
            continue;
        }
        if crate::remove::remove_tree(&e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether process `pid` exists (EPERM: it does, owned by another user).
fn pid_alive(pid: i32) -> bool {
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_of_dead_processes_go_and_live_ones_stay() {
        let c = tempfile::tempdir().unwrap();
        let cache = Cache::open(c.path()).unwrap();
        // A pid that just ended (reuse within the test is unlikely and would only keep files).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let tmp = c.path().join("tmp");
        std::fs::write(tmp.join(format!("{dead}-1-blob")), b"x").unwrap();
        std::fs::create_dir(tmp.join(format!("{dead}-2-dir"))).unwrap();
        std::fs::write(tmp.join(format!("{me}-3-blob")), b"x").unwrap();
        std::fs::write(tmp.join("foreign"), b"x").unwrap();
        let sub = c.path().join("subtrees");
        std::fs::create_dir(sub.join(format!(".b-{dead}-4"))).unwrap();
        std::fs::create_dir(sub.join(format!(".b-{me}-5"))).unwrap();
        assert!(pid_alive(me as i32));
        assert!(!pid_alive(dead as i32));
        assert_eq!(sweep_dead_tmp(&cache), 3);
        let left = |d: &std::path::Path| {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            left(&tmp),
            vec![format!("{me}-3-blob"), "foreign".to_string()]
        );
        assert_eq!(left(&sub), vec![format!(".b-{me}-5")]);
    }
}
