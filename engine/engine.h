// libtraind_engine's public API: what a test, a benchmark and the daemon
// drive. Open a run from a spec, step it, read metrics, save and load the
// complete training state through an eng_store, close. Every call returns 0
// or a negative ENG_E* code with a sentence in the eng_err; nothing prints.
//
// Threads: one run is driven from one thread at a time. The engine starts
// its own stream threads (copy-in, copy-out, optimizer) and OpenMP threads.
#ifndef ENG_ENGINE_H
#define ENG_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fs_open.h"
#include "compute/govern.h"
#include "compute/select.h"
#include "data/data.h"
#include "model/config.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "store.h"

// ADAMW8 (the default): block-wise 8-bit moments (optim/adamw8.h) for every
// tensor of at least opt_min_quant elements, fp32 moments below it. ADAMW:
// fp32 moments everywhere, the same arithmetic as torch.optim.AdamW.
typedef enum { ENG_OPT_ADAMW = 0, ENG_OPT_ADAMW8 = 1 } eng_optimizer;

// How the decoder layers' seven projections train. FULL: every weight with
// `optimizer`. POETX (poet/poet.h): each projection as P_out·R_out·W0·R_in·P_in
// with W0 (and its bias) frozen and the rotations' θ trained by Adam (eps
// 1e-6, no weight decay) at poet_lr on the lr's schedule, merged into W0
// every poet_merge_every updates; the clipping threshold ramps from 0.1× to
// 1× over the 10 updates after each merge. Norms, the embedding and the head
// train with `optimizer` as before. The cpu backend only, so far.
typedef enum { ENG_METHOD_FULL = 0, ENG_METHOD_POETX = 1 } eng_method;

// What the host gradient store holds between the backward and the update.
// The embedding's gradient is always fp32: the host scatter accumulates into it.
typedef enum { ENG_GRAD_BF16 = 0, ENG_GRAD_F32 = 1 } eng_grad_dtype;

// Where the boundary checkpoints of the forward live, as the executor names
// it (a plan, plan/plan.h, says the same with a materialised flag and an
// eng_tier: DEVICE, HOST, NVME). STORE: the spill store's act entries, i.e.
// NVMe through storage/. NONE: not kept at all; the backward recomputes it.
typedef enum { ENG_PLACE_DEVICE = 0, ENG_PLACE_HOST = 1, ENG_PLACE_STORE = 2, ENG_PLACE_NONE = 3 } eng_place;

typedef struct eng_metrics {
  int64_t step;          // steps completed (the one just taken is step - 1, 0-based)
  double loss;           // mean cross-entropy over the step's counted tokens
  double eval_loss;      // last held-out loss, NAN when none evaluated yet
  double grad_norm;      // global gradient norm before clipping
  double lr;             // learning rate used by the step
  int skipped;           // 1 when non-finite gradients made the step skip its update
  int64_t tokens;        // tokens in the step (batch * seq)
  double tokens_per_s;   // tokens / wall time of the step
  double t_fwd, t_loss, t_bwd, t_opt_wait, t_total; // seconds per phase
  double t_act_wait;     // of the step, compute waiting for activation transfers at
                         // the end of their windows (the transfer time not hidden)
  double t_comm;         // of the step, summing over the ranks (data parallel; not
                         // overlapped with compute: the step waits for all of it)
  size_t peak_arena;     // most device-arena bytes in use so far
  size_t host_act;       // boundary bytes the step kept in host memory
  size_t store_act;      // boundary bytes the step spilled to the store
  size_t arena_cap;      // the cap
  uint64_t bytes_in;     // host -> device bytes in this step
  uint64_t bytes_out;    // device -> host bytes in this step
  // POET-X: merges applied so far (every layer's; a step's update and its
  // merge apply as the next step needs them) and the largest |RᵀR − I|_F of
  // the rotations the last of them folded into the weights.
  int64_t poet_merges;
  double poet_orth_err;
  // Compute (compute/flops.h, compute/govern.h): the step's counted tokens,
  // model and executed FLOPs and MFU (model FLOPs / (t_total · peak); NAN
  // without a peak), then what the run has spent so far, summed over its
  // resumes, the marginal gain of the last fit (NAN before there is one),
  // and the budget or rule that stops the run after this step (NONE: it goes on).
  int64_t counted;
  double flops_model, flops_exec, mfu, peak_flops;
  double flops_score;     // model FLOPs of the step's scoring passes (data selection), which
                          // the tally and the budgets count, MFU does not
  eng_tally total;
  int evaluated;          // this step ran an evaluation (eval_loss is its result)
  double gain, fit_a, fit_b;
  eng_stop stop;
} eng_metrics;

// Called after each step (and after each evaluation); return nonzero to cancel.
typedef int (*eng_progress_fn)(void *ctx, const eng_metrics *m);

// Called with one sentence about the input that the caller should pass on
// (a log line): something the engine does differently from what a file
// says, where transformers does the same, and that is no error.
typedef void (*eng_note_fn)(void *ctx, const char *line);

typedef struct eng_spec {
  // Model: a Hugging Face directory (config.json + safetensors), read as
  // eng_hf_load_config does (model/hf_io.h), or random init from `config`
  // (all fields set) when model_dir is NULL.
  const char *model_dir;
  eng_config config;
  // Where model_dir, train_path and eval_path may be read from
  // (common/fs_open.h): the daemon's data roots; NULL opens any path. It must
  // outlive the run (eng_export_hf reads the model directory again).
  const eng_fs *fs;
  uint64_t seed;          // init, data order

  // Data (engine/data, data/data.h): .bin shards, .jsonl records
  // (input_ids, text, or chat), or text. Text and chat are tokenized with the
  // tokenizer.json of tokenizer_dir (default: model_dir; none there: text is
  // read byte by byte and chat refused) and rendered with its
  // tokenizer_config.json's chat template; each text document ends with that
  // file's eos_token.
  const char *train_path; // may be NULL when only eng_step_batch is used
  const char *eval_path;  // optional held-out file
  eng_data_format data_format; // AUTO (the default): by extension and content
  const char *tokenizer_dir;
  const char *chat_template; // NULL: recognise the template; "chatml" or "llama3": force one
  int no_pack;            // records one per sample, padded (default: packed several to a sample,
                          // each attending only within itself)
  const char *data_cache; // directory of tokenize-once caches (data/data.h); NULL: tokenize at every open
  int eval_every;         // steps between evaluations (0 = never)
  int eval_batches;       // batches per evaluation (default 4)
  int seq_len;            // T
  int batch;              // sequences per step (the global batch)
  int micro_batches;      // batch is split into this many (must divide batch; with a plan, its n_micro)

  eng_method method;
  int poet_block;         // POETX: block size b of the rotations; must divide every projection's
                          // rows and columns (default 256)
  int poet_merge_every;   // POETX: updates between merges (default 200)
  float poet_lr;          // POETX: the θ's learning rate (default 5e-4)
  int poet_memory;        // POETX: recompute each chain's inner product in the backward instead
                          // of keeping it with the layer's activations (less memory, one more
                          // product per weight; the same bits)
  int poet_base_bf16;     // POETX: hold the frozen W0 (and biases) in bf16 as the published
                          // method does, not in the fp32 master: 2 bytes per parameter less;
                          // loaded weights and each merge's new W0 are rounded to nearest
                          // even (cpu backend)

  // Optimizer and schedule: linear warmup to lr, cosine decay to min_lr at total_steps.
  eng_optimizer optimizer;
  size_t opt_min_quant;   // ADAMW8: tensors below this many elements keep fp32 moments (0: 4096)
  int opt_fp32_embed_head; // ADAMW8: keep fp32 moments for the embedding and lm_head too
  eng_grad_dtype grad_dtype;
  int clip_lagged;        // clip with the previous step's factor (the first step uses its own),
                          // so a shard may update as soon as its gradients land instead of
                          // after the whole backward. A change of semantics: the clip
                          // factor lags the gradients by one step.
  float lr, min_lr, beta1, beta2, eps, weight_decay; // decay applies to matrices only
  float clip;             // global-norm clip (0 = off)
  int warmup_steps, total_steps;

  // The device: -1 (the default) for the cpu backend, else the index of the
  // CUDA device to train on (eng_gpu_count). A GPU streams bf16 working
  // copies of the weights, keeps bf16 activations and runs the updates on the
  // optimizer thread; it needs a build with CUDA (ENG_EDEVICE otherwise).
  int device_gpu;
  // The cpu backend: compute from a bf16 working copy of the weights, as a
  // GPU does (the fp32 master stays for the updates, which write the working
  // copy; 2 bytes per parameter more, and half the bytes streamed). Under
  // data parallelism each rank then holds the fp32 master of its part of
  // every tensor only, the working copy whole. Not with POET-X or a plan.
  int work_bf16;

  // Streaming policy (DESIGN §2, §3): a plan, or the uniform policy.
  size_t device_cap;      // bytes of device arena allowed; on a GPU, 0 allows all
                          // the memory it has free (less a margin for its libraries)
  // A plan (plan/plan.h: made by the planner, or loaded with eng_plan_load):
  // per boundary kept or recomputed and in which tier, per layer whether it
  // keeps its inner activations, the micro-batch split, and the transfers
  // that the executor performs window by window. It must be made for this
  // model's n_layers, batch and seq_len, and micro_batches must be its
  // n_micro: eng_open refuses it otherwise, naming the field. Read by
  // eng_open, eng_spec_device_bytes and eng_spec_host_bytes only (the run
  // keeps no pointer to it). NULL: the uniform policy below.
  const eng_plan *plan;
  // The uniform policy: a boundary checkpoint every ckpt_every layers (0: only
  // the first), all in ckpt_place, and keep_acts for every layer.
  int ckpt_every;
  eng_place ckpt_place;
  const eng_store *spill;   // where ENG_PLACE_STORE (a plan's ENG_TIER_NVME) puts boundaries (must have act_*)
  int keep_acts;          // keep every layer's inner activations on the device
  // Bandwidth caps of the cpu backend's links, bytes per second (0: none):
  // copies to and from the arena (each direction; PCIe on a GPU) and the
  // store lanes (each of write and read; the spill store's NVMe), so that a
  // run here has links whose time is real (common/link.h).
  double link_bps, spill_bps;
  int opt_thread;         // run updates on the optimizer thread beside compute, as with a
                          // GPU (the cpu backend otherwise runs them inline, where the
                          // next forward first needs each shard, since compute owns the cores)
                          // (no recompute in the backward; needs ckpt_every 1 on the device)

  // Compute governance (compute/govern.h): budgets and stopping rules, all
  // off by default. The rules need eval_path and eval_every.
  eng_budget budget;
  // Data selection (compute/select.h): online batch selection by a rule, or
  // an offline percentile band of a scores file; off by default. Paths are
  // read under fs.
  eng_select select;
  double peak_flops;      // the device's FLOP/s that MFU is against; 0: on the cpu backend
                          // measured (compute/peak.h), on a GPU none (MFU is NAN)

  eng_progress_fn progress; // optional
  void *progress_ctx;
  eng_note_fn note;         // optional; called from eng_open
  void *note_ctx;
  volatile int *cancel;     // optional; polled once per layer
  // A data-parallel run (dist/coll.h, dist_run.c): this process is rank
  // coll->rank of coll->world, each computing its share of every global
  // batch (batch and micro_batches are the global ones and divide by the
  // world), the gradients summed over the ranks before each update. NULL: one
  // process. It must outlive the run.
  struct eng_coll *coll;
} eng_spec;

typedef struct eng_run eng_run;

// Fills a spec with defaults: the cpu backend, 8-bit AdamW with a bf16
// gradient store, lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1,
// clip 1.0 (not lagged), ckpt_every 1 on the device, 1 micro-batch, cap 1 GiB.
void eng_spec_defaults(eng_spec *s);

// Device-arena bytes the spec needs (model config read from model_dir when
// set), without allocating anything or touching a GPU.
int eng_spec_device_bytes(const eng_spec *spec, size_t *bytes, eng_err *e);
// The spec's training method (method, poet_block, poet_memory,
// poet_merge_every, poet_base_bf16) into the profile a plan for it is made on
// (plan/profile.h), so the planner costs the layers the run computes.
void eng_spec_profile_method(const eng_spec *s, eng_profile *p);

// Host-memory bytes a run of the spec holds, likewise without allocating:
// the model state (fp32 master, gradient store, optimizer moments, a GPU's
// bf16 working copy), the boundary checkpoints its policy keeps in host
// memory, the batch buffers and, on the cpu backend, the device arena (host
// memory there); with online data selection its pool and the reducible
// rule's reference model (a second run). Not counted: the training data
// (text and JSON-lines files are read whole, .bin shards mapped) and the
// threads' stacks.
int eng_spec_host_bytes(const eng_spec *spec, size_t *bytes, eng_err *e);

// Validates the spec, loads or initialises the model, plans the arena
// (refusing a cap that cannot hold two layer slots and one micro-batch,
// before anything is allocated) and starts the stream threads.
int eng_open(const eng_spec *spec, eng_run **out, eng_err *e);

// One optimizer step on the next batch of the training data.
int eng_step(eng_run *r, eng_metrics *m, eng_err *e);
// One optimizer step on a given batch: ids and labels are [batch][seq_len],
// labels aligned with ids as in transformers (-100 = not counted); pos, the
// position ids of packed rows as eng_exec_run takes them, or NULL.
int eng_step_batch(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, eng_metrics *m,
                   eng_err *e);
// Mean loss over eval_batches batches of the held-out data (no update).
int eng_eval(eng_run *r, double *loss, eng_err *e);

// Scores every sample of the data file `data_path` (under the spec's fs, in
// file order, the run's seq_len) with the run's model: its mean loss over
// its counted tokens into *loss (malloc'ed, *n of them). The cpu backend.
// *flops (may be NULL) gets the model FLOPs spent.
int eng_score_samples(eng_run *r, const char *data_path, float **loss, uint64_t *n, double *flops, eng_err *e);
// The same written as a scores file (compute/select.h) to out_path.
int eng_score_data(eng_run *r, const char *data_path, const char *out_path, double *flops, eng_err *e);

// Saves / restores the complete training state (weights, optimizer moments,
// step, data position) as a checkpoint at the current step. Data parallel
// (spec.coll): every rank calls both (the optimizer state is in parts, and
// each rank holds one); rank 0 writes the checkpoint, which holds whole
// tensors, so any world size loads it.
int eng_save(eng_run *r, const eng_store *st, eng_err *e);
// Loads the newest checkpoint of st (returns 1 when there is none).
int eng_load(eng_run *r, const eng_store *st, eng_err *e);
// Writes the model as a Hugging Face directory (fp32, or bf16 when bf16 != 0).
// A run opened from a model_dir keeps that directory's token ids and copies
// its tokenizer and generation files (eng_hf_save's src_dir). Data parallel:
// every rank calls it (a master in parts is gathered); rank 0 writes.
int eng_export_hf(eng_run *r, const char *dir, int bf16, eng_err *e);
// The same from a checkpoint of st (step < 0: the newest) without opening a
// run: config c must be the checkpoint's model; safetensors files of at most
// max_shard_bytes (0: one file); src_dir (may be NULL) is the model
// directory the weights came from, read under src_fs (common/fs_open.h;
// NULL: anywhere). Holds the fp32 weights, not the optimizer state.
int eng_ckpt_export_hf(const eng_store *st, int64_t step, const eng_config *c, const char *dir, int bf16,
                       size_t max_shard_bytes, const eng_fs *src_fs, const char *src_dir, eng_err *e);

// ---- the cpu's matrix products ------------------------------------------------
// The route of the cpu backend's products (kernels/cpu/gemm.h): "amx",
// "avx512", "avx2" or "blas", chosen once per process from the cpu's features
// (CPUID), or forced by the environment's TRAIND_CPU_GEMM. Fails with
// ENG_EINVAL when TRAIND_CPU_GEMM names no route or one this cpu cannot run
// (eng_open fails the same way). *name is static; *blas_core (may be NULL)
// gets OpenBLAS's core type on the blas route, "" on the others.
int eng_cpu_gemm_route(const char **name, const char **blas_core, eng_err *e);

// ---- GPUs -------------------------------------------------------------------
// The CUDA devices spec.device_gpu may name: their count, or a negative
// ENG_EDEVICE with the reason (this build has no CUDA backend, no driver, no
// device) in e. Neither function takes GPU memory.
int eng_gpu_count(eng_err *e);
typedef struct eng_gpu_info {
  char name[96];         // as the driver names it, e.g. "NVIDIA H200"
  size_t memory_bytes;   // the board's memory
} eng_gpu_info;
int eng_gpu_describe(int index, eng_gpu_info *info, eng_err *e);

int64_t eng_steps_done(const eng_run *r);
// The run's compute governance: its tally, evaluations, fit and the reason
// it stopped (ENG_STOP_NONE while a step may still be taken); valid until the
// next step.
const eng_govern *eng_run_govern(const eng_run *r);
// The last step's timeline (exec/exec.h's eng_exec_timeline): its spans,
// seconds from the step's start; valid until the next step.
int eng_timeline(const eng_run *r, const eng_plan_span **spans);
// The same as an SVG (plan/sim.h's eng_plan_svg: the style of a plan's
// predicted timeline), m being that step's metrics; titled with the plan
// the run was opened with, if any.
int eng_timeline_svg(const eng_run *r, const eng_metrics *m, char **svg, eng_err *e);
const eng_config *eng_run_config(const eng_run *r);
size_t eng_param_count(const eng_run *r);
// Bytes allocated for optimizer state (all tensors' moments and block scales).
size_t eng_opt_state_bytes(const eng_run *r);
// Bytes allocated for the fp32 master weights (under data parallelism with a
// working copy, this rank's parts), and for the bf16 working copy.
size_t eng_master_bytes(const eng_run *r);
size_t eng_work_bytes(const eng_run *r);
// Bytes the run holds because weights train: optimizer state, the gradient
// store and, under POET-X, its state (θ, their moments and gradients, the
// permutations). The fp32 master weights and a GPU's working copy are not
// counted.
size_t eng_train_state_bytes(const eng_run *r);
void eng_close(eng_run *r);

// ---- inspection, for parity tests and debugging -----------------------------
// Forward and backward on one batch without an update: the loss, optionally
// the logits [batch, seq_len, vocab], and gradients left in the gradient store;
// pos as eng_step_batch's.
int eng_debug_grads(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, double *loss,
                    float *logits, eng_err *e);
// Copies a parameter (which = 'w') or its gradient ('g') by Hugging Face name.
// Under POET-X also "<projection>.theta_in" and ".theta_out" (θ and its
// gradient, [blocks][b(b-1)/2]), and "<projection>.weight" is W0.
int eng_debug_param(eng_run *r, const char *name, char which, float *dst, size_t numel, eng_err *e);
// POET-X: replaces "<projection>.theta_in" / ".theta_out" (floats) or
// ".pin" / ".pout" (int32 permutations, checked to be ones) of a run, e.g.
// with a reference's.
int eng_debug_poet_set(eng_run *r, const char *name, const void *src, size_t numel, eng_err *e);
// The device arena's memory: on the cpu backend a region of this process
// (which a measurement of host memory can leave out: a GPU holds it there).
void eng_debug_arena(const eng_run *r, const void **base, size_t *bytes);

#endif
