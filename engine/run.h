// The engine's run (engine.h's eng_run), shared by the files that implement
// its API: engine.c (open, step, save, load, export) and select.c (data
// selection). Not part of the API.
#ifndef ENG_RUN_H
#define ENG_RUN_H

#include "compute/flops.h"
#include "compute/select.h"
#include "data/data.h"
#include "engine.h"
#include "exec/exec.h"
#include "model/model.h"
#include "tok/chat.h"
#include "tok/tok.h"

struct eng_run {
  eng_spec spec;          // strings below are owned copies
  char *model_dir, *train_path, *eval_path, *data_cache;
  eng_model model;
  eng_dev *dev;
  eng_exec *exec;
  eng_data *train, *eval;
  struct eng_tok *tok;    // tokenizer_dir's (model_dir's) tokenizer.json, or NULL
  char no_tok[512];       // when NULL and there was one: why it could not be read
  eng_chat chat;          // and its tokenizer_config.json
  int32_t eos;            // its eos_token's id, -1: none
  int32_t *ids, *labels, *pos; // one batch (pos: its positions, for packed data)
  int64_t step;           // steps taken (updates + skipped)
  int64_t updates;        // updates applied (AdamW's t)
  int nonfinite_streak;
  float lag_scale;        // clip_lagged: the factor the next step uses (NAN before the first)
  double last_eval;
  uint64_t last_in, last_out;
  char plan_method[32];   // the plan it runs, for a timeline's title ("" : the uniform policy)
  uint64_t plan_fixed;    // its fixed device bytes (a timeline's activation peak is the rest)
  eng_govern gov;         // the compute spent, the budgets and stopping rules (compute/govern.h)
  eng_step_flops flops;   // one step's (compute/flops.h)
  double peak;            // FLOP/s MFU is against (0: none)
  double wall_mark;       // when the last step (or the open, or a load) ended
  int64_t merges_seen;    // POET-X merges whose FLOPs the tally has
  // Data selection (compute/select.h; select.c): the per-sample state, the
  // candidate pool's buffers, the reference model's run, and what the
  // current step's scoring spent (eng_step_batch adds it to the step's).
  eng_select_state sel;
  int32_t *pool_ids, *pool_labels, *pool_pos;
  uint64_t *pool_samples;
  double *pool_loss;
  int *pool_pick;
  int pool_cap;           // batches the buffers hold
  eng_run *ref;
  double score_model, score_exec;
};

// Opens path as r's data files are opened: tokenized and rendered by r's
// tokenizer, packed unless the spec says otherwise; shuffled or not.
int eng_run_data_open(eng_run *r, const char *path, int shuffle, eng_data **d, eng_err *e);

// The positions a batch of d is run with: pos where d is packed, else NULL
// (0..T-1 in every row, the executor's fast path).
static inline const int32_t *eng_run_pos(const eng_data *d, const int32_t *pos) {
  return eng_data_packed(d) ? pos : NULL;
}

// Data selection (select.c): set up from the spec at open (the offline band
// restricts r->train; online selection allocates its state and opens the
// reference model), released at close.
int eng_run_select_open(eng_run *r, eng_err *e);
void eng_run_select_close(eng_run *r);
// The reducible rule's reference model's spec: its model directory, run at
// the spec's batch shape and cap, scoring only (open and host bytes).
void eng_run_select_ref_spec(const eng_spec *s, eng_spec *ref);
// The next batch into r->ids, r->labels: drawn and scored by the rule,
// its scoring's FLOPs in r->score_model and r->score_exec.
int eng_run_select_batch(eng_run *r, eng_err *e);
// The per-sample state as a checkpoint shard "select" (when selecting).
int eng_run_select_save(const eng_run *r, const eng_store *st, eng_err *e);
int eng_run_select_load(eng_run *r, const eng_store *st, int64_t step, eng_err *e);

// Data parallelism (dist_run.c): what a spec with coll cannot do yet,
// refused by name; the world size and this rank (1 and 0 without coll); and a run of the
// executor on this rank's share of a global batch, its loss (and after a
// backward its gradients and their norm) summed over the ranks. Without
// coll, eng_exec_run on the whole batch.
int eng_run_dist_check(const eng_spec *s, eng_err *e);
int eng_run_dist_world(const eng_spec *s);
int eng_run_dist_rank(const eng_spec *s);
int eng_run_dist_run(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, int backward,
                     eng_exec_result *res, eng_err *e);
// After an update: every rank's updated part of each tensor to every rank
// (the time it took added to *t_comm). Nothing without coll.
int eng_run_dist_weights_gather(eng_run *r, double *t_comm, eng_err *e);
// Shard s's fp32 weights whole into dst (its layout's numel values): a
// master in parts (model.h w_part) gathered from every rank's part (every
// rank calls it), else as the model holds them.
int eng_run_dist_shard_get(eng_run *r, int s, float *dst, eng_err *e);
// A save: the store the run writes to (rank 0: st; the others take part in
// the gathers and write nothing), and tensor i of shard sh's optimizer state
// as a whole tensor's (gathered from the ranks' parts). A load: the whole
// tensor's state read, this rank's part kept. Without coll, the state as it
// is held.
const eng_store *eng_run_dist_store(const eng_run *r, const eng_store *st);
// The optimizer state's bytes over whole tensors (what a checkpoint holds),
// however it is split over the ranks.
size_t eng_run_dist_opt_bytes(const eng_run *r);
int eng_run_dist_state_save(eng_run *r, const eng_store *st, const eng_shard *sh, int i, const char *name,
                            eng_err *e);
int eng_run_dist_state_load(eng_run *r, const eng_store *st, int64_t step, eng_shard *sh, int i, const char *name,
                            eng_err *e);

#endif
