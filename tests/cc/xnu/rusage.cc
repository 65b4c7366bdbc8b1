// rusage.cc: getrusage(2) with XNU's unit for ru_maxrss, for the wrapper
// built against the XNU emulation (tests/cc/xnu). Linked with
// -Wl,--wrap=getrusage (BUILD.bazel).
//
// The model: XNU fills ru_maxrss from the task's resident_size_max (calcru,
// bsd/kern/kern_resource.c:1318 in xnu-8019.41.5, macOS 12.0, and 1568 in
// xnu-11215.1.10, macOS 15.0), which is in bytes (osfmk/mach/task_info.h:331,
// "maximum resident memory size (bytes)"), and RUSAGE_CHILDREN keeps the
// largest of the reaped children's (ruadd, 1382 / 1632). Linux gives
// kilobytes. Every other field is Linux's own.
//
// This tests our model of the kernel, not the kernel.

#include <sys/resource.h>

extern "C" int __real_getrusage(int who, struct rusage* usage);

extern "C" int __wrap_getrusage(int who, struct rusage* usage) {
  const int r = __real_getrusage(who, usage);
  if (r == 0) {
    usage->ru_maxrss *= 1024;
  }
  return r;
}
