// Memory admission: whether a job's run fits in host memory before it
// starts. A job bigger than the machine (or the daemon's cgroup) would get
// the whole daemon OOM-killed, and its requeue after the restart would kill
// it again; it fails instead, with the numbers.
#ifndef TRAIND_ADMIT_H
#define TRAIND_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

// 0: the spec's host bytes (eng_spec_host_bytes) fit under budget (the
// host_memory_bytes key; 0: no budget of its own) and under what is
// available now: MemAvailable (/proc/meminfo) and, in a cgroup v2 with a
// limit, memory.max less memory.current of the daemon's cgroup and of each
// cgroup above it. -1: they do not; why says so with every number. A spec
// the engine cannot size is admitted (the runner fails it with the
// engine's own message).
int admit_host_memory(const eng_spec *s, int64_t budget, char *why, size_t n);

// The cgroup v2 memory room behind that: of the cgroup that proc_cgroup (a
// /proc/<pid>/cgroup file) names on its "0::" line, mounted under the first
// of mounts that has it, and of every cgroup above it, the one whose
// memory.max less memory.current is least. 0 with *out filled; -1 when no
// cgroup there has a memory.max (no v2, no limit).
typedef struct admit_cgroup {
  char dir[4200];
  int64_t max, current;
} admit_cgroup;
int admit_cgroup_room(const char *proc_cgroup, const char *const *mounts, int n_mounts, admit_cgroup *out);

#endif
