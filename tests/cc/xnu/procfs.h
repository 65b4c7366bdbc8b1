// procfs.h: what the XNU emulation knows about processes, read from Linux's
// /proc (tests/cc/xnu).
//
// Contract: every function is async-signal-safe (only open, read, close and
// getdents64, into stack buffers), because the emulated kill() runs inside
// the wrapper's signal handlers. A process that vanishes while it is read is
// skipped, as if it had been reaped before the read. Needs a /proc of the
// caller's own pid namespace (Bazel's sandboxes mount one).

#ifndef CLONESTAGE_TESTS_CC_XNU_PROCFS_H_
#define CLONESTAGE_TESTS_CC_XNU_PROCFS_H_

#include <sys/types.h>

namespace clonestage {
namespace xnu {

struct ProcEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  // The state letter of /proc/PID/stat: 'Z' zombie, 'X' dead, 'T'/'t'
  // stopped, 'R' running, others sleeping.
  char state = 0;
  // PF_EXITING in the flags of /proc/PID/stat (Linux include/linux/sched.h):
  // the process has started exiting (do_exit) and is not a zombie yet. A
  // process whose address space is large can stay so for hundreds of ms.
  bool exiting = false;
};

// Whether the entry is what XNU calls SZOMB: exited, waiting to be reaped.
bool IsZombie(const ProcEntry& entry);

// Reads /proc/PID/stat. False if there is no such process.
bool ReadProc(pid_t pid, ProcEntry* entry);

// Calls visit(entry, arg) for every process whose process group is pgid,
// zombies included. Returns the number visited, or -1 if /proc cannot be
// listed.
int ForEachGroupMember(pid_t pgid, void (*visit)(const ProcEntry&, void*),
                       void* arg);

}  // namespace xnu
}  // namespace clonestage

#endif  // CLONESTAGE_TESTS_CC_XNU_PROCFS_H_
