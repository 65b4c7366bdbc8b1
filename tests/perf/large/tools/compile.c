// compile: the compiler stand-in of tests/perf/large (see perf/defs.bzl).
//
//   compile @PARAMS      (one argument per line, as Bazel writes them)
// with
//   --module-name NAME   module being compiled
//   --out-module PATH    1 MiB module file (dependents read it)
//   --out-object PATH    512 KiB object file
//   --work-ms N          CPU milliseconds to spend after reading the inputs
//   --in PATH            an input (repeatable)
//
// It reads every byte of every input and hashes it, spends N ms of its own
// CPU time (CLOCK_PROCESS_CPUTIME_ID, so the same work under any load), and
// writes outputs that depend only on the inputs' paths and contents.
// Exit codes: 0 success, 1 an input or output problem, 2 bad usage.
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

static uint64_t hash_bytes(uint64_t h, const unsigned char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    h = mix(h, v);
  }
  for (; i < n; ++i) {
    h = mix(h, p[i]);
  }
  return h;
}

static unsigned char buf[1 << 20];

static uint64_t hash_file(uint64_t h, const char* path, long long* bytes) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd == -1) {
    fprintf(stderr, "compile: cannot open %s: %s\n", path, strerror(errno));
    exit(1);
  }
  h = hash_bytes(h, (const unsigned char*)path, strlen(path));
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "compile: cannot read %s: %s\n", path, strerror(errno));
      exit(1);
    }
    if (n == 0) break;
    h = hash_bytes(h, buf, (size_t)n);
    *bytes += n;
  }
  close(fd);
  return h;
}

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void write_output(const char* path, const char* header, uint64_t seed,
                         size_t size) {
  FILE* f = fopen(path, "wb");
  if (f == NULL) {
    fprintf(stderr, "compile: cannot create %s: %s\n", path, strerror(errno));
    exit(1);
  }
  size_t n = strlen(header);
  fwrite(header, 1, n, f);
  uint64_t x = seed;
  while (n < size) {
    x = mix(x, n);
    size_t k = size - n < 8 ? size - n : 8;
    fwrite(&x, 1, k, f);
    n += k;
  }
  if (fclose(f) != 0) {
    fprintf(stderr, "compile: cannot write %s: %s\n", path, strerror(errno));
    exit(1);
  }
}

static void usage(const char* why) {
  fprintf(stderr,
          "compile: %s\nusage: compile @PARAMS | --module-name NAME "
          "--out-module PATH --out-object PATH --work-ms N [--in PATH]...\n",
          why);
  exit(2);
}

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] != '@') usage("expects one @PARAMS argument");
  FILE* params = fopen(argv[1] + 1, "r");
  if (params == NULL) {
    fprintf(stderr, "compile: cannot open %s: %s\n", argv[1] + 1, strerror(errno));
    return 1;
  }
  char* name = NULL;
  char* out_module = NULL;
  char* out_object = NULL;
  long work_ms = 0;
  long inputs = 0;
  long long bytes = 0;
  uint64_t h = 0x1234567;
  char* line = NULL;
  size_t cap = 0;
  char** want = NULL;  // Where the next line goes; NULL: it is an option.
  int want_in = 0, want_work = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, params)) != -1) {
    if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
    if (want != NULL) {
      *want = strdup(line);
      want = NULL;
    } else if (want_in) {
      h = hash_file(h, line, &bytes);
      ++inputs;
      want_in = 0;
    } else if (want_work) {
      work_ms = strtol(line, NULL, 10);
      want_work = 0;
    } else if (strcmp(line, "--module-name") == 0) {
      want = &name;
    } else if (strcmp(line, "--out-module") == 0) {
      want = &out_module;
    } else if (strcmp(line, "--out-object") == 0) {
      want = &out_object;
    } else if (strcmp(line, "--in") == 0) {
      want_in = 1;
    } else if (strcmp(line, "--work-ms") == 0) {
      want_work = 1;
    } else {
      fprintf(stderr, "compile: unknown argument '%s'\n", line);
      return 2;
    }
  }
  fclose(params);
  if (name == NULL || out_module == NULL || out_object == NULL) {
    usage("--module-name, --out-module and --out-object are required");
  }
  // The stand-in for type-checking and code generation: CPU time, not wall.
  const double start = cpu_ms();
  uint64_t w = h;
  while (cpu_ms() - start < (double)work_ms) {
    for (int i = 0; i < 100000; ++i) w = mix(w, (uint64_t)i);
  }
  volatile uint64_t sink = w;  // Keeps the loop's work; never in the outputs.
  (void)sink;
  char header[256];
  snprintf(header, sizeof(header), "module %s inputs %ld bytes %lld digest %016llx\n",
           name, inputs, bytes, (unsigned long long)h);
  write_output(out_module, header, h, 1 << 20);
  write_output(out_object, header, mix(h, 1), 1 << 19);
  return 0;
}
