// sys/sysctl.h of the XNU emulation (tests/cc/xnu): the KERN_PROC_PGRP query
// of macOS's <sys/sysctl.h> (xnu-11215.1.10 bsd/sys/sysctl.h: it includes
// <sys/proc.h> at 96, CTL_KERN 695, KERN_PROC 733, KERN_PROC_PGRP 948,
// struct kinfo_proc 983-1010 with e_ppid and e_pgid, sysctl() 1447). Only
// the fields the emulation fills are declared. Implemented by sysctl.cc.

#ifndef CLONESTAGE_TESTS_CC_XNU_SYS_SYSCTL_H_
#define CLONESTAGE_TESTS_CC_XNU_SYS_SYSCTL_H_

#include <stddef.h>
#include <sys/proc.h>
#include <sys/types.h>

#define CTL_KERN 1
#define KERN_PROC 14
#define KERN_PROC_PGRP 2

struct kinfo_proc {
  struct extern_proc kp_proc;
  struct eproc {
    pid_t e_ppid;
    pid_t e_pgid;
  } kp_eproc;
};

#ifdef __cplusplus
extern "C" {
#endif

int sysctl(int* name, u_int namelen, void* oldp, size_t* oldlenp, void* newp,
           size_t newlen);

#ifdef __cplusplus
}
#endif

#endif  // CLONESTAGE_TESTS_CC_XNU_SYS_SYSCTL_H_
