// procfs.cc: see procfs.h.

#include "xnu/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace clonestage {
namespace xnu {
namespace {

// Parses a decimal number at *p, advancing past it; false if there is none.
bool ParseNumber(const char** p, const char* end, long* out) {
  bool negative = false;
  if (*p < end && **p == '-') {
    negative = true;
    ++*p;
  }
  const char* start = *p;
  long value = 0;
  while (*p < end && **p >= '0' && **p <= '9') {
    value = value * 10 + (**p - '0');
    ++*p;
  }
  *out = negative ? -value : value;
  return *p != start;
}

// The linux_dirent64 records getdents64 fills in.
struct Dirent64 {
  unsigned long long d_ino;
  long long d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

}  // namespace

bool IsZombie(const ProcEntry& entry) {
  return entry.state == 'Z' || entry.state == 'X';
}

bool ReadProc(pid_t pid, ProcEntry* entry) {
  char path[64];
  // "/proc/%d/stat" without snprintf (not async-signal-safe on glibc).
  char digits[16];
  int n = 0;
  for (long v = pid; v > 0 && n < 15; v /= 10) {
    digits[n++] = static_cast<char>('0' + v % 10);
  }
  const char prefix[] = "/proc/";
  const char suffix[] = "/stat";
  size_t len = 0;
  for (const char* s = prefix; *s != '\0'; ++s) path[len++] = *s;
  while (n > 0) path[len++] = digits[--n];
  for (const char* s = suffix; *s != '\0'; ++s) path[len++] = *s;
  path[len] = '\0';

  int fd;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd == -1 && errno == EINTR);
  if (fd == -1) {
    return false;
  }
  char buf[1024];
  ssize_t got;
  do {
    got = read(fd, buf, sizeof(buf));
  } while (got == -1 && errno == EINTR);
  close(fd);
  if (got <= 0) {
    return false;
  }
  // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses,
  // so parse from the last ')'.
  const char* end = buf + got;
  const char* p = end;
  while (p > buf && p[-1] != ')') --p;
  if (p == buf || end - p < 4) {
    return false;
  }
  ++p;  // The space after ')'.
  entry->pid = pid;
  entry->state = *p++;
  // ... PPID PGRP SESSION TTY_NR TPGID FLAGS ... (proc(5)).
  long fields[6] = {};
  for (long& field : fields) {
    if (p >= end || *p++ != ' ' || !ParseNumber(&p, end, &field)) {
      return false;
    }
  }
  constexpr long kPfExiting = 0x00000004;  // include/linux/sched.h
  entry->ppid = static_cast<pid_t>(fields[0]);
  entry->pgid = static_cast<pid_t>(fields[1]);
  entry->exiting = (fields[5] & kPfExiting) != 0;
  return true;
}

int ForEachGroupMember(pid_t pgid, void (*visit)(const ProcEntry&, void*),
                       void* arg) {
  int dir;
  do {
    dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (dir == -1 && errno == EINTR);
  if (dir == -1) {
    return -1;
  }
  int visited = 0;
  alignas(8) char buf[8192];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n == -1 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    for (long off = 0; off < n;) {
      const Dirent64* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->d_reclen;
      const char* name = d->d_name;
      const char* name_end = name;
      while (*name_end != '\0') ++name_end;
      long pid = 0;
      const char* p = name;
      if (!ParseNumber(&p, name_end, &pid) || p != name_end || pid <= 0) {
        continue;  // Not a process ("self", "sys", ...).
      }
      ProcEntry entry;
      if (ReadProc(static_cast<pid_t>(pid), &entry) && entry.pgid == pgid) {
        visit(entry, arg);
        ++visited;
      }
    }
  }
  close(dir);
  return visited;
}

}  // namespace xnu
}  // namespace clonestage
