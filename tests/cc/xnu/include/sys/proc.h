// sys/proc.h of the XNU emulation (tests/cc/xnu): the process states, the
// P_WEXIT flag and the three fields of struct extern_proc that
// cc/process-tools-darwin.cc reads through sysctl(KERN_PROC_PGRP)
// (xnu-11215.1.10 bsd/sys/proc.h: struct extern_proc 103, p_flag 116,
// p_stat 117, p_pid 118, SIDL..SZOMB 160-164, P_WEXIT 183).

#ifndef CLONESTAGE_TESTS_CC_XNU_SYS_PROC_H_
#define CLONESTAGE_TESTS_CC_XNU_SYS_PROC_H_

#include <sys/types.h>

#define SIDL 1
#define SRUN 2
#define SSLEEP 3
#define SSTOP 4
#define SZOMB 5

#define P_WEXIT 0x00002000

struct extern_proc {
  int p_flag;
  char p_stat;
  pid_t p_pid;
};

#endif  // CLONESTAGE_TESTS_CC_XNU_SYS_PROC_H_
