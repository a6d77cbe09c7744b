// traind-plan: prints the plan the planner makes for a model config, a
// device profile and a batch, as a table, JSON or an SVG timeline; or a
// baseline policy's plan for comparison. The daemon's `trainctl plan` shows
// the same plans through the same library.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/cost.h"
#include "plan/planner.h"
#include "plan/sim.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: traind-plan --config CONFIG.json --profile PROFILE.json [options]\n"
          "Plans one training step: which boundary activations to keep, where (device,\n"
          "host, NVMe), what to recompute, and when each spilled byte moves.\n"
          "\n"
          "  --config PATH       Hugging Face config.json of the model\n"
          "  --profile PATH      device profile (engine/plan/profiles/*.json or calibrated)\n"
          "  --override PATH     profile fields to override (any subset)\n"
          "  --batch N|auto      sequences per step (default auto: the largest that fits)\n"
          "  --seq N             tokens per sequence (default 1024)\n"
          "  --micro N           sequences per micro-batch (default: the planner chooses)\n"
          "  --time-limit S      solver time limit in seconds (default 5)\n"
          "  --gap G             relative gap to stop at (default 0.01)\n"
          "  --max-block K       longest recompute block (default 8)\n"
          "  --no-host --no-nvme --no-keep   forbid a tier / keeping inner activations\n"
          "  --policy P          a baseline instead: every-K (e.g. every-4), all-host, none\n"
          "  --format F          table (default), json or svg\n"
          "  --out PATH          write there instead of stdout\n");
}

static int write_out(const char *path, const char *text, const char *tail) {
  FILE *f = path ? fopen(path, "w") : stdout;
  if (!f) {
    fprintf(stderr, "traind-plan: cannot write %s\n", path);
    return 1;
  }
  fputs(text, f);
  fputs(tail, f);
  return path && fclose(f) ? 1 : 0;
}

int main(int argc, char **argv) {
  const char *config = NULL, *profile = NULL, *override = NULL, *policy = NULL, *format = "table", *out = NULL;
  int batch = 0, seq = 1024;
  eng_plan_opts o;
  eng_plan_opts_defaults(&o);
  static const struct option opts[] = {
      {"config", 1, 0, 'c'}, {"profile", 1, 0, 'p'}, {"override", 1, 0, 'O'}, {"batch", 1, 0, 'b'},
      {"seq", 1, 0, 's'}, {"micro", 1, 0, 'm'}, {"time-limit", 1, 0, 't'}, {"gap", 1, 0, 'g'},
      {"max-block", 1, 0, 'k'}, {"no-host", 0, 0, 'H'}, {"no-nvme", 0, 0, 'N'}, {"no-keep", 0, 0, 'K'},
      {"policy", 1, 0, 'P'}, {"format", 1, 0, 'f'}, {"out", 1, 0, 'o'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'c': config = optarg; break;
    case 'p': profile = optarg; break;
    case 'O': override = optarg; break;
    case 'b': batch = strcmp(optarg, "auto") ? atoi(optarg) : 0; break;
    case 's': seq = atoi(optarg); break;
    case 'm': o.micro_batch = atoi(optarg); break;
    case 't': o.time_limit = atof(optarg); break;
    case 'g': o.mip_gap = atof(optarg); break;
    case 'k': o.max_block = atoi(optarg); break;
    case 'H': o.no_host = 1; break;
    case 'N': o.no_nvme = 1; break;
    case 'K': o.no_keep = 1; break;
    case 'P': policy = optarg; break;
    case 'f': format = optarg; break;
    case 'o': out = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!config || !profile || optind < argc || seq < 1 || batch < 0 ||
      (strcmp(format, "table") && strcmp(format, "json") && strcmp(format, "svg"))) {
    usage(stderr);
    return 2;
  }
  eng_err e = {0};
  eng_config c;
  eng_profile p;
  if (eng_config_load(NULL, config, &c, &e) || eng_profile_load(profile, &p, &e) ||
      (override && eng_profile_merge_file(&p, override, &e))) {
    fprintf(stderr, "traind-plan: %s\n", e.msg);
    return 1;
  }
  eng_plan plan;
  int rc;
  if (policy) {
    eng_plan_policy pol;
    int k = 0;
    if (!strncmp(policy, "every-", 6) && (k = atoi(policy + 6)) > 0) pol = ENG_POLICY_EVERY_K;
    else if (!strcmp(policy, "all-host")) pol = ENG_POLICY_ALL_HOST;
    else if (!strcmp(policy, "none")) pol = ENG_POLICY_NONE;
    else {
      fprintf(stderr, "traind-plan: unknown policy \"%s\"\n", policy);
      return 2;
    }
    if (batch == 0 && eng_plan_max_batch(&c, seq, &p, &o, 1 << 16, &batch, &e)) {
      fprintf(stderr, "traind-plan: %s\n", e.msg);
      return 1;
    }
    rc = eng_plan_baseline(&c, config, batch, seq, &p, pol, k, o.micro_batch, &plan, &e);
  } else {
    rc = eng_plan_make(&c, config, batch, seq, &p, &o, &plan, &e);
  }
  if (rc) {
    fprintf(stderr, "traind-plan: %s\n", e.msg);
    return 1;
  }
  char *text = NULL;
  if (!strcmp(format, "table")) {
    rc = eng_plan_table(&plan, &text, &e);
  } else if (!strcmp(format, "json")) {
    rc = eng_plan_to_json(&plan, &text, &e);
  } else {
    eng_plan_cost k;
    eng_plan_sim sim;
    rc = eng_plan_cost_make(&c, plan.batch, plan.seq_len, plan.micro_batch, &p, &k, &e);
    if (!rc) rc = eng_plan_simulate(&plan, &k, &sim, &e);
    if (!rc) {
      rc = eng_plan_svg(&plan, &sim, &text, &e);
      eng_plan_sim_free(&sim);
    }
  }
  eng_plan_free(&plan);
  if (rc) {
    fprintf(stderr, "traind-plan: %s\n", e.msg);
    return 1;
  }
  rc = write_out(out, text, strcmp(format, "json") ? "" : "\n"); // the JSON text ends without one
  free(text);
  return rc;
}
