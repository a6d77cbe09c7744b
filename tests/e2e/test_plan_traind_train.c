// traind-train runs a plan (DESIGN §3), on make demo's model (a ~10M
// Qwen3-style config, deploy/example-job.yaml: batch 8 x 256 tokens) under a
// device cap too small to keep its boundary activations on the device at any
// micro-batch split.
// - --plan auto: the planner on this machine's calibrated cpu profile; the
//   plan it prints keeps some boundary off the device or recomputes it, and
//   the steps train under the cap with finite losses.
// - --plan FILE: a plan that traind-plan saved as JSON runs as saved (the
//   same table printed; batch, sequence length and split taken from it). A
//   plan that disagrees with a flag is refused naming the field, and --plan
//   beside the uniform policy's flags is bad usage. --help documents both.
#define _GNU_SOURCE
#include <math.h>

#include "e2e/daemon.h"
#include "engine.h"

enum { CAP_MIB = 56, STEPS = 3, BATCH = 8, SEQ = 256 };

static const char CONFIG[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": 256,"
    " \"hidden_size\": 384, \"num_hidden_layers\": 6, \"num_attention_heads\": 6, \"num_key_value_heads\": 2,"
    " \"head_dim\": 64, \"intermediate_size\": 1024, \"max_position_embeddings\": 4096,"
    " \"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true}\n";

// A cpu profile for traind-plan: plausible rates, the demo's cap, no NVMe.
static const char PROFILE[] =
    "{\"name\": \"test cpu\", \"backend\": \"cpu\", \"gemm_flops\": 1e11, \"attn_flops\": 5e10,"
    " \"elem_bytes_per_s\": 1e10, \"h2d\": 1e10, \"d2h\": 1e10, \"nvme_read\": 1e9, \"nvme_write\": 1e9,"
    " \"opt_params_per_s\": 1e9, \"opt_inline\": true, \"act_bytes\": 4, \"weight_bytes\": 4, \"grad_bytes\": 2,"
    " \"grad_store_bytes\": 2, \"pinned_copy\": false, \"opt_8bit\": true, \"device_bytes\": 58720256,"
    " \"device_reserve\": 0, \"host_bytes\": 8589934592, \"host_reserve\": 1073741824, \"nvme_bytes\": 0}\n";

static char out[1 << 16];
static char train_bin[1100], plan_bin[1100], data[1100];

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

// traind-train on the demo model with the given flags; its exit code, its
// output (stdout and stderr) in out.
static int train(const char *fmt, ...) {
  char args[2048], cmd[4400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "%s --preset demo --data %s --steps %d %s 2>&1", train_bin, data, STEPS, args);
  return td_run_out(cmd, out, sizeof out);
}

// The printed plan keeps some boundary in host memory or on NVMe, or recomputes it.
static void off_device(const char *what) {
  int dev, host, nvme, rc;
  const char *m = strstr(out, "materialised: ");
  CHECK(m && sscanf(m, "materialised: %d on the device, %d in host memory, %d on NVMe; %d recomputed", &dev, &host,
                    &nvme, &rc) == 4,
        "%s: no plan table in the output:\n%s", what, out);
  CHECK(host + nvme + rc > 0, "%s: the plan keeps all %d boundaries on the device under a %d MiB cap:\n%s", what, dev,
        CAP_MIB, out);
  printf("%s: %d boundaries on the device, %d in host memory, %d on NVMe, %d recomputed\n", what, dev, host, nvme, rc);
}

// STEPS step lines with finite losses, and the summary line.
static void trained(const char *what) {
  int steps = 0;
  for (const char *p = out; (p = strstr(p, "\nstep ")); p++) {
    long long n;
    double loss;
    CHECK(sscanf(p, "\nstep %lld loss %lf", &n, &loss) == 2, "%s: a step line without a loss:\n%s", what, out);
    CHECK(isfinite(loss), "%s: step %lld: loss %g", what, n, loss);
    steps++;
  }
  double arena, cap;
  const char *d = strstr(out, "done: ");
  CHECK(steps == STEPS && d, "%s: %d step lines, expected %d, and a summary:\n%s", what, steps, STEPS, out);
  CHECK(sscanf(strstr(d, "peak arena"), "peak arena %lf MiB of %lf MiB", &arena, &cap) == 2 && arena <= cap,
        "%s: the arena's peak is not under its cap: %s", what, d);
  printf("%s: %.*s\n", what, (int)strcspn(d, "\n"), d);
}

int main(void) {
  const char *build = td_build_dir();
  snprintf(train_bin, sizeof train_bin, "%s/engine/traind-train", build);
  snprintf(plan_bin, sizeof plan_bin, "%s/engine/plan/traind-plan", build);
  snprintf(data, sizeof data, "%s/data/demo/licenses.txt", TRAIND_SOURCE_DIR);
  CHECK(access(train_bin, X_OK) == 0 && access(plan_bin, X_OK) == 0, "%s or %s is not built", train_bin, plan_bin);
  snprintf(out, sizeof out, "%s --help", train_bin);
  char help[1 << 15];
  CHECK(td_run_out(out, help, sizeof help) == 0 && strstr(help, "--plan auto|FILE") && strstr(help, "auto: ") &&
            strstr(help, "FILE: "),
        "--help does not document --plan auto and --plan FILE:\n%s", help);
  tmp_make();
  const char *config = tmp_path("config.json"), *profile = tmp_path("profile.json");
  write_text(config, CONFIG);
  write_text(profile, PROFILE);

  // The cap holds no split's boundaries on the device: keeping every
  // boundary there needs more arena even at the smallest micro-batch.
  eng_err e = {0};
  eng_spec s;
  eng_spec_defaults(&s);
  CHECK_OK(eng_config_load(NULL, config, &s.config, &e), &e);
  s.batch = BATCH, s.seq_len = SEQ, s.micro_batches = BATCH, s.ckpt_every = 1, s.ckpt_place = ENG_PLACE_DEVICE;
  size_t all_device;
  CHECK_OK(eng_spec_device_bytes(&s, &all_device, &e), &e);
  CHECK(all_device > (size_t)CAP_MIB << 20, "every boundary on the device fits %d MiB (%zu bytes)", CAP_MIB,
        all_device);
  printf("every boundary on the device needs %.1f MiB at micro-batches of 1; the cap is %d MiB\n",
         all_device / 1048576.0, CAP_MIB);

  // --plan auto, drawing the last step measured above the planner's replay.
  const char *svg_path = tmp_path("timeline.svg");
  int rc = train("--batch %d --seq %d --cap %d --plan auto --calibrate 3 --timeline %s", BATCH, SEQ, CAP_MIB, svg_path);
  CHECK(rc == 0, "traind-train --plan auto: exit %d:\n%s", rc, out);
  CHECK(strstr(out, "plan (auto"), "no plan printed:\n%s", out);
  off_device("--plan auto");
  trained("--plan auto");
  {
    char svg[1 << 17];
    FILE *f = fopen(svg_path, "r");
    CHECK(f, "--timeline wrote no %s", svg_path);
    size_t n = fread(svg, 1, sizeof svg - 1, f);
    fclose(f);
    svg[n] = 0;
    CHECK(strstr(svg, "<svg y=\"0\"") && strstr(svg, "(measured)") && strstr(svg, "<svg y=\"266\"") &&
          strstr(svg, ">F0 ") && strstr(svg, ">B0 ") && strstr(svg, "</svg>\n</svg>\n"),
          "--timeline: not a measured and a predicted timeline (%zu bytes)", n);
    printf("--timeline: %zu bytes of SVG, measured above predicted\n", n);
  }

  // --plan FILE, saved by traind-plan for the same cap.
  const char *plan_path = tmp_path("plan.json");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s --config %s --profile %s --batch %d --seq %d --no-nvme --format json --out %s 2>&1",
           plan_bin, config, profile, BATCH, SEQ, plan_path);
  rc = td_run_out(cmd, out, sizeof out);
  CHECK(rc == 0, "traind-plan: exit %d:\n%s", rc, out);
  eng_plan plan;
  CHECK_OK(eng_plan_load(plan_path, &plan, &e), &e);
  char *table;
  CHECK_OK(eng_plan_table(&plan, &table, &e), &e);
  // The planner counts the executor's arena (DESIGN §3): the plan runs
  // under the cap it was made for.
  s.plan = &plan, s.micro_batches = plan.n_micro;
  size_t need;
  CHECK_OK(eng_spec_device_bytes(&s, &need, &e), &e);
  CHECK(need <= (size_t)CAP_MIB << 20, "the plan needs %zu bytes of arena, over its %d MiB", need, CAP_MIB);
  rc = train("--cap %d --plan %s", CAP_MIB, plan_path);
  CHECK(rc == 0, "traind-train --plan FILE: exit %d:\n%s", rc, out);
  CHECK(strstr(out, table), "traind-train printed another plan than the file's:\n%s\nthe file's:\n%s", out, table);
  off_device("--plan FILE");
  trained("--plan FILE");
  free(table);
  eng_plan_free(&plan);

  // A flag that disagrees with the plan, and the uniform policy's flags beside it.
  rc = train("--cap %d --plan %s --batch 4", CAP_MIB, plan_path);
  CHECK(rc == 1 && strstr(out, "batch is 8, the spec's batch is 4"), "a plan for another batch: exit %d:\n%s", rc,
        out);
  printf("refused: %s", strstr(out, "traind-train:"));
  rc = train("--cap %d --plan %s --ckpt-every 2", CAP_MIB, plan_path);
  CHECK(rc == 2 && strstr(out, "--plan replaces"), "--plan with --ckpt-every: exit %d:\n%s", rc, out);
  printf("bad usage: %.*s\n", (int)strcspn(out, "\n"), out);
  tmp_cleanup();
  return 0;
}
