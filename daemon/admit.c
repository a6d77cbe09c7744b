// Memory admission (admit.h): the job's host bytes against the configured
// budget, the machine's MemAvailable and the cgroup v2 limits.
#include "admit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define GIB(x) ((double)(x) / 1073741824.0)

// A "Key: N kB" line of /proc/meminfo in bytes, or -1.
static int64_t meminfo(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t v = -1;
  size_t kl = strlen(key);
  while (v < 0 && fgets(line, sizeof line, f)) {
    long long kb;
    if (!strncmp(line, key, kl) && line[kl] == ':' && sscanf(line + kl + 1, "%lld", &kb) == 1) v = (int64_t)kb * 1024;
  }
  fclose(f);
  return v;
}

// One number from a cgroup file; -1 when absent or "max".
static int64_t cg_num(const char *dir, const char *file) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long long v;
  int ok = fscanf(f, "%lld", &v) == 1;
  fclose(f);
  return ok ? (int64_t)v : -1;
}

int admit_cgroup_room(const char *proc_cgroup, const char *const *mounts, int n_mounts, admit_cgroup *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(proc_cgroup, "r");
  if (!f) return -1;
  char line[4096], rel[4096] = "";
  int found = 0;
  while (!found && fgets(line, sizeof line, f))
    if (!strncmp(line, "0::", 3)) {
      snprintf(rel, sizeof rel, "%s", line + 3);
      rel[strcspn(rel, "\n")] = 0;
      found = 1;
    }
  fclose(f);
  if (!found) return -1;
  for (int m = 0; m < n_mounts; m++) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s%s", mounts[m], strcmp(rel, "/") ? rel : "");
    if (cg_num(dir, "memory.current") < 0) continue; // not mounted here (the root has none either: no limit)
    for (;;) {
      int64_t max = cg_num(dir, "memory.max"), cur = cg_num(dir, "memory.current");
      if (max >= 0 && cur >= 0 && (!*out->dir || max - cur < out->max - out->current)) {
        snprintf(out->dir, sizeof out->dir, "%s", dir);
        out->max = max;
        out->current = cur;
      }
      char *slash = strrchr(dir, '/');
      if (!slash || (size_t)(slash - dir) < strlen(mounts[m])) break;
      *slash = 0;
    }
    break;
  }
  return *out->dir ? 0 : -1;
}

int admit_host_memory(const eng_spec *s, int64_t budget, char *why, size_t n) {
  size_t need_u;
  eng_err e = {0};
  if (eng_spec_host_bytes(s, &need_u, &e)) return 0;
  int64_t need = (int64_t)need_u, avail = meminfo("MemAvailable");
  // The v2 hierarchy, or its unified part on a hybrid host.
  static const char *const mounts[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
  admit_cgroup cg;
  int64_t room = admit_cgroup_room("/proc/self/cgroup", mounts, 2, &cg) ? -1 : cg.max - cg.current;
  int over = (budget > 0 && need > budget) || (avail >= 0 && need > avail) || (room >= 0 && need > room);
  if (!over) return 0;
  char b[64] = "not set", a[64] = "unknown", c[4400] = "no cgroup v2 memory limit";
  if (budget > 0) snprintf(b, sizeof b, "%" PRId64 " (%.2f GiB)", budget, GIB(budget));
  if (avail >= 0) snprintf(a, sizeof a, "%" PRId64 " (%.2f GiB)", avail, GIB(avail));
  if (room >= 0)
    snprintf(c, sizeof c, "cgroup %s: memory.max %" PRId64 " - memory.current %" PRId64 " = %" PRId64 " (%.2f GiB)",
             cg.dir, cg.max, cg.current, room, GIB(room));
  snprintf(why, n,
           "host memory: the job needs %" PRId64 " bytes (%.2f GiB: model state, host activations and, on the "
           "cpu, its arena) and does not fit: host_memory_bytes %s, MemAvailable %s, %s",
           need, GIB(need), b, a, c);
  return -1;
}
