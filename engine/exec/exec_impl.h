// The executor's insides, shared by the step (exec.c) and the two ways of
// computing it behind one table: the cpu kernels in fp32 on host memory
// (exec_cpu.c) and the cuda kernels with bf16 storage (exec_cuda.c). The
// step's control flow, the schedule, the streams and the policy live in
// exec.c once; a backend only says how big its buffers are and how to
// compute, copy and finish on them. Not part of the engine's API.
#ifndef ENG_EXEC_EXEC_IMPL_H
#define ENG_EXEC_EXEC_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/link.h"
#include "common/worker.h"
#include "exec/exec.h"
#include "exec/exec_sched.h"

// One weight copy: shard `shard` into weight slot `slot`, once the shard's
// update count reaches `need`. The head stage copies the final norm and the
// head matrix (lm_head, or the embedding when tied) into one slot.
typedef struct copy_job {
  eng_exec *x;
  int shard, slot;
  int64_t need;
} copy_job;

// One gradient copy: a gradient slot's contents into the host store.
typedef struct out_job {
  eng_exec *x;
  int shard, slot;
} out_job;

// One transfer of the schedule, with the arena address it reads or
// writes, bound when its window is issued.
typedef struct lane_job {
  eng_exec *x;
  const exec_xfer *t;
  char *dev;            // the piece's bytes in the arena
} lane_job;

// A piece's progress in this run: the ticket of each lane's transfer (for
// the next lane of the chain to wait on) and its host staging (store pieces).
typedef struct piece_state {
  uint64_t ticket[ENG_LANE_COUNT];
  void *staging;
} piece_state;

typedef struct staging_buf {
  void *p;
  size_t n;
  int busy;
} staging_buf;

typedef struct opt_job {
  eng_exec *x;
  int shard;
  eng_exec_update u;
} opt_job;

enum { MAX_SCHED = 4096 };

// Bytes of the arena's buffers on one backend.
typedef struct exec_sizes {
  size_t align;        // every buffer starts on a multiple of this
  size_t weight;       // per streamed weight value (fp32 on the cpu, bf16 on cuda)
  size_t act;          // per activation value (boundaries and their gradients)
  size_t acts;         // one micro-batch's layer activations
  size_t scratch;      // one micro-batch's backward scratch
  size_t head_scratch; // the fused head and loss
  size_t own;          // the backend's own buffers, one region it carves itself
} exec_sizes;

typedef struct exec_ops exec_ops;

struct eng_exec {
  eng_model *m;
  eng_dev *dev;
  const exec_ops *ops;
  void *be;             // the backend's own state (exec_cpu.c, exec_cuda.c)
  eng_exec_policy p;
  exec_sizes z;
  int L, mb;            // layers; sequences per micro-batch
  size_t bnd_bytes;     // one boundary activation of the whole batch: B*T*d values

  // arena
  void *wslot[2];       // weights as streamed (z.weight bytes per value)
  float *gslot[2];      // weight gradients, accumulated in fp32 on every backend
  void *xa, *xb;        // forward: current / next boundary; backward: dy / dx
  exec_sched win;       // the step's windows, transfers and boundary buffers
  eng_place *place;     // [L] where each boundary lives (win.place)
  uint8_t *keep;        // [L] layers that keep their inner activations (win.keep)
  int spills;           // some boundary goes to the store
  void **pool;          // [win.n_pool] boundary-sized buffers (exec_sched.h)
  void *acts_buf;       // the workspace's activations, then every kept layer's
  void **acts_at;       // [1 + L * micro_batches] by exec_acts_index: where each one's
                        // activations live (NULL: not used by this policy)
  void *scratch_buf, *ybuf;
  void *h_xn, *h_dxn;   // loss phase, one micro-batch: normed last boundary, its gradient
  float *h_rstd;
  void *h_scratch;
  void *own;            // the backend's own buffers (z.own bytes)
  int32_t *targets;     // [B*T] shifted labels (host)
  const int32_t *pos;   // the run's position ids [B*T] (the caller's, host), or NULL
  double *seq_loss;     // eng_exec_score's run: each sequence's loss sum, [B]; else NULL
  void **ckpt_host;     // [L] host copies of the boundaries placed in host memory
  void *stage;          // the cuda backend's host rows (token ids in, dX of boundary 0 out)
  int64_t runs;         // backward passes started: the spill store's step key
  int64_t count_total;  // eng_exec_count_set's, for the next run (0: the run's own count)

  // streams
  eng_worker copy_in, copy_out, optim;
  eng_worker lane[ENG_LANE_COUNT]; // the activation lanes (plan.h): their transfers
  lane_job *ljobs;      // [win.n_xfer] this run's transfers, issued window by window
  piece_state *pieces;  // [win.n_piece]
  eng_link spill_w, spill_r; // the store lanes' links (policy spill_bps)
  // Host staging of store pieces, kept from step to step (pinned on cuda,
  // where an allocation per piece and step would cost more than the copy):
  // a buffer is taken by size and given back; the cache grows to the most
  // pieces in flight at once, which the plan counts in host bytes.
  staging_buf *stage_cache; // [win.n_piece]
  int n_stage;
  eng_exec_result *res; // the run in progress's results (for the window ends' waits)
  // The run's timeline (eng_exec_timeline): spans recorded by the compute
  // thread and the copy workers, which finish within the run.
  eng_plan_span *spans;
  int cap_spans;
  _Atomic int n_spans;
  double t_run0;
  pthread_mutex_t lane_mu;
  int lane_rc;          // the first failure of a lane in this run, and its message
  eng_err lane_err;
  copy_job cjobs[2];
  uint64_t cticket[2];  // copy-in ticket of what each slot holds (or will)
  out_job ojobs[2];
  uint64_t oticket[2];  // copy-out ticket that last read each gradient slot
  opt_job *opt_jobs;    // [2][shards]: round r's updates in half r % 2, since a lagged
                        // round is armed while the previous one may still be pending
  int inline_opt;       // updates run on the compute thread when first needed (cpu)
  int armed;            // an update round is armed for the run in progress
  int early;            // ... and each shard updates once its gradients are out (not inline)
  double *sumsq;        // per shard Σ g², filled by copy-out jobs (cpu) or at the end of
                        // the run from the device (cuda); the embedding's on the host

  // weight versions: updates applied per shard, and rounds launched
  pthread_mutex_t vmu;
  pthread_cond_t vcv;
  int64_t *version;
  int64_t rounds;

  // the step's weight schedule: shards in the order compute needs them
  int sched[MAX_SCHED];
  int n_sched, next_acquire;
};

// Values in a weight or gradient slot: a layer shard, or the head stage (the
// final norm and the head matrix, lm_head or the tied embedding) when larger.
static inline size_t exec_slot_values(const eng_layout *lo) {
  size_t head = lo->final_norm.numel + lo->embed.numel;
  size_t layer = lo->layer_numel > lo->dn_numel ? lo->layer_numel : lo->dn_numel;
  return layer > head ? layer : head;
}

// Activations of layer l's micro-batch i: index 0 is the workspace that
// recomputing layers share; a layer that keeps them has its own.
static inline int exec_acts_index(const eng_exec *x, int l, int i) {
  return x->keep[l] ? 1 + l * x->p.micro_batches + i : 0;
}

// How one backend computes. Unless noted, a function runs on the compute
// thread (the caller of eng_exec_run) and returns 0 or an ENG_E* code.
struct exec_ops {
  int logits; // can hand the logits back (eng_exec_run's logits argument)
  // After the arena is carved: binds the activations of every acts index,
  // the scratch and the own region, and prepares the host side. close undoes
  // what open did, also after a failed or partial open.
  int (*open)(eng_exec *x, eng_err *e);
  void (*close)(eng_exec *x);
  // Host memory for what copies to and from the arena (host checkpoints).
  int (*host_alloc)(eng_exec *x, void **p, size_t bytes, eng_err *e);
  void (*host_free)(void *p);

  // Streams. weights_in (copy-in worker): n values of what streams (the
  // working copy's bf16 where the model keeps one, else fp32) into weight
  // slot `slot`, as the slot holds them (z.weight), after compute released
  // it; slot_free: compute has queued its last use of the slot. grad_out (copy-out worker): gradient slot `slot`, finished
  // by grad_finish, into the host store of `shard`, and on the cpu its Σ g².
  void (*weights_in)(eng_exec *x, int slot, void *dst, const void *src, size_t n);
  void (*slot_free)(eng_exec *x, int slot);
  void (*grad_out)(eng_exec *x, int slot, int shard);

  // The step. begin: boundary 0 of ids into x->xa, the run's targets and
  // position ids (x->pos) where the head and the layers read them. copy:
  // arena to arena. layer_fwd / layer_bwd: micro-batch i through a layer
  // with activations `acts` (exec_acts_index), its rows of the position ids,
  // gradients added into g. head: micro-batch i through the final norm and
  // the fused head and loss, the loss added to *loss_sum (the cpu) or kept on
  // the device until end; with g, its gradients into g and dx. grad_zero /
  // grad_finish: a gradient slot before the shard's backward, and after it
  // (before grad_out; under POET-X also the layer's θ gradients). embed_bwd: dy of boundary 0 scattered into the
  // embedding's host gradient. end: the run's results in res and x->sumsq,
  // and the device's errors. abort: waits for the device after a failure.
  int (*begin)(eng_exec *x, const int32_t *ids, eng_err *e);
  int (*copy)(eng_exec *x, void *dst, const void *src, size_t bytes, eng_err *e);
  int (*layer_fwd)(eng_exec *x, int layer, const void *w, const void *in, void *out, int i, int acts, eng_err *e);
  int (*layer_bwd)(eng_exec *x, int layer, const void *w, float *g, const void *in, int i, int acts,
                   const void *dy, void *dx, eng_err *e);
  int (*head)(eng_exec *x, const void *w, float *g, const void *xl, void *dx, int i, float *logits, float scale,
              double *loss_sum, eng_err *e);
  int (*grad_zero)(eng_exec *x, int slot, size_t floats, eng_err *e);
  int (*grad_finish)(eng_exec *x, int slot, int shard, eng_err *e);
  int (*embed_bwd)(eng_exec *x, const void *dy, const int32_t *ids, eng_err *e);
  int (*end)(eng_exec *x, eng_exec_result *res, int backward, eng_err *e);
  void (*abort)(eng_exec *x);
};

// Buffer sizes of each backend for config c under policy p (micro-batches
// of p->batch / p->micro_batches sequences); ENG_ENOTSUP for a config the
// backend's kernels cannot run. Both exist in every build, so that an arena
// for a GPU is sized where there is none (the planner).
int eng_exec_cpu_sizes(const eng_config *c, const eng_exec_policy *p, exec_sizes *z, eng_err *e);
int eng_exec_cuda_sizes(const eng_config *c, const eng_exec_policy *p, exec_sizes *z, eng_err *e);

extern const exec_ops eng_exec_cpu_ops;
#ifdef TRAIND_HAVE_CUDA
extern const exec_ops eng_exec_cuda_ops;
#endif

#endif
