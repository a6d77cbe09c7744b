// Device profiles (DESIGN §3): what the planner's cost model knows about a
// machine — compute rates, link and NVMe bandwidths, the host optimizer's
// rate, the data types that cross the links, and the memory budgets of the
// three tiers. A profile is a JSON object; the shipped ones
// (engine/plan/profiles/*.json) come from public specifications and cite
// them, a calibrated one is measured on the running machine
// (eng_profile_calibrate_cpu), and any of them can be overridden field by
// field from another file (eng_profile_merge_file).
#ifndef ENG_PLAN_PROFILE_H
#define ENG_PLAN_PROFILE_H

#include "common/err.h"
#include "model/config.h"

typedef struct eng_profile {
  char name[96];
  char backend[16];        // "cuda" or "cpu"

  // Compute. Times come from FLOPs / rate; a GEMM of r rows runs at
  // rate * r / (r + gemm_half_rows), so small micro-batches cost more.
  double gemm_flops;       // dense GEMM FLOP/s on large shapes (forward)
  double gemm_bwd_flops;   // backward GEMMs (0: gemm_flops)
  double gemm_half_rows;   // rows at which a GEMM reaches half its rate (0: none)
  double attn_flops;       // causal attention forward FLOP/s
  double attn_bwd_flops;   // attention backward (0: attn_flops)
  double elem_bytes_per_s; // norms, RoPE, SwiGLU, residual adds: bytes moved per second

  // Links, bytes per second.
  double h2d, d2h;                // host -> device, device -> host (pinned)
  double nvme_read, nvme_write;   // the spill store

  // Host optimizer pass (dequantise, clip, AdamW, requantise, working copy).
  double opt_params_per_s;
  int opt_inline;          // 1: it runs on the compute thread (cpu backend), not beside it

  // Bytes per element of what the device holds and the links carry.
  int act_bytes;           // activations (boundaries, inner activations, workspace)
  int weight_bytes;        // streamed weights
  int grad_bytes;          // gradients copied out
  // Host state per parameter beyond the fp32 master.
  int grad_store_bytes;    // host gradient store (2: bf16; the embedding's stays fp32)
  int pinned_copy;         // 1: a pinned working copy of the weights in weight_bytes
  int opt_8bit;            // 1: block-wise 8-bit moments (optim/adamw8.h); 0: fp32

  // The training method: the job's, not the machine's (optional in a file,
  // 0 when absent; planning for a spec sets them, eng_spec_profile_method).
  // poet_block > 0: POET-X (poet/poet.h) with rotation blocks of that size,
  // each chain's inner product kept for the backward (poet_fast) or
  // recomputed, the rotations merged every poet_merge_every steps (0: never
  // counted). 0: every weight trains with the optimizer above.
  // poet_base_bf16: its frozen W0 held in bf16 on the host.
  int poet_block, poet_fast, poet_merge_every, poet_base_bf16;
  // POET-X's block rotations, [rows, b]·[b, b] products with the
  // permutation's gather before each: FLOP/s (0: gemm_flops' rate).
  double poet_flops;

  // Data parallelism (engine/dist, DESIGN §10): the job's ranks (optional,
  // 0 or 1: one process), each planned for its share of the batch (the
  // caller passes batch / ranks), holding the optimizer state of its part of
  // every tensor, updating that part only, and summing the gradients and
  // gathering the updated weights over comm_bps: the bytes per second a
  // rank's all-reduce moves, counted as 2 (W - 1) / W of the buffer (what
  // each rank sends and receives; needed when ranks > 1), and comm_latency,
  // the seconds each collective call takes beside its bytes (optional);
  // eng_coll_rate measures both.
  int ranks;
  double comm_bps, comm_latency;

  // Memory budgets, bytes.
  double device_bytes;     // device memory
  double device_reserve;   // of it, what the runtime keeps (context, libraries)
  double host_bytes;       // host memory the daemon may use
  double host_reserve;     // of it, kept for everything but the training state
  double nvme_bytes;       // spill space
  double device_act_bytes; // optional cap on device activation bytes (0: none)
  double host_act_bytes;   // optional cap on the host activation tier (0: none)
} eng_profile;

// Reads a profile file. Every field except the optional caps and the
// method's is required;
// unknown keys are refused (a typo must not silently keep a default), except
// "sources" and "note", which hold the citations.
int eng_profile_load(const char *path, eng_profile *p, eng_err *e);

// Overrides the fields present in `path` (any subset, same names) in p.
int eng_profile_merge_file(eng_profile *p, const char *path, eng_err *e);

// Writes p as JSON (atomically); `note` (may be NULL) is stored as "note".
int eng_profile_save(const eng_profile *p, const char *path, const char *note, eng_err *e);

// Checks that rates and bandwidths are positive, sizes sensible.
int eng_profile_validate(const eng_profile *p, const char *what, eng_err *e);

// Measures the profile of this machine for the cpu backend at the job's
// shapes (micro-batch of mb sequences of T tokens of model c): GEMM and
// attention rates with the engine's cpu kernels, elementwise rate, memcpy
// bandwidth (the cpu backend's copies), the fp32 AdamW pass and, where p
// comes with a POET-X method (poet_block), its rotations' rate. Takes at most
// about max_seconds (<= 30 is the contract). Memory budgets: device_bytes =
// device_cap, host_bytes = physical memory; the NVMe fields are left as p
// had them (set them with eng_profile_set_nvme from storage's measurement),
// and so do the method's and the ranks' (ranks, comm_bps); every other
// field is zero.
int eng_profile_calibrate_cpu(const eng_config *c, int mb, int T, double device_cap,
                              double max_seconds, eng_profile *p, eng_err *e);
// The max_seconds that the daemon and traind-train give a calibration.
#define ENG_CALIBRATE_SECONDS 10.0

// Sets the spill store's measured bandwidths and free space.
void eng_profile_set_nvme(eng_profile *p, double read_bytes_per_s, double write_bytes_per_s,
                          double free_bytes);

#endif
