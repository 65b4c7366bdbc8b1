// stats.cc: formats and atomically writes the --stats JSON; see stats.h for
// the contract.

#include "cc/stats.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cc/logging.h"
#include "cc/process-tools.h"

namespace clonestage {

std::string FormatStatsJson(const Stats& stats) {
  char buf[512];
  const int n = snprintf(
      buf, sizeof(buf),
      "{\"exit_code\": %d, \"signal\": %d, \"timed_out\": %s, "
      "\"wall_us\": %" PRId64 ", \"user_us\": %" PRId64 ", \"sys_us\": %" PRId64
      ", \"max_rss_kb\": %" PRId64 "}\n",
      stats.exit_code, stats.signal, stats.timed_out ? "true" : "false",
      stats.wall_us, stats.user_us, stats.sys_us, stats.max_rss_kb);
  if (n < 0 || static_cast<size_t>(n) >= sizeof(buf)) {
    DIE("formatting the stats JSON");
  }
  return std::string(buf, static_cast<size_t>(n));
}

bool WriteStatsFile(const std::string& path, const Stats& stats) {
  const std::string json = FormatStatsJson(stats);
  if (path == "-") {
    // The wrapper's own stdout (a pipe its caller reads): no file to create,
    // rename and remove. COMMAND's stdout went to --stdout, not here.
    if (WriteAll(STDOUT_FILENO, json.data(), json.size())) {
      return true;
    }
    fprintf(stderr, "%s: cannot write the stats to stdout: %s\n", kProgramName,
            strerror(errno));
    return false;
  }
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = OpenForWriting(tmp);
  const char* failed = "open";
  if (fd != -1) {
    const bool written = WriteAll(fd, json.data(), json.size());
    const int write_errno = errno;
    // close() may report a deferred write error (NFS): check it too.
    const bool closed = close(fd) == 0;
    if (!written) {
      errno = write_errno;
      failed = "write";
    } else if (!closed) {
      failed = "close";
    } else if (rename(tmp.c_str(), path.c_str()) == 0) {
      return true;
    } else {
      failed = "rename";
    }
    const int saved_errno = errno;
    (void)unlink(tmp.c_str());  // Best effort; the error below matters.
    errno = saved_errno;
  }
  fprintf(stderr, "%s: cannot write --stats file '%s': %s of '%s': %s\n",
          kProgramName, path.c_str(), failed, tmp.c_str(), strerror(errno));
  return false;
}

}  // namespace clonestage
