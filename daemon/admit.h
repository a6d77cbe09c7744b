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

#endif
