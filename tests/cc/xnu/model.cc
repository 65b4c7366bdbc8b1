// model.cc: see model.h.

#include "xnu/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace clonestage {
namespace xnu {
namespace {

void WriteAll(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, s, n);
    if (w == -1 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void NotModelled(const char* what) {
  const char prefix[] = "xnu emulation: ";
  const char suffix[] = " is not modelled\n";
  WriteAll(2, prefix, sizeof(prefix) - 1);
  WriteAll(2, what, strlen(what));
  WriteAll(2, suffix, sizeof(suffix) - 1);
  abort();
}

void Trace(const char* line) {
  // getenv only reads environ; nothing here allocates.
  const char* path = getenv("CLONESTAGE_XNU_TRACE");
  if (path == nullptr || path[0] == '\0') {
    return;
  }
  const int saved_errno = errno;
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd != -1) {
    // One write of the whole line: O_APPEND keeps lines of concurrent
    // writers whole.
    char buf[256];
    size_t n = strlen(line);
    if (n > sizeof(buf) - 1) n = sizeof(buf) - 1;
    memcpy(buf, line, n);
    buf[n] = '\n';
    WriteAll(fd, buf, n + 1);
    close(fd);
  }
  errno = saved_errno;
}

}  // namespace xnu
}  // namespace clonestage
