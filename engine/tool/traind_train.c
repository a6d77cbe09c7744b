// traind-train: the engine without the daemon. Trains a model from flags,
// printing one line per step; used by `make demo`, the benchmarks and the GPU
// machine (which has no daemon libraries). It runs a plan (DESIGN §3) from a
// file in any build, and makes one (--plan auto) where the planner is built.
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dist/coll.h"
#include "dist/dist.h"
#include "engine.h"
#include "model/hf_io.h"
#include "model/layout.h"
#include "plan/profile.h"
#include "plan/sim.h"
#ifdef TRAIND_HAVE_PLANNER
#include "plan/cost.h"
#include "plan/planner.h"
#endif

static void usage(FILE *f) {
  char archs[256];
  eng_arch_list(archs, sizeof archs, 0, " | ");
  fprintf(f,
          "usage: traind-train [options]\n"
          "Trains a model of the architecture table (--archs) on the cpu backend, layer by layer.\n"
          "\n"
          "model (a Hugging Face directory, or random init from a preset and overrides):\n"
          "  --model-dir DIR     config.json + model.safetensors to start from\n"
          "  --preset NAME       tiny (~0.2M), demo (~10M Qwen3), bench5m, bench40m, 1b\n"
          "  --arch A            %s\n"
          "  --archs             print the table of architectures (markdown) and exit\n"
          "  --vocab N --d N --layers N --heads N --kv-heads N --head-dim N --ffn N\n"
          "  --tie               tie the embedding and the head\n"
          "data:\n"
          "  --data PATH         .bin shard, .jsonl records (input_ids, text, or chat:\n"
          "                      messages / prompt+completion), or plain text; text and chat\n"
          "                      are tokenized with --model-dir's tokenizer.json (without one,\n"
          "                      text is read byte by byte)\n"
          "  --format F          auto (default: by extension and content), bin, input_ids,\n"
          "                      text, chat\n"
          "  --tokenizer DIR     tokenizer.json and tokenizer_config.json from DIR, not --model-dir\n"
          "  --chat-template T   chatml or llama3: render chat with this template (default: the\n"
          "                      one tokenizer_config.json holds, if it is one of these)\n"
          "  --no-pack           one record per sequence, padded (default: records packed several\n"
          "                      to a sequence, each attending only within itself)\n"
          "  --data-cache DIR    keep tokenized data in DIR and reuse it while file and tokenizer\n"
          "                      are unchanged\n"
          "  --eval PATH         held-out file; --eval-every N steps (default 0 = never),\n"
          "                      --eval-batches N batches each time (default 4)\n"
          "  --seq N             sequence length (default 256)\n"
          "  --batch N           sequences per step (default 8)\n"
          "  --micro N           micro-batches per step (default 1)\n"
          "training:\n"
          "  --steps N           optimizer steps (default 100)\n"
          "  --lr X --min-lr X --warmup N --wd X --clip X --seed N\n"
          "  --optim NAME        adamw8 (default: 8-bit block-wise moments) or adamw (fp32)\n"
          "  --grad-fp32         keep the host gradient store in fp32 (default bf16)\n"
          "  --work-bf16         compute from a bf16 working copy of the weights, as a GPU\n"
          "                      does (cpu backend; the fp32 master stays for the updates):\n"
          "                      under data parallel each rank then keeps the fp32 master\n"
          "                      of its part only\n"
          "  --clip-lagged       clip with the previous step's factor (updates may start\n"
          "                      during the backward; changes the semantics of clipping)\n"
          "  --opt-thread        run updates on their own thread beside compute\n"
          "  --method NAME       full (default: every weight trains with --optim) or poetx:\n"
          "                      each decoder projection trains as P.R.W0.R.P, W0 frozen,\n"
          "                      the rotations' block parameters by Adam; the singular\n"
          "                      values of every projection stay as they were (POET-X)\n"
          "  --poet-block N      poetx: rotation block size (default 256); must divide every\n"
          "                      projection's rows and columns\n"
          "  --poet-merge N      poetx: merge the rotations into W0 every N steps (default 200)\n"
          "  --poet-lr X         poetx: learning rate of the rotations (default 5e-4, on the\n"
          "                      --lr schedule)\n"
          "  --poet-memory       poetx: recompute each chain's inner product in the backward\n"
          "                      (less memory; default: keep it with the activations)\n"
          "  --poet-base T       poetx: fp32 (default) or bf16: hold the frozen W0 in bf16,\n"
          "                      as the published method does (2 bytes per parameter less;\n"
          "                      loaded weights and each merge's new W0 are rounded)\n"
          "streaming:\n"
          "  --gpu N             train on CUDA device N (default: the cpu backend)\n"
          "  --cap MIB           device arena cap in MiB (default 1024; on a GPU, 0\n"
          "                      is all the memory it has free)\n"
          "  --ckpt-every K      boundary checkpoint every K layers (0: only the first)\n"
          "  --ckpt-host         keep boundary checkpoints in host memory\n"
          "  --keep-acts         keep every layer's activations on the device (no recompute)\n"
          "  --plan auto|FILE    a plan instead of the three above: per boundary kept or\n"
          "                      recomputed, on the device or in host memory, which layers\n"
          "                      keep their activations, the micro-batch split. It is\n"
          "                      printed before training.\n"
          "                      auto: made by the planner for this machine: the cpu\n"
          "                      backend calibrated at the job's shapes, --cap its\n"
          "                      device bytes, the split its choice unless --micro is\n"
          "                      given (a build without the planner, GLPK, refuses it).\n"
          "                      FILE: a plan saved as JSON (traind-plan --format json\n"
          "                      --out FILE); --batch, --seq and --micro default to its\n"
          "                      own and must match it. traind-train has no spill store:\n"
          "                      a plan with boundaries on NVMe is refused.\n"
          "  --calibrate S       seconds --plan auto measures this machine for (default 10)\n"
          "  --timeline FILE     draw the last step as an SVG timeline: compute, copies in\n"
          "                      and out, store, optimizer, as measured; with --plan auto\n"
          "                      the planner's predicted step below it, in the same style\n"
          "compute (the first budget reached stops the run within a step, saved as usual):\n"
          "  --max-tokens N      tokens to train on at most\n"
          "  --max-flops F       model FLOPs at most (6N per token plus attention, PaLM's\n"
          "                      convention), e.g. 3e15\n"
          "  --max-wall S        seconds of training at most\n"
          "  --gain-tau X        stop once a fit of eval loss against ln(FLOPs) over the last\n"
          "                      --gain-window evaluations (default 4) predicts less than X\n"
          "                      loss per further FLOP, --gain-patience times in a row\n"
          "                      (default 3); needs --eval and --eval-every\n"
          "  --gl-alpha A        stop when eval loss is more than A%% above its best\n"
          "                      (Prechelt's generalisation loss)\n"
          "  --peak-flops F      the device's FLOP/s for MFU (default: measured on the cpu\n"
          "                      backend; a GPU needs it)\n"
          "data selection (the cpu backend; the scoring passes count against the budgets):\n"
          "  --select RULE       each step, score a pool of candidates by a forward pass and\n"
          "                      train on the best batch of them: loss (highest loss),\n"
          "                      reducible (loss less --select-reference's, RHO-LOSS) or\n"
          "                      dynamics (unseen first, then the largest fall in loss\n"
          "                      since last scored); default none\n"
          "  --select-pool K     candidates per step, in batches (default 4)\n"
          "  --select-adaptive   K from the budget: data tokens / tokens the remaining\n"
          "                      budget trains on, between 1 and --select-pool\n"
          "  --select-reference DIR  the reference model (Hugging Face directory)\n"
          "  --select-band FILE:LO:HI  train only on the samples whose score in FILE (from\n"
          "                      --score) lies between percentiles LO and HI\n"
          "  --score FILE        instead of training: score every sample of --data with the\n"
          "                      model and write the scores file FILE\n"
          "state:\n"
          "  --save-dir DIR      save the training state there at the end (and --save-every N)\n"
          "  --resume            resume from the newest checkpoint in --save-dir first\n"
          "  --export DIR        write the trained model as a Hugging Face directory\n"
          "  --quiet             print only the summary line\n"
          "\n"
          "environment:\n"
          "  OMP_NUM_THREADS     threads of the cpu kernels (default: every core)\n"
          "  TRAIND_CPU_GEMM     the route of the cpu products: amx (split-bf16 on the tile\n"
          "                      unit, fp32 accuracy), avx512 or avx2 (the engine's fp32\n"
          "                      kernels), blas (OpenBLAS); default: the first of these the\n"
          "                      cpu runs. avx512, avx2 and blas give the same bits, amx\n"
          "                      differs from them in the last bits; a route the cpu lacks\n"
          "                      is refused\n"
          "\n"
          "data parallel: run under mpirun -np N or srun (Open MPI's, MPICH's or Slurm's\n"
          "variables; MPI carries the sums). Each of the N ranks computes batch/N of every\n"
          "batch (--batch and --micro divide by N; the cpu backend), the gradients are summed\n"
          "over the ranks in rank order, and each rank holds the optimizer state of its part\n"
          "of every tensor (ZeRO-1), with --work-bf16 the fp32 master of it too. Rank 0\n"
          "alone prints, writes checkpoints and exports.\n"
          "With one micro-batch per rank and --grad-fp32 the losses are bit-identical to one\n"
          "process's. --plan auto plans one rank's share: every rank calibrates, the ranks\n"
          "measure their all-reduce, rank 0 plans and hands the plan to the others; a plan\n"
          "file must be made for the same number of ranks.\n"
          "\n"
          "Output: with --plan the plan's table, then 'step N loss X lr X tok/s X' per\n"
          "step, then a summary line.\n"
          "Exit codes: 0 success, 1 training, planning or I/O error, 2 bad usage (also\n"
          "--plan auto in a build without the planner).\n",
          archs);
}

// The presets' shapes: random-init models of the tests, the demo and the benches.
// A hybrid (full_every > 0) has Gated DeltaNet layers of dn_heads key and
// 2·dn_heads value heads of hd dims, conv 4, and rotates a quarter of hd.
static const struct {
  const char *name;
  eng_arch arch;
  int vocab, d, layers, heads, kv, hd, ff, max_pos, tie;
  float rms_eps;
  int full_every, dn_heads;
} presets[] = {
    {"tiny", ENG_ARCH_QWEN3, 256, 64, 2, 4, 2, 16, 176, 512, 1, 1e-6f, 0, 0}, // well under 1M parameters: the tests' model
    {"demo", ENG_ARCH_QWEN3, 256, 384, 6, 6, 2, 64, 1024, 4096, 1, 1e-6f, 0, 0}, // ~10M Qwen3-style
    {"bench5m", ENG_ARCH_QWEN3, 4096, 256, 4, 8, 4, 32, 688, 4096, 0, 1e-6f, 0, 0},
    {"bench40m", ENG_ARCH_QWEN3, 16384, 512, 8, 8, 4, 64, 1536, 4096, 0, 1e-6f, 0, 0},
    {"1b", ENG_ARCH_LLAMA, 32000, 2048, 22, 32, 4, 64, 5632, 4096, 0, 1e-5f, 0, 0}, // ~1.1B Llama-style (TinyLlama's shape)
    {"hybrid40m", ENG_ARCH_QWEN3_5, 16384, 512, 8, 8, 4, 64, 1536, 4096, 0, 1e-6f, 4, 4}, // Qwen3.5-style, ~40M
};

static int preset(const char *name, eng_config *c) {
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
    if (strcmp(name, presets[i].name)) continue;
    *c = (eng_config){.vocab = presets[i].vocab, .d_model = presets[i].d, .n_layers = presets[i].layers,
                      .n_heads = presets[i].heads, .n_kv_heads = presets[i].kv, .head_dim = presets[i].hd,
                      .d_ff = presets[i].ff, .max_pos = presets[i].max_pos, .rope_theta = 10000.0f,
                      .rms_eps = presets[i].rms_eps, .init_std = 0.02f, .tie_embeddings = presets[i].tie};
    eng_arch_apply(c, presets[i].arch);
    if (presets[i].full_every) {
      const int h = presets[i].dn_heads, hd = presets[i].hd;
      c->full_every = presets[i].full_every, c->rope_dim = hd / 4;
      c->dn.k_heads = h, c->dn.v_heads = 2 * h, c->dn.k_dim = hd, c->dn.v_dim = hd, c->dn.conv = 4;
    }
    return 0;
  }
  return -1;
}

typedef struct opts {
  int quiet;
} opts;

// The flags --plan takes its place from.
typedef struct given {
  int batch, seq, micro, uniform; // uniform: --ckpt-every, --ckpt-host or --keep-acts
} given;

#ifdef TRAIND_HAVE_PLANNER
// What --plan auto planned on, for the predicted timeline.
static eng_config auto_config;
static eng_profile auto_profile;
#endif

// --plan auto: the planner on this machine's profile, as the daemon plans a
// job (DESIGN §3): the cpu backend calibrated at the job's shapes, the
// device cap its device bytes. There is no spill tier here (no NVMe bytes).
static int plan_auto(const eng_spec *s, const char *model_name, double calibrate, int micro_given, eng_plan *out,
                     eng_err *e) {
#ifdef TRAIND_HAVE_PLANNER
  if (s->device_gpu >= 0)
    return eng_err_set(e, ENG_EINVAL, "it calibrates the cpu backend, not a GPU: make a plan with traind-plan "
                                      "and the GPU's profile, and run it with --plan FILE");
  eng_config c = s->config; // the model's: model_dir's, or the flags'
  eng_profile prof = {0};
  eng_spec_profile_method(s, &prof); // before calibrating: it measures the method's rotations
  // Data parallel: each rank plans its share, calibrated as the ranks will
  // run (side by side), with the rate of their all-reduce measured; rank 0
  // plans and hands the plan to the others.
  eng_coll *coll = s->coll;
  const int W = coll ? coll->world : 1, share = s->batch / W;
  int untied, rc = s->model_dir ? eng_hf_load_config(NULL, s->model_dir, &c, &untied, e) : 0;
  if (!rc) rc = eng_profile_calibrate_cpu(&c, share, s->seq_len, (double)s->device_cap, calibrate, &prof, e);
  if (!rc && W > 1) { // as a step sums: a layer's gradients a call, a call per shard (up to 64 MiB)
    eng_layout lo;
    eng_layout_init(&lo, &c);
    const size_t bytes = lo.layer_numel * sizeof(float), most = (size_t)64 << 20;
    int calls = lo.n_shards;
    if ((size_t)calls * bytes > most) calls = bytes < most ? (int)(most / bytes) : 1;
    rc = eng_coll_rate(coll, bytes, calls, &prof.comm_bps, &prof.comm_latency, e);
  }
  if (rc) return rc;
  eng_profile_set_nvme(&prof, prof.d2h, prof.d2h, 0);
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  o.no_nvme = 1;
  if (micro_given) o.micro_batch = s->batch / s->micro_batches;
  auto_config = c;
  auto_profile = prof;
  if (W == 1) return eng_plan_make(&c, model_name, share, s->seq_len, &prof, &o, out, e);
  char *json = NULL;
  double len[1] = {0};
  if (coll->rank == 0 && !(rc = eng_plan_make(&c, model_name, share, s->seq_len, &prof, &o, out, e)) &&
      !(rc = eng_plan_to_json(out, &json, e)))
    len[0] = (double)strlen(json) + 1;
  // A rank 0 that failed sends length 0: every rank then fails, rank 0 with its reason.
  int brc = coll->ops->broadcast(coll, len, 1, ENG_COLL_F64, 0, e);
  if (!brc && len[0] > 0 && coll->rank > 0 && !(json = malloc((size_t)len[0])))
    brc = eng_err_set(e, ENG_ENOMEM, "no memory for the plan");
  if (!brc && len[0] > 0) brc = coll->ops->broadcast(coll, json, (size_t)len[0], ENG_COLL_U8, 0, e);
  if (!brc && len[0] > 0 && coll->rank > 0) brc = eng_plan_from_json(json, out, e);
  if (!brc && !rc && len[0] == 0) brc = eng_err_set(e, ENG_ESTATE, "rank 0 could not plan (it says why)");
  free(json);
  return rc ? rc : brc;
#else
  (void)s, (void)model_name, (void)calibrate, (void)micro_given, (void)out;
  return eng_err_set(e, ENG_ENOTSUP, "this build has no planner (GLPK was not found when it was configured; "
                                     "deploy/install-deps.sh installs it); --plan FILE runs a plan made elsewhere "
                                     "(traind-plan --format json)");
#endif
}

// The plan of --plan (auto or a file) into s->plan: the flags that it
// replaces and did not give take its values. Prints it unless quiet.
static int plan_take(eng_spec *s, const char *arg, const char *model_name, double calibrate, const given *g,
                     int quiet, eng_plan *plan, eng_err *e) {
  int rc;
  if (!strcmp(arg, "auto")) {
    rc = plan_auto(s, model_name, calibrate, g->micro, plan, e);
  } else {
    rc = eng_plan_load(arg, plan, e);
    if (!rc && !g->batch) s->batch = plan->batch * plan->ranks; // a rank's share, under data parallelism
    if (!rc && !g->seq) s->seq_len = plan->seq_len;
  }
  if (rc) return rc;
  if (!g->micro) s->micro_batches = plan->n_micro * plan->ranks;
  s->plan = plan;
  char *table = NULL;
  if (!quiet && (rc = eng_plan_table(plan, &table, e)) == 0) {
    printf("plan (%s):\n%s", strcmp(arg, "auto") ? arg : "auto, this machine's calibrated profile", table);
    fflush(stdout);
  }
  free(table);
  return rc;
}

// --timeline FILE: the last step measured (eng_timeline_svg) and, for a plan
// made here, the planner's replay of it below, in one SVG.
static int timeline_write(const char *path, const eng_run *r, const eng_metrics *m, const eng_plan *plan,
                          int auto_made, eng_err *e) {
  char *svg[2] = {NULL, NULL};
  int rc = eng_timeline_svg(r, m, &svg[0], e);
#ifdef TRAIND_HAVE_PLANNER
  eng_plan_cost k;
  eng_plan_sim sim;
  if (!rc && auto_made && !(rc = eng_plan_cost_make(&auto_config, plan->batch, plan->seq_len, plan->micro_batch,
                                                    &auto_profile, &k, e)) &&
      !(rc = eng_plan_simulate(plan, &k, &sim, e))) {
    rc = eng_plan_svg(plan, &sim, &svg[1], e);
    eng_plan_sim_free(&sim);
  }
#else
  (void)plan, (void)auto_made;
#endif
  FILE *f = rc ? NULL : fopen(path, "w");
  if (!rc && !f) rc = eng_err_set(e, ENG_EIO, "cannot write %s", path);
  if (f) {
    // One image: the measured step above, the predicted one below it.
    const int h = 266, n = svg[1] ? 2 : 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1400\" height=\"%d\">\n", h * n);
    for (int i = 0; i < n; i++) fprintf(f, "<svg y=\"%d\"%s", h * i, svg[i] + strlen("<svg"));
    fprintf(f, "</svg>\n");
    if (fclose(f)) rc = eng_err_set(e, ENG_EIO, "cannot write %s", path);
  }
  free(svg[0]);
  free(svg[1]);
  return rc;
}

static int on_progress(void *ctx, const eng_metrics *m) {
  const opts *o = ctx;
  if (o->quiet) return 0;
  printf("step %5lld  loss %.4f", (long long)m->step, m->loss);
  if (!isnan(m->eval_loss)) printf("  eval %.4f", m->eval_loss);
  printf("  lr %.2e  norm %.3f  tok/s %8.0f  fwd %.3fs loss %.3fs bwd %.3fs wait %.3fs  flops %.3g  mfu %.1f%%%s",
         m->lr, m->grad_norm, m->tokens_per_s, m->t_fwd, m->t_loss, m->t_bwd, m->t_opt_wait, m->total.flops_model,
         100.0 * m->mfu, m->skipped ? "  (skipped: non-finite)" : "");
  if (m->t_comm > 0) printf("  comm %.3fs", m->t_comm);
  if (m->poet_merges) printf("  merges %lld (last: orthogonality error %.1e)", (long long)m->poet_merges, m->poet_orth_err);
  printf("\n");
  fflush(stdout);
  return 0;
}

// The index of arg among a flag's n names; -1 (said on stderr) when it is none.
static int pick(const char *flag, const char *arg, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(arg, names[i])) return i;
  fprintf(stderr, "traind-train: --%s must be one of", flag);
  for (int i = 0; i < n; i++) fprintf(stderr, " %s", names[i]);
  fprintf(stderr, " (got \"%s\")\n", arg);
  return -1;
}

static void on_note(void *ctx, const char *line) {
  (void)ctx;
  fprintf(stderr, "traind-train: note: %s\n", line);
}

int main(int argc, char **argv) {
  eng_spec s;
  eng_spec_defaults(&s);
  preset("tiny", &s.config);
  int steps = 100, resume = 0, save_every = 0;
  const char *score_path = NULL;
  const char *save_dir = NULL, *export_dir = NULL, *plan_arg = NULL, *model_name = "tiny", *timeline_path = NULL;
  double calibrate = ENG_CALIBRATE_SECONDS;
  given g = {0};
  opts o = {0};
  enum { O_MODEL = 256, O_PRESET, O_ARCH, O_VOCAB, O_D, O_LAYERS, O_HEADS, O_KV, O_HD, O_FFN, O_TIE,
         O_DATA, O_EVAL, O_EVAL_EVERY, O_SEQ, O_BATCH, O_MICRO, O_STEPS, O_LR, O_MINLR, O_WARMUP,
         O_WD, O_CLIP, O_SEED, O_CAP, O_CKPT, O_CKPT_HOST, O_SAVE, O_SAVE_EVERY, O_RESUME,
         O_EXPORT, O_QUIET, O_KEEP, O_OPTIM, O_GRAD32, O_WORK16, O_LAGGED, O_OPT_THREAD, O_GPU, O_PLAN, O_CALIBRATE, O_TIMELINE,
         O_METHOD, O_POET_BLOCK, O_POET_MERGE, O_POET_LR, O_POET_MEMORY, O_POET_BASE, O_MAX_TOKENS, O_MAX_FLOPS,
         O_MAX_WALL, O_GAIN_TAU, O_GAIN_PATIENCE, O_GAIN_WINDOW, O_GL_ALPHA, O_PEAK, O_SELECT, O_SELECT_POOL,
         O_SELECT_ADAPTIVE, O_SELECT_REF, O_SELECT_BAND, O_SCORE, O_EVAL_BATCHES, O_FORMAT, O_TOKENIZER, O_CHAT,
         O_NO_PACK, O_DATA_CACHE, O_ARCHS, O_HELP };
  static const struct option lo[] = {
      {"model-dir", 1, 0, O_MODEL}, {"preset", 1, 0, O_PRESET}, {"arch", 1, 0, O_ARCH},
      {"vocab", 1, 0, O_VOCAB}, {"d", 1, 0, O_D}, {"layers", 1, 0, O_LAYERS},
      {"heads", 1, 0, O_HEADS}, {"kv-heads", 1, 0, O_KV}, {"head-dim", 1, 0, O_HD},
      {"ffn", 1, 0, O_FFN}, {"tie", 0, 0, O_TIE}, {"data", 1, 0, O_DATA}, {"eval", 1, 0, O_EVAL},
      {"eval-every", 1, 0, O_EVAL_EVERY}, {"seq", 1, 0, O_SEQ}, {"batch", 1, 0, O_BATCH},
      {"micro", 1, 0, O_MICRO}, {"steps", 1, 0, O_STEPS}, {"lr", 1, 0, O_LR},
      {"min-lr", 1, 0, O_MINLR}, {"warmup", 1, 0, O_WARMUP}, {"wd", 1, 0, O_WD},
      {"clip", 1, 0, O_CLIP}, {"seed", 1, 0, O_SEED}, {"cap", 1, 0, O_CAP},
      {"ckpt-every", 1, 0, O_CKPT}, {"ckpt-host", 0, 0, O_CKPT_HOST}, {"save-dir", 1, 0, O_SAVE},
      {"save-every", 1, 0, O_SAVE_EVERY}, {"resume", 0, 0, O_RESUME}, {"export", 1, 0, O_EXPORT},
      {"quiet", 0, 0, O_QUIET}, {"keep-acts", 0, 0, O_KEEP}, {"optim", 1, 0, O_OPTIM},
      {"grad-fp32", 0, 0, O_GRAD32}, {"work-bf16", 0, 0, O_WORK16}, {"clip-lagged", 0, 0, O_LAGGED}, {"opt-thread", 0, 0, O_OPT_THREAD},
      {"gpu", 1, 0, O_GPU}, {"plan", 1, 0, O_PLAN}, {"calibrate", 1, 0, O_CALIBRATE}, {"timeline", 1, 0, O_TIMELINE},
      {"method", 1, 0, O_METHOD}, {"poet-block", 1, 0, O_POET_BLOCK}, {"poet-merge", 1, 0, O_POET_MERGE},
      {"poet-lr", 1, 0, O_POET_LR}, {"poet-memory", 0, 0, O_POET_MEMORY},
      {"poet-base", 1, 0, O_POET_BASE}, {"max-tokens", 1, 0, O_MAX_TOKENS}, {"max-flops", 1, 0, O_MAX_FLOPS},
      {"max-wall", 1, 0, O_MAX_WALL}, {"gain-tau", 1, 0, O_GAIN_TAU}, {"gain-patience", 1, 0, O_GAIN_PATIENCE},
      {"gain-window", 1, 0, O_GAIN_WINDOW}, {"gl-alpha", 1, 0, O_GL_ALPHA}, {"peak-flops", 1, 0, O_PEAK},
      {"select", 1, 0, O_SELECT}, {"select-pool", 1, 0, O_SELECT_POOL}, {"select-adaptive", 0, 0, O_SELECT_ADAPTIVE},
      {"select-reference", 1, 0, O_SELECT_REF}, {"select-band", 1, 0, O_SELECT_BAND}, {"score", 1, 0, O_SCORE},
      {"eval-batches", 1, 0, O_EVAL_BATCHES}, {"format", 1, 0, O_FORMAT}, {"tokenizer", 1, 0, O_TOKENIZER},
      {"chat-template", 1, 0, O_CHAT}, {"no-pack", 0, 0, O_NO_PACK}, {"data-cache", 1, 0, O_DATA_CACHE},
      {"archs", 0, 0, O_ARCHS}, {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    switch (c) {
    case O_MODEL: s.model_dir = model_name = optarg; break;
    case O_PRESET:
      if (preset(optarg, &s.config)) {
        fprintf(stderr, "traind-train: unknown preset \"%s\" (tiny, demo, bench5m, bench40m, 1b)\n", optarg);
        return 2;
      }
      if (!s.model_dir) model_name = optarg;
      break;
    case O_ARCH: {
      int a = eng_arch_find(optarg, 0);
      if (a < 0) {
        char archs[256];
        fprintf(stderr, "traind-train: --arch must be one of %s (got \"%s\")\n",
                eng_arch_list(archs, sizeof archs, 0, ", "), optarg);
        return 2;
      }
      eng_arch_apply(&s.config, (eng_arch)a);
      break;
    }
    case O_ARCHS: eng_arch_print_table(stdout); return 0;
    case O_VOCAB: s.config.vocab = atoi(optarg); break;
    case O_D: s.config.d_model = atoi(optarg); break;
    case O_LAYERS: s.config.n_layers = atoi(optarg); break;
    case O_HEADS: s.config.n_heads = atoi(optarg); break;
    case O_KV: s.config.n_kv_heads = atoi(optarg); break;
    case O_HD: s.config.head_dim = atoi(optarg); break;
    case O_FFN: s.config.d_ff = atoi(optarg); break;
    case O_TIE: s.config.tie_embeddings = 1; break;
    case O_DATA: s.train_path = optarg; break;
    case O_EVAL: s.eval_path = optarg; break;
    case O_FORMAT: { // names in eng_data_format order
      static const char *const names[] = {"auto", "bin", "input_ids", "text", "chat"};
      int k = pick("format", optarg, names, 5);
      if (k < 0) return 2;
      s.data_format = (eng_data_format)k;
      break;
    }
    case O_TOKENIZER: s.tokenizer_dir = optarg; break;
    case O_CHAT: {
      static const char *const names[] = {"chatml", "llama3"};
      if (pick("chat-template", optarg, names, 2) < 0) return 2;
      s.chat_template = optarg;
      break;
    }
    case O_NO_PACK: s.no_pack = 1; break;
    case O_DATA_CACHE: s.data_cache = optarg; break;
    case O_EVAL_EVERY: s.eval_every = atoi(optarg); break;
    case O_SEQ: s.seq_len = atoi(optarg), g.seq = 1; break;
    case O_BATCH: s.batch = atoi(optarg), g.batch = 1; break;
    case O_MICRO: s.micro_batches = atoi(optarg), g.micro = 1; break;
    case O_STEPS: steps = atoi(optarg); break;
    case O_LR: s.lr = strtof(optarg, NULL); break;
    case O_MINLR: s.min_lr = strtof(optarg, NULL); break;
    case O_WARMUP: s.warmup_steps = atoi(optarg); break;
    case O_WD: s.weight_decay = strtof(optarg, NULL); break;
    case O_CLIP: s.clip = strtof(optarg, NULL); break;
    case O_SEED: s.seed = strtoull(optarg, NULL, 10); break;
    case O_CAP: s.device_cap = (size_t)strtoull(optarg, NULL, 10) << 20; break;
    case O_CKPT: s.ckpt_every = atoi(optarg), g.uniform = 1; break;
    case O_CKPT_HOST: s.ckpt_place = ENG_PLACE_HOST, g.uniform = 1; break;
    case O_SAVE: save_dir = optarg; break;
    case O_SAVE_EVERY: save_every = atoi(optarg); break;
    case O_RESUME: resume = 1; break;
    case O_EXPORT: export_dir = optarg; break;
    case O_QUIET: o.quiet = 1; break;
    case O_KEEP: s.keep_acts = 1, g.uniform = 1; break;
    case O_OPTIM: { // names in eng_optimizer order
      static const char *const names[] = {"adamw", "adamw8"};
      int k = pick("optim", optarg, names, 2);
      if (k < 0) return 2;
      s.optimizer = (eng_optimizer)k;
      break;
    }
    case O_METHOD: { // names in eng_method order
      static const char *const names[] = {"full", "poetx"};
      int k = pick("method", optarg, names, 2);
      if (k < 0) return 2;
      s.method = (eng_method)k;
      break;
    }
    case O_POET_BLOCK: s.poet_block = atoi(optarg); break;
    case O_POET_MERGE: s.poet_merge_every = atoi(optarg); break;
    case O_POET_LR: s.poet_lr = strtof(optarg, NULL); break;
    case O_POET_MEMORY: s.poet_memory = 1; break;
    case O_POET_BASE: {
      static const char *const names[] = {"fp32", "bf16"};
      int k = pick("poet-base", optarg, names, 2);
      if (k < 0) return 2;
      s.poet_base_bf16 = k;
      break;
    }
    case O_GRAD32: s.grad_dtype = ENG_GRAD_F32; break;
    case O_WORK16: s.work_bf16 = 1; break;
    case O_LAGGED: s.clip_lagged = 1; break;
    case O_OPT_THREAD: s.opt_thread = 1; break;
    case O_GPU: s.device_gpu = atoi(optarg); break;
    case O_PLAN: plan_arg = optarg; break;
    case O_CALIBRATE: calibrate = strtod(optarg, NULL); break;
    case O_TIMELINE: timeline_path = optarg; break;
    case O_MAX_TOKENS: s.budget.max_tokens = strtoll(optarg, NULL, 10); break;
    case O_MAX_FLOPS: s.budget.max_flops = strtod(optarg, NULL); break;
    case O_MAX_WALL: s.budget.max_wall_s = strtod(optarg, NULL); break;
    case O_GAIN_TAU: s.budget.gain_tau = strtod(optarg, NULL); break;
    case O_GAIN_PATIENCE: s.budget.gain_patience = atoi(optarg); break;
    case O_GAIN_WINDOW: s.budget.gain_window = atoi(optarg); break;
    case O_GL_ALPHA: s.budget.gl_alpha = strtod(optarg, NULL); break;
    case O_PEAK: s.peak_flops = strtod(optarg, NULL); break;
    case O_SELECT: {
      int k = eng_select_rule_parse(optarg);
      if (k < 0) {
        fprintf(stderr, "traind-train: --select must be one of none loss reducible dynamics (got \"%s\")\n", optarg);
        return 2;
      }
      s.select.rule = (eng_select_rule)k;
      break;
    }
    case O_SELECT_POOL: s.select.pool = atoi(optarg); break;
    case O_SELECT_ADAPTIVE: s.select.adaptive = 1; break;
    case O_SELECT_REF: s.select.reference = optarg; break;
    case O_SELECT_BAND: {
      static char band[4096];
      snprintf(band, sizeof band, "%s", optarg);
      char *c2 = strrchr(band, ':'), *c1 = NULL;
      if (c2) *c2 = 0, c1 = strrchr(band, ':');
      if (!c1) {
        fprintf(stderr, "traind-train: --select-band FILE:LO:HI (percentiles), got \"%s\"\n", optarg);
        return 2;
      }
      *c1 = 0;
      s.select.band_file = band;
      s.select.band_lo = strtod(c1 + 1, NULL);
      s.select.band_hi = strtod(c2 + 1, NULL);
      break;
    }
    case O_SCORE: score_path = optarg; break;
    case O_EVAL_BATCHES: s.eval_batches = atoi(optarg); break;
    case 'h':
    case O_HELP: usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc || steps < 0 || (resume && !save_dir) || (plan_arg && g.uniform) || !(calibrate > 0)) {
    if (resume && !save_dir) fprintf(stderr, "traind-train: --resume needs --save-dir\n");
    if (plan_arg && g.uniform)
      fprintf(stderr, "traind-train: --plan replaces --ckpt-every, --ckpt-host and --keep-acts\n");
    usage(stderr);
    return 2;
  }
  if (!s.train_path) {
    fprintf(stderr, "traind-train: --data is required\n");
    return 2;
  }
  if (s.config.head_dim == 0 && s.config.n_heads > 0) s.config.head_dim = s.config.d_model / s.config.n_heads;
  s.total_steps = steps;
  s.progress = on_progress;
  s.progress_ctx = &o;
  s.note = on_note;

  eng_err e = {0};
  // Data parallel when a launcher started several of us (dist/dist.h).
  eng_dist_env dist;
  eng_coll *coll = NULL;
  int writer = 1; // prints the summary (every rank saves: the optimizer state is in parts)
  if (eng_dist_env_read(&dist, (const char *(*)(const char *))getenv, &e)) {
    fprintf(stderr, "traind-train: %s\n", e.msg);
    return 2;
  }
  if (dist.world > 1) {
    if (eng_coll_mpi_open(&coll, &e)) {
      fprintf(stderr, "traind-train: rank %d of %d (%s): %s\n", dist.rank, dist.world,
              eng_dist_launcher_name(dist.launcher), e.msg);
      return 1;
    }
    // A process the launcher's variables call one of several, alone in MPI's
    // world (torchrun-style variables, no mpirun): it would train alone.
    if (coll->world != dist.world || coll->rank != dist.rank) {
      fprintf(stderr,
              "traind-train: %s says rank %d of %d, but MPI sees rank %d of %d: on the cpu the ranks are "
              "MPI's; start them with mpirun or srun (torchrun-style launches need NCCL, for the cuda backend)\n",
              eng_dist_launcher_name(dist.launcher), dist.rank, dist.world, coll->rank, coll->world);
      coll->ops->close(coll);
      return 1;
    }
    s.coll = coll;
    if (coll->rank > 0) { // the ranks hold the same state: one speaks and writes
      o.quiet = 1;
      writer = 0;
      s.note = NULL; // rank 0 says it
      timeline_path = NULL; // it takes part in an export (a master in parts), writes nothing
    } else if (!o.quiet) {
      printf("data parallel: %d ranks (%s), each %d of the %d sequences of a batch\n", coll->world,
             eng_dist_launcher_name(dist.launcher), s.batch / coll->world, s.batch);
    }
  }
  eng_run *r = NULL;
  eng_store st = {0};
  eng_plan plan = {0};
  int rc_plan;
  if (plan_arg && (rc_plan = plan_take(&s, plan_arg, model_name, calibrate, &g, o.quiet, &plan, &e))) {
    fprintf(stderr, "traind-train: --plan %s: %s\n", plan_arg, e.msg);
    eng_plan_free(&plan);
    if (coll) coll->ops->close(coll); // every rank failed here (rank 0 hands out the plan)
    return rc_plan == ENG_ENOTSUP ? 2 : 1;
  }
  int rc = eng_open(&s, &r, &e);
  if (!rc && save_dir) rc = eng_store_dir_open(&st, save_dir, &e);
  if (!rc && resume) {
    rc = eng_load(r, &st, &e);
    if (rc == 1) rc = 0; // nothing saved yet: start fresh
    else if (!rc && !o.quiet) printf("resumed at step %lld\n", (long long)eng_steps_done(r));
  }
  if (!rc && !o.quiet) {
    const eng_config *cfg = eng_run_config(r);
    const char *route = "", *core = "";
    eng_cpu_gemm_route(&route, &core, &e); // eng_open has checked it
    printf("model %s: %zu parameters, %d layers, d %d, vocab %d; batch %d x %d tokens; "
           "optimizer state %.3f, fp32 master %.3f, bf16 working copy %.3f bytes/parameter\n",
           eng_arch_name(cfg->arch), eng_param_count(r), cfg->n_layers, cfg->d_model, cfg->vocab,
           s.batch, s.seq_len, (double)eng_opt_state_bytes(r) / (double)eng_param_count(r),
           (double)eng_master_bytes(r) / (double)eng_param_count(r),
           (double)eng_work_bytes(r) / (double)eng_param_count(r));
    printf("cpu products: the %s route%s%s\n", route, *core ? ", OpenBLAS core " : "", core);
  }
  if (!rc && score_path) {
    double fl = 0;
    rc = eng_score_data(r, s.train_path, score_path, &fl, &e);
    if (!rc) printf("scored %s with %s: %s (%.3g model FLOPs)\n", s.train_path, model_name, score_path, fl);
    if (rc) fprintf(stderr, "traind-train: --score: %s: %s\n", eng_err_name(rc), e.msg);
    if (st.close) st.close(st.ctx);
    eng_close(r);
    eng_plan_free(&plan);
    if (coll) coll->ops->close(coll);
    return rc ? 1 : 0;
  }
  double first = NAN, last = NAN, tps_sum = 0;
  int measured = 0;
  eng_metrics m = {0};
  while (!rc && eng_steps_done(r) < steps && !eng_run_govern(r)->stop) {
    rc = eng_step(r, &m, &e);
    if (rc) break;
    if (isnan(first)) first = m.loss;
    last = m.loss;
    if (m.step > 2) tps_sum += m.tokens_per_s, measured++; // warm-up excluded
    if (save_dir && save_every > 0 && m.step % save_every == 0) rc = eng_save(r, &st, &e);
  }
  // The held-out loss where training ended, unless the last step measured it.
  double final_eval = NAN;
  if (!rc && s.eval_path) {
    if (m.evaluated) final_eval = m.eval_loss;
    else rc = eng_eval(r, &final_eval, &e);
  }
  if (!rc && save_dir) rc = eng_save(r, &st, &e); // every rank: rank 0 writes (engine.h)
  if (!rc && export_dir) rc = eng_export_hf(r, export_dir, 0, &e);
  if (!rc && timeline_path && m.step > 0)
    rc = timeline_write(timeline_path, r, &m, &plan, plan_arg && !strcmp(plan_arg, "auto"), &e);
  eng_plan_free(&plan);
  if (!rc && writer) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const eng_govern *gv = eng_run_govern(r);
    printf("done: %lld steps, loss %.4f -> %.4f, mean %.0f tok/s, peak arena %.1f MiB of %.1f MiB, "
           "peak RSS %.1f MiB; %lld tokens, %.3g model FLOPs (%.3g executed) in %.1f s",
           (long long)eng_steps_done(r), first, last, measured ? tps_sum / measured : 0.0,
           m.peak_arena / 1048576.0, m.arena_cap / 1048576.0, ru.ru_maxrss / 1024.0, (long long)gv->t.tokens,
           gv->t.flops_model, gv->t.flops_exec, gv->t.wall_s);
    if (gv->stop) printf("; stopped by %s", eng_stop_name(gv->stop));
    if (!isnan(final_eval)) printf("; eval %.4f", final_eval);
    printf("\n");
  } else if (rc) {
    if (coll) {
      // The other ranks may be waiting for this one in a collective: end them
      // all (the launcher names this rank), never leave them waiting.
      fprintf(stderr, "traind-train: rank %d of %d: %s: %s; ending every rank\n", coll->rank, coll->world,
              eng_err_name(rc), e.msg);
      fflush(stdout);
      coll->ops->abort(coll, 1);
    }
    fprintf(stderr, "traind-train: %s: %s\n", eng_err_name(rc), e.msg);
  }
  if (st.close) st.close(st.ctx);
  eng_close(r);
  if (coll) coll->ops->close(coll);
  return rc ? 1 : 0;
}
