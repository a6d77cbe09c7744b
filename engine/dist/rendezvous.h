// The rendezvous of a run that no MPI launcher started (issue 19): under the
// torchrun convention (a Kubernetes indexed Job, torchrun itself) the ranks
// share nothing but MASTER_ADDR and MASTER_PORT, and learn from rank 0 over
// TCP the one blob a collective library needs to form its communicator (the
// NCCL unique id). Rank 0 listens on MASTER_PORT and answers each other rank
// once; the others connect, retrying while rank 0 is not yet listening.
// Unauthenticated, as torch's TCPStore is: the port must be reachable from
// the job's hosts only. A rank whose world size differs from rank 0's is
// refused, with the reason.
#ifndef ENG_DIST_RENDEZVOUS_H
#define ENG_DIST_RENDEZVOUS_H

#include <stddef.h>

#include "common/err.h"
#include "dist/dist.h"

// Rank 0: sends blob[n] to every other rank of env's world and returns once
// each has it. The others: blob[n] becomes rank 0's. Either gives up after
// wait_s seconds with an error naming the address and who was missing
// (ENG_EIO), as it does on a malformed or refused exchange.
int eng_dist_rendezvous(const eng_dist_env *env, void *blob, size_t n, int wait_s, eng_err *e);

#endif
