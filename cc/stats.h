// stats.h: the --stats file of clonestage-spawn.
//
// Contract (the Rust server parses this): one JSON object on one line,
// exactly these keys in this order, all integers except timed_out:
//   {"exit_code": N, "signal": N, "timed_out": true|false, "wall_us": N,
//    "user_us": N, "sys_us": N, "max_rss_kb": N}
//  - exit_code: the wrapper's own exit code (see exit-codes.h).
//  - signal: the signal that killed COMMAND, 0 if it exited.
//  - timed_out: whether --timeout expired.
//  - wall_us: from just before fork() until COMMAND exited.
//  - user_us, sys_us, max_rss_kb: COMMAND and all its descendants
//    (getrusage(RUSAGE_CHILDREN)); max_rss_kb is that of the largest one.
// The file is written to FILE.tmp.<pid> and renamed over FILE, so a reader
// sees either no file or the whole object.

#ifndef CLONESTAGE_CC_STATS_H_
#define CLONESTAGE_CC_STATS_H_

#include <stdint.h>

#include <string>

namespace clonestage {

struct Stats {
  int exit_code = 0;
  int signal = 0;
  bool timed_out = false;
  int64_t wall_us = 0;
  int64_t user_us = 0;
  int64_t sys_us = 0;
  int64_t max_rss_kb = 0;
};

// The JSON object described above, with a trailing newline.
std::string FormatStatsJson(const Stats& stats);

// Writes FormatStatsJson(stats) to path atomically, or to the wrapper's own
// stdout when path is "-". Returns false with a message on stderr (naming
// the path and errno) on failure.
bool WriteStatsFile(const std::string& path, const Stats& stats);

}  // namespace clonestage

#endif  // CLONESTAGE_CC_STATS_H_
