// A link of a set bandwidth that copies cross one after another, as a PCIe
// direction or an NVMe drive does: a copy of n bytes holds it for n / bps
// seconds, from when it started or the copy before it let go, whichever is
// later, and returns only then. The cpu backend's copy-in and copy-out and
// the executor's store lanes pass through one each when a bandwidth is set
// (eng_spec.link_bps, spill_bps), so that a run on this machine has links
// whose time is real and the overlap a plan promises can be measured.
// bps 0: no cap (eng_link_pass returns at once).
#ifndef ENG_COMMON_LINK_H
#define ENG_COMMON_LINK_H

#include <pthread.h>
#include <stddef.h>

typedef struct eng_link {
  double bps;
  pthread_mutex_t mu;
  double free_at; // when the last copy lets go (eng_now seconds)
} eng_link;

void eng_link_init(eng_link *l, double bps);
void eng_link_destroy(eng_link *l);
// A copy of n bytes that started at t0 (eng_now) has moved its bytes:
// waits until its time on the link is up.
void eng_link_pass(eng_link *l, size_t n, double t0);

#endif
