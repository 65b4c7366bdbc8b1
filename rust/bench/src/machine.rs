//! The machine and filesystem a bench run measured, for its header lines: cores, CPU model,
//! memory, kernel and the UTC date and time (`describe`), the filesystem type of the bench
//! directory (`fs_type`) and whether per-file clones work there (`Env::probe`).

use crate::fdops;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The bench's work directory and what its filesystem can do.
pub struct Env {
    pub work: PathBuf,
    /// `ext4`, `xfs`, `btrfs`, ... (`fs_type`).
    pub fs: String,
    /// Per-file clones (FICLONE, clonefileat) work there.
    pub reflink: bool,
}

impl Env {
    /// Look at `work`'s filesystem (the probe writes and removes two entries in it).
    pub fn probe(work: PathBuf) -> Env {
        Env {
            fs: fs_type(&work),
            reflink: fdops::probe_reflink(&work),
            work,
        }
    }
}

/// "2 cores (CPU model), 24 GiB RAM, Linux 6.x, 2025-01-01 12:00 UTC".
pub fn describe() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    let kernel = if unsafe { libc::uname(&mut u) } == 0 {
        let f = |b: &[libc::c_char]| {
            let b: Vec<u8> = b
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&b).into_owned()
        };
        format!("{} {}", f(&u.sysname), f(&u.release))
    } else {
        "unknown kernel".into()
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| format!(" ({})", v.trim()))
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let kb: u64 = t.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!(", {:.0} GiB RAM", kb as f64 / (1 << 20) as f64))
        })
        .unwrap_or_default();
    format!(
        "{cores} cores{cpu}{mem}, {kernel}, {} UTC",
        utc(SystemTime::now())
    )
}

/// `t` as "YYYY-MM-DD HH:MM" in UTC; a clock before 1970 reads as the epoch.
fn utc(t: SystemTime) -> String {
    // RFC 3339 to the second is "YYYY-MM-DDTHH:MM:SSZ": the date, then the hour and minute.
    let s = humantime::format_rfc3339_seconds(t.max(UNIX_EPOCH)).to_string();
    format!("{} {}", &s[..10], &s[11..16])
}

/// The filesystem type of `p` (`ext4`, `xfs`, `btrfs`, `apfs`, ...), as the engine names it
/// for `clonestage status`.
pub fn fs_type(p: &Path) -> String {
    clonestage_engine::platform::filesystem_name(p).unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn utc_gives_the_date_and_minute_the_hand_written_code_gave() {
        // Expected values from Python's datetime and the hand-written code this replaced.
        for (secs, want) in [
            (0, "1970-01-01 00:00"),
            (951_829_679, "2000-02-29 13:07"),
            (1_795_500_000, "2026-11-24 06:00"),
            (4_102_444_799, "2099-12-31 23:59"),
        ] {
            assert_eq!(utc(UNIX_EPOCH + Duration::from_secs(secs)), want, "{secs}");
        }
        assert_eq!(
            utc(UNIX_EPOCH - Duration::from_secs(60)),
            "1970-01-01 00:00"
        );
    }

    #[test]
    fn describe_names_cores_kernel_and_a_utc_time() {
        let d = describe();
        assert!(d.contains(" cores"), "{d}");
        assert!(d.ends_with(" UTC"), "{d}");
        let (_, date) = d.rsplit_once(", ").unwrap();
        assert_eq!(date.len(), "2025-01-01 12:00 UTC".len(), "{d}");
    }
}
