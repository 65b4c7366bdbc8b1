// spawn_runner.cc: see spawn_runner.h.

#include "spawn_runner.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include <fstream>
#include <sstream>

namespace clonestage {
namespace testing {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  fprintf(stderr, "spawn_runner: %s: %s\n", what.c_str(), strerror(errno));
  abort();
}

void SleepSecs(double secs) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(secs);
  ts.tv_nsec = static_cast<long>((secs - static_cast<double>(ts.tv_sec)) * 1e9);
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

}  // namespace

double NowSecs() {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) == -1) {
    Fail("clock_gettime");
  }
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string SpawnPath() {
  const char* path = getenv("CLONESTAGE_SPAWN");
  if (path == nullptr || path[0] == '\0') {
    errno = ENOENT;
    Fail("$CLONESTAGE_SPAWN is not set (see cc/BUILD.bazel)");
  }
  char resolved[PATH_MAX];
  if (realpath(path, resolved) == nullptr) {
    Fail(std::string("realpath(") + path + ")");
  }
  return resolved;
}

Kernel WrapperKernel() {
  const char* kernel = getenv("CLONESTAGE_SPAWN_KERNEL");
  if (kernel != nullptr && kernel[0] != '\0') {
    if (strcmp(kernel, "xnu") == 0) return Kernel::kXnu;
    if (strcmp(kernel, "linux") == 0) return Kernel::kLinux;
    errno = EINVAL;
    Fail(std::string("$CLONESTAGE_SPAWN_KERNEL=") + kernel);
  }
#if defined(__APPLE__)
  return Kernel::kXnu;
#else
  return Kernel::kLinux;
#endif
}

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") +
                     "/clonestage-spawn-test.XXXXXX";
  if (mkdtemp(&tmpl[0]) == nullptr) {
    Fail("mkdtemp(" + tmpl + ")");
  }
  // Resolved, so tests can compare it with what `pwd -P` prints.
  char resolved[PATH_MAX];
  if (realpath(tmpl.c_str(), resolved) == nullptr) {
    Fail("realpath(" + tmpl + ")");
  }
  return resolved;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

void WriteFileOrDie(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) {
    Fail("writing " + path);
  }
}

bool FileExists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

bool WaitForFile(const std::string& path, double timeout_secs) {
  const double deadline = NowSecs() + timeout_secs;
  while (NowSecs() < deadline) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && st.st_size > 0) {
      return true;
    }
    SleepSecs(0.005);
  }
  return false;
}

bool ProcessExists(pid_t pid) {
  if (kill(pid, 0) == 0) {
    return true;
  }
  if (errno != ESRCH) {
    Fail("kill(" + std::to_string(pid) + ", 0)");
  }
  return false;
}

bool ProcessIsRunning(pid_t pid) {
#if defined(__APPLE__)
  int mib[] = {CTL_KERN, KERN_PROC, KERN_PROC_PID, static_cast<int>(pid)};
  struct kinfo_proc info;
  size_t size = sizeof(info);
  if (sysctl(mib, 4, &info, &size, nullptr, 0) == -1) {
    Fail("sysctl(KERN_PROC_PID, " + std::to_string(pid) + ")");
  }
  return size == sizeof(info) && info.kp_proc.p_stat != SZOMB;
#else
  // "PID (COMM) STATE ...": the state follows the last ')'.
  const std::string stat =
      ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) {
    return false;  // No such process.
  }
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
#endif
}

pid_t ReadPid(const std::string& path) {
  const std::string content = ReadFileOrEmpty(path);
  char* end = nullptr;
  const long pid = strtol(content.c_str(), &end, 10);
  if (end == content.c_str() || pid <= 0) {
    return -1;
  }
  return static_cast<pid_t>(pid);
}

std::vector<std::pair<std::string, std::string>> ParseFlatJson(
    const std::string& json) {
  std::vector<std::pair<std::string, std::string>> pairs;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < json.size() && isspace(static_cast<unsigned char>(json[i]))) {
      ++i;
    }
  };
  skip_space();
  if (i >= json.size() || json[i] != '{') {
    return {};
  }
  ++i;
  for (;;) {
    skip_space();
    if (i >= json.size() || json[i] != '"') {
      return {};
    }
    const size_t key_end = json.find('"', i + 1);
    if (key_end == std::string::npos) {
      return {};
    }
    std::string key = json.substr(i + 1, key_end - i - 1);
    i = key_end + 1;
    skip_space();
    if (i >= json.size() || json[i] != ':') {
      return {};
    }
    ++i;
    skip_space();
    const size_t value_start = i;
    while (i < json.size() && json[i] != ',' && json[i] != '}' &&
           !isspace(static_cast<unsigned char>(json[i]))) {
      ++i;
    }
    if (i == value_start) {
      return {};
    }
    pairs.emplace_back(key, json.substr(value_start, i - value_start));
    skip_space();
    if (i < json.size() && json[i] == ',') {
      ++i;
      continue;
    }
    if (i < json.size() && json[i] == '}') {
      ++i;
      skip_space();
      return i == json.size()
                 ? pairs
                 : std::vector<std::pair<std::string, std::string>>{};
    }
    return {};
  }
}

std::string JsonValue(
    const std::vector<std::pair<std::string, std::string>>& pairs,
    const std::string& key) {
  for (const auto& pair : pairs) {
    if (pair.first == key) {
      return pair.second;
    }
  }
  return "";
}

Spawn::Spawn(const std::vector<std::string>& args,
             const SpawnSettings& settings) {
  const std::string dir = MakeTempDir();
  out_path_ = dir + "/wrapper.stdout";
  err_path_ = dir + "/wrapper.stderr";
  std::vector<std::string> argv_strings;
  argv_strings.push_back(SpawnPath());
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_strings) {
    argv.push_back(&arg[0]);
  }
  argv.push_back(nullptr);

  start_secs_ = NowSecs();
  pid_ = fork();
  if (pid_ == -1) {
    Fail("fork");
  }
  if (pid_ == 0) {
    const int in = open(settings.stdin_path.c_str(), O_RDONLY | O_CLOEXEC);
    const int out =
        open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err =
        open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (in == -1 || out == -1 || err == -1 || dup2(in, 0) == -1 ||
        dup2(out, 1) == -1 || dup2(err, 2) == -1) {
      _exit(250);
    }
    if (!settings.cwd.empty() && chdir(settings.cwd.c_str()) == -1) {
      _exit(251);
    }
    umask(settings.umask);
    if (settings.ignored_signal != 0 &&
        signal(settings.ignored_signal, SIG_IGN) == SIG_ERR) {
      _exit(253);
    }
    if (settings.blocked_signal != 0) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, settings.blocked_signal);
      if (sigprocmask(SIG_BLOCK, &set, nullptr) == -1) {
        _exit(254);
      }
    }
    execv(argv[0], argv.data());
    _exit(252);
  }
}

Spawn::~Spawn() {
  if (pid_ > 0) {
    // Not waited for (the test failed early): do not leak the wrapper.
    (void)kill(pid_, SIGKILL);
    (void)waitpid(pid_, nullptr, 0);
  }
}

SpawnResult Spawn::Wait(double timeout_secs) {
  SpawnResult result;
  const double deadline = NowSecs() + timeout_secs;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      break;
    }
    if (r == -1 && errno != EINTR) {
      Fail("waitpid");
    }
    if (NowSecs() > deadline) {
      fprintf(stderr, "spawn_runner: wrapper %d still running after %gs\n",
              static_cast<int>(pid_), timeout_secs);
      (void)kill(pid_, SIGKILL);
    }
    SleepSecs(0.002);
  }
  result.elapsed_secs = NowSecs() - start_secs_;
  pid_ = -1;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  result.out = ReadFileOrEmpty(out_path_);
  result.err = ReadFileOrEmpty(err_path_);
  return result;
}

SpawnResult RunSpawn(const std::vector<std::string>& args,
                     const SpawnSettings& settings) {
  return Spawn(args, settings).Wait();
}

}  // namespace testing
}  // namespace clonestage
