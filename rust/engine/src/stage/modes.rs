//! How this process reaches the permission contract's modes with the fewest syscalls, decided
//! once per `Stager` from its umask and what it may do (a server never changes either).

use crate::cas::Cache;
use crate::platform::{self, cstr};

/// How this process reaches the contract's modes with the fewest syscalls; decided once per
/// `Stager` (a server never changes its umask or credentials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Modes {
    /// The umask clears bits of the modes we create with (0o444, 0o555, 0o755; e.g. umask
    /// 077): every file is chmod'ed after it is made.
    pub fix_files: bool,
    /// Input directories are made 0o555 at once and filled afterwards, saving an fchmod (an
    /// inode update in the journal) per directory: only where this process may create
    /// entries in a read-only directory (root with CAP_DAC_OVERRIDE, the usual CI case) and
    /// the umask leaves 0o555 whole. Otherwise they are made 0o755 and chmod'ed once full.
    pub dirs_direct: bool,
    /// The root is made 0o755 exactly (the umask clears none of 0o755): no chmod at the end.
    pub root_exact: bool,
}

impl Modes {
    pub(super) fn of_this_process(cache: &Cache) -> Modes {
        let umask = platform::current_umask();
        let fix_files = umask & 0o222 != umask;
        Modes {
            fix_files,
            dirs_direct: !fix_files && can_fill_read_only_dirs(cache),
            root_exact: umask & 0o755 == 0,
        }
    }
}

/// Whether this process can create entries in a 0o555 directory: tried once in the cache's
/// `tmp/` (two mkdirs, two rmdirs), not assumed from the uid (a container's root may lack
/// CAP_DAC_OVERRIDE).
fn can_fill_read_only_dirs(cache: &Cache) -> bool {
    let tmp = cache.tmp_dir();
    let Ok(name) = cstr(cache.tmp_name("mode-probe")) else {
        return false;
    };
    let Ok(dir) = tmp.mkdir_at(&name, 0o555) else {
        return false;
    };
    let inner = c"x";
    let ok = dir.mkdir_at(inner, 0o755).is_ok();
    if ok {
        let _ = dir.unlink_at(inner, true);
    }
    drop(dir);
    let _ = tmp.unlink_at(&name, true);
    ok
}
