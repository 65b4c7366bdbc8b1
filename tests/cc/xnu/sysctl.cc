// sysctl.cc: sysctl({CTL_KERN, KERN_PROC, KERN_PROC_PGRP, pgid}) with XNU's
// semantics, for the wrapper built against the XNU emulation (tests/cc/xnu).
//
// The model, from bsd/kern/kern_sysctl.c of xnu-8019.41.5 (macOS 12.0) and
// xnu-11215.1.10 (macOS 15.0), lines given as 8019 / 11215:
//  - Every process whose p_pgrpid is pgid is listed (filter, 600-606 /
//    728-734), zombies included: the walk covers the zombie list too
//    (PROC_ALLPROCLIST | PROC_ZOMBPROCLIST, 796 / 916), and a zombie keeps
//    its group until it is reaped (kern_exit.c:2105 / 2801). Each entry
//    carries the process's p_stat (1070 / 1207), SZOMB for a zombie, and
//    p_flag with P_WEXIT for a process that has started exiting (P_LEXIT,
//    1015-1016 / 1141-1142): Linux's PF_EXITING of a non-zombie.
//  - Without a buffer, *oldlenp is what is needed plus KERN_PROCSLOP, five
//    entries (667 + 812 / 787 + 932). With one, as many entries as fit are
//    copied, *oldlenp is what was copied, and if more were needed the call
//    fails with ENOMEM (807-809 / 927-929).
//  - Not modelled: any other name, setting a value.
//
// This tests our model of the kernel, not the kernel.

#include <errno.h>
#include <sys/sysctl.h>

#include "xnu/model.h"
#include "xnu/procfs.h"

namespace clonestage {
namespace xnu {
namespace {

constexpr size_t kProcSlop = 5;

struct Listing {
  struct kinfo_proc* out = nullptr;
  size_t capacity = 0;
  size_t copied = 0;
  size_t needed = 0;
};

char Stat(const ProcEntry& entry) {
  if (IsZombie(entry)) return SZOMB;
  if (entry.state == 'T' || entry.state == 't') return SSTOP;
  if (entry.state == 'R') return SRUN;
  return SSLEEP;
}

void AddMember(const ProcEntry& entry, void* arg) {
  Listing* listing = static_cast<Listing*>(arg);
  ++listing->needed;
  if (listing->copied < listing->capacity) {
    struct kinfo_proc* kp = &listing->out[listing->copied++];
    *kp = {};
    kp->kp_proc.p_pid = entry.pid;
    kp->kp_proc.p_stat = Stat(entry);
    kp->kp_proc.p_flag = entry.exiting && !IsZombie(entry) ? P_WEXIT : 0;
    kp->kp_eproc.e_ppid = entry.ppid;
    kp->kp_eproc.e_pgid = entry.pgid;
  }
}

}  // namespace
}  // namespace xnu
}  // namespace clonestage

extern "C" int sysctl(int* name, u_int namelen, void* oldp, size_t* oldlenp,
                      void* newp, size_t newlen) {
  using clonestage::xnu::Listing;
  if (namelen != 4 || name[0] != CTL_KERN || name[1] != KERN_PROC ||
      name[2] != KERN_PROC_PGRP) {
    clonestage::xnu::NotModelled("sysctl() of a name but KERN_PROC_PGRP");
  }
  if (newp != nullptr || newlen != 0 || oldlenp == nullptr) {
    clonestage::xnu::NotModelled("sysctl() setting a value or without oldlenp");
  }
  Listing listing;
  if (oldp != nullptr) {
    listing.out = static_cast<struct kinfo_proc*>(oldp);
    listing.capacity = *oldlenp / sizeof(struct kinfo_proc);
  }
  if (clonestage::xnu::ForEachGroupMember(name[3], clonestage::xnu::AddMember,
                                          &listing) == -1) {
    clonestage::xnu::NotModelled("sysctl() without a readable /proc");
  }
  if (oldp == nullptr) {
    *oldlenp = (listing.needed + clonestage::xnu::kProcSlop) *
               sizeof(struct kinfo_proc);
    return 0;
  }
  *oldlenp = listing.copied * sizeof(struct kinfo_proc);
  if (listing.needed > listing.copied) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}
