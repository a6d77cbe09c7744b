// Compute-optimal sizing through a real daemon (PlanJob's flops, gpu_hours
// and fit; DESIGN §8), planned on the H200 profile: `trainctl plan --flops`
// gives the fit's N_opt and D_opt (those of compute/scaling.h), a
// Qwen3-shaped model near N_opt that fits, its steps at the job's batch and
// its predicted wall time at the plan's tokens/s; --gpu-hours finds a budget
// that the chosen model's own rate fills in those hours; a budget nothing
// on the machine can train is refused by name; a job trained from scratch
// with far too many tokens per parameter is warned about, never refused.
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>

#include "compute/scaling.h"
#include "e2e/daemon.h"

static json_t *plan_json(td *t, const char *job, const char *flags) {
  static char out[1 << 20];
  int rc = td_ctl(t, out, sizeof out, "plan %s %s --json", job, flags);
  CHECK(rc == 0, "trainctl plan %s exited %d: %s", flags, rc, out);
  json_error_t je;
  json_t *j = json_loads(out, 0, &je);
  CHECK(j, "trainctl plan --json printed no JSON (%s): %s", je.text, out);
  return j;
}

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  CHECK(v && (json_is_number(v) || json_is_string(v)), "no %s in %s", key, json_dumps(o, 0));
  return json_is_string(v) ? strtod(json_string_value(v), NULL) : json_number_value(v);
}

int main(void) {
  td t;
  td_init(&t);
  td_set(&t, "profile_file=" TRAIND_SOURCE_DIR "/engine/plan/profiles/h200-sxm.json");
  td_start(&t);
  // A job in Qwen3's vocabulary at batch 8 x 4096 on the H200's memory.
  const char *job = tmp_path("big.yaml");
  FILE *f = fopen(job, "w");
  CHECK(f, "cannot write %s", job);
  fprintf(f, "name: big\nmodel: {config: {arch: qwen3, vocab_size: 151936, hidden_size: 64, num_hidden_layers: 2,\n"
             "  num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, intermediate_size: 176,\n"
             "  max_position_embeddings: 4096}}\ndata: {train_path: %s/data/demo/licenses.txt}\n"
             "training: {steps: 100, batch_size: 8, seq_len: 4096, lr: 3e-4}\ndevice: {memory_bytes: 64G}\n",
          TRAIND_SOURCE_DIR);
  fclose(f);

  json_t *r = plan_json(&t, job, "--flops 1e21");
  json_t *z = json_object_get(r, "sizing");
  CHECK(z, "no sizing in the answer: %s", json_dumps(r, 0));
  double N, D;
  eng_scaling_optimal(&eng_scaling_chinchilla, 1e21, &N, &D);
  double params = num(z, "params"), tokens = num(z, "tokens"), steps = num(z, "steps"), wall = num(z, "wall_seconds");
  double tps = num(r, "tokens_per_s");
  CHECK(fabs(num(z, "params_optimal") / N - 1) < 1e-9 && fabs(num(z, "tokens_optimal") / D - 1) < 1e-9,
        "N_opt %g, D_opt %g; the fit says %g, %g", num(z, "params_optimal"), num(z, "tokens_optimal"), N, D);
  CHECK(fabs(params / N - 1) < 0.05 && fabs(tokens * 6 * params / 1e21 - 1) < 1e-9 &&
        steps == ceil(tokens / (8.0 * 4096)) && fabs(wall * tps / tokens - 1) < 1e-9,
        "chosen %g parameters, %g tokens, %g steps, %g s at %g tokens/s", params, tokens, steps, wall, tps);
  printf("1e21 FLOPs: N_opt %.4g, D_opt %.4g; %s with %.4g parameters, %.0f steps, %.0f s predicted\n", N, D,
         json_string_value(json_object_get(z, "shape")), params, steps, wall);
  json_decref(r);

  // GPU hours: the budget is what the chosen model computes in them.
  r = plan_json(&t, job, "--gpu-hours 24");
  z = json_object_get(r, "sizing");
  double C = num(z, "flops"), rate = 6 * num(z, "params") * num(r, "tokens_per_s");
  CHECK(fabs(C / (24 * 3600 * rate) - 1) < 0.01, "24 GPU hours: budget %g FLOPs, the chosen model does %g in them", C,
        24 * 3600 * rate);
  printf("24 GPU hours: %.4g FLOPs, %s\n", C, json_string_value(json_object_get(z, "shape")));
  json_decref(r);

  // Refusals, by field; a budget no shape near N_opt fits on this machine.
  char out[8192];
  CHECK(td_ctl(&t, out, sizeof out, "plan %s --flops 1e21 --gpu-hours 2 2>&1", job) != 0 &&
            strstr(out, "gpu_hours: give flops or gpu_hours"), "both budgets: %s", out);
  CHECK(td_ctl(&t, out, sizeof out, "plan %s --flops 1e21 --fit 1,2,3 2>&1", job) != 0 && strstr(out, "fit:"),
        "a bad fit: %s", out);
  CHECK(td_ctl(&t, out, sizeof out, "plan %s --flops 1e29 2>&1", job) != 0 && strstr(out, "FAILED_PRECONDITION") &&
            strstr(out, "Qwen3 shapes nearest") && strstr(out, "within 2x"), "a budget nothing fits: %s", out);

  // The tests' tiny model (125k parameters) on 100,000 steps of 256
  // tokens: 200 tokens per parameter, 28 times the optimum for its budget.
  const char *id = td_submit(&t, td_jobfile("warn.yaml", 100000, 100000, NULL), NULL);
  char logs[65536];
  td_logs(&t, id, logs, sizeof logs);
  CHECK(strstr(logs, "submitted; warning: ") && strstr(logs, "more than compute-optimal"), "no warning: %s", logs);
  printf("warned: %.*s\n", (int)strcspn(strstr(logs, "warning"), "\n"), strstr(logs, "warning"));
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", id) == 0, "cancel failed");
  td_finish(&t);
  printf("test_e2e_sizing: ok\n");
  return 0;
}
