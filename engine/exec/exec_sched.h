// The step as the plan's windows (plan/plan.h): where each boundary lives,
// which transfers every window issues on which lane, and the device buffers
// of one boundary's size with the windows they live in. Each such buffer
// gets one buffer of a pool, chosen so that the pool holds exactly as many
// buffers as are alive in the busiest window. Built once when the executor
// opens, from a plan or from the uniform policy (whose transfers are whole
// boundaries: out in the boundary's own forward window, back in the window
// before its block's backward), and by eng_exec_tiers_of to size the arena
// without opening. Not part of the engine's API.
//
// Windows: F_l is window l, the head window L, B_j window 2L - j (plan.h).
// A boundary's buffers (the spans below are inclusive windows):
//   DEVICE boundary i      own  [i, 2L-i]: copied from the working buffer
//                                as F_i starts, read by its block's backward
//   HOST / STORE boundary i own  [i+1, last D2H window], when a copy-out range
//                                runs after F_i (copied from the working
//                                buffer as F_i ends); in F_i itself the
//                                copy-out reads the working buffer
//                           back [first H2D window, 2L-i]
//   recomputed boundary m  rc   [2L-(e-1), 2L-m] in block (s, e), s < m < e
// A transfer range is cut where any other lane of the same boundary cuts,
// so that each piece moves whole on every lane: the spill store keeps one
// entry per piece, and a piece's host staging (STORE boundaries) lives from
// its copy-out to its write, and from its read to its copy-in.
#ifndef ENG_EXEC_EXEC_SCHED_H
#define ENG_EXEC_EXEC_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "engine.h"
#include "plan/plan.h"

typedef struct exec_piece {
  int bnd;
  size_t off, n;              // byte range of the boundary
  int win[ENG_LANE_COUNT];    // window of each lane's transfer (-1: none on that lane)
} exec_piece;

typedef struct exec_xfer {
  int piece;
  eng_lane lane;
} exec_xfer;

typedef struct exec_sched {
  int L, W;                   // layers, windows (2L + 1)
  size_t bnd_bytes;
  eng_place *place;           // [L] where each boundary lives (NONE: recomputed)
  uint8_t *keep;              // [L] layers that keep their inner activations
  int *block_end;             // [L] kept boundary i: the next kept one (L at the end)
  exec_piece *piece;
  int n_piece;
  exec_xfer *xfer;            // every transfer, by window, then lane order within it
  int n_xfer;
  int *win_at;                // [W + 1]: window w's are xfer[win_at[w] .. win_at[w+1])
  int *own, *back, *rc;       // [L] pool buffer of each span (-1: none)
  int *out_last, *in_first;   // [L] off-device boundaries: last D2H, first H2D window
  int n_pool;                 // buffers in the pool
} exec_sched;

// From the plan p when not NULL (which must describe L layers of bnd_bytes
// boundaries), else from place / keep (the uniform policy or a caller's
// arrays). ENG_EINVAL names what does not describe a runnable step.
int exec_sched_build(exec_sched *s, int L, size_t bnd_bytes, const eng_place *place, const uint8_t *keep,
                     const eng_plan *p, eng_err *e);
void exec_sched_free(exec_sched *s);

// Windows of the step: F_l, the head, B_j.
static inline int exec_win_fwd(int l) { return l; }
static inline int exec_win_bwd(int L, int j) { return 2 * L - j; }

#endif
