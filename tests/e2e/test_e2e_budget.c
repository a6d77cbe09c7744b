// Budgets and stopping rules through a real daemon (spec.budget, DESIGN §8):
// a job with a token, FLOP or wall-time budget, or the marginal-gain rule on
// a held-out loss that plateaus, succeeds with its final step checkpointed,
// the reason in its state change and record (Job.compute.stop_reason, with
// the evaluations the rule decided on), and trainctl show says so. Budgets a
// single step passes, and rules without held-out data, are refused at submit.
#define _GNU_SOURCE
#include <math.h>

#include "compute/flops.h"
#include "e2e/daemon.h"
#include "python.h"
#include "tiny.h"

typedef struct outcome {
  int64_t step, ckpt, tokens, evals;
  double flops, wall, last; // last: the last step's time (Progress.phases.total)
  char reason[512], stop[32], id[80];
} outcome;

// A job file for the tiny model: `data` its data section's lines (NULL:
// the demo text), then `budget`.
static const char *jobfile(const char *name, int steps, const char *data, const char *budget) {
  char file[64], train[1024];
  snprintf(file, sizeof file, "%s.yaml", name);
  snprintf(train, sizeof train, "%s/data/demo/licenses.txt", TRAIND_SOURCE_DIR);
  const char *path = tmp_path(file);
  FILE *f = fopen(path, "w");
  CHECK(f, "cannot write %s", path);
  fprintf(f, "name: %s\n%sdata:\n%s", name, TD_TINY_MODEL, data ? data : "");
  if (!data) fprintf(f, "  train_path: %s\n", train);
  fprintf(f, "training: {steps: %d, batch_size: 4, seq_len: 64, lr: 3e-3, min_lr: 3e-4, warmup_steps: 5}\n"
             "checkpoints: {every_steps: 1000000}\ndevice: {memory_bytes: 256M}\nseed: 42\n%s",
          steps, budget ? budget : "");
  fclose(f);
  return path;
}

// Submits, waits, and reads back what the record says.
static outcome run(td *t, const char *name, int steps, const char *data, const char *budget) {
  const char *job = jobfile(name, steps, data, budget);
  const char *id = td_submit(t, job, NULL);
  char jid[80];
  snprintf(jid, sizeof jid, "%s", id);
  Traind__V1__Job *j = td_wait_done(t, jid, 300);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "%s: ended %d: %s", name, j->state, j->error);
  CHECK(j->compute, "%s: no compute record", name);
  outcome o = {.step = j->progress->step, .ckpt = j->checkpoint_step, .tokens = j->compute->tokens,
               .evals = (int64_t)j->compute->n_evals, .flops = j->compute->model_flops,
               .wall = j->compute->wall_seconds,
               .last = j->progress->phases ? j->progress->phases->total : 0};
  snprintf(o.stop, sizeof o.stop, "%s", j->compute->stop_reason);
  snprintf(o.id, sizeof o.id, "%s", jid);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  // Every step's metrics are an event: a fast machine takes a thousand in
  // the wall budget.
  enum { LOGS_MAX = 4 << 20 };
  char *logs = malloc(LOGS_MAX);
  CHECK(logs, "out of memory");
  td_logs(t, jid, logs, LOGS_MAX);
  const char *s = strstr(logs, "SUCCEEDED: ");
  CHECK(s, "%s: no SUCCEEDED line in its events:\n%s", name, logs);
  snprintf(o.reason, sizeof o.reason, "%.*s", (int)strcspn(s, "\n"), s);
  free(logs);
  char show[8192];
  CHECK(td_ctl(t, show, sizeof show, "show %s", jid) == 0, "trainctl show %s failed", jid);
  if (*o.stop) {
    char want[64];
    snprintf(want, sizeof want, "stopped by %s", o.stop);
    CHECK(strstr(show, want) && strstr(show, "model FLOPs"), "%s: trainctl show lacks \"%s\":\n%s", name, want, show);
  }
  printf("%-9s step %lld (checkpoint %lld), %lld tokens, %.4g FLOPs, %.2f s, %lld evaluations: %s\n", name,
         (long long)o.step, (long long)o.ckpt, (long long)o.tokens, o.flops, o.wall, (long long)o.evals, o.reason);
  return o;
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  eng_spec s;
  tiny_spec(&s, 2); // the jobs' model, batch and sequence (td_jobfile)
  eng_step_flops f;
  eng_err e = {0};
  CHECK_OK(eng_flops_step(&s.config, 4, 64, 0, 0, &f, &e), &e);
  const int64_t per = 4 * 64;
  char budget[512];

  snprintf(budget, sizeof budget, "budget:\n  max_tokens: %lld\n", (long long)(7 * per + per / 2));
  outcome o = run(&t, "tokens", 200, NULL, budget);
  CHECK(!strcmp(o.stop, "max_tokens") && o.step == 7 && o.ckpt == 7 && o.tokens == 7 * per &&
        strstr(o.reason, "budget.max_tokens"), "max_tokens: %s at step %lld, checkpoint %lld: %s", o.stop,
        (long long)o.step, (long long)o.ckpt, o.reason);

  snprintf(budget, sizeof budget, "budget:\n  max_flops: %.17g\n", 9.5 * f.model);
  o = run(&t, "flops", 200, NULL, budget);
  CHECK(!strcmp(o.stop, "max_flops") && o.step == 9 && o.ckpt == 9 && o.flops <= 9.5 * f.model &&
        strstr(o.reason, "budget.max_flops"), "max_flops: %s at step %lld, checkpoint %lld, %.6g FLOPs: %s", o.stop,
        (long long)o.step, (long long)o.ckpt, o.flops, o.reason);

  // Wall time: stopped by it, within about a step of it (a slow build's
  // first step may be most of the budget: then one step is all it takes).
  // The rule stops when another step as long as the last would pass the
  // budget, and the last may be much longer than the mean: the job's
  // threads run SCHED_IDLE, and the other tests' processes take the cores.
  o = run(&t, "wall", 1000000, NULL, "budget:\n  max_wall_seconds: 1.5\n");
  double step_s = fmax(o.wall / (double)o.step, o.last);
  CHECK(!strcmp(o.stop, "max_wall") && o.step >= 1 && o.ckpt == o.step && o.wall <= 1.5 + 2 * step_s &&
            o.wall + 2 * step_s > 1.5 && strstr(o.reason, "budget.max_wall_seconds"),
        "max_wall_seconds: %s at step %lld, checkpoint %lld, %.3f s (%.4f s a step, the last %.4f s): %s", o.stop,
        (long long)o.step, (long long)o.ckpt, o.wall, o.wall / (double)o.step, o.last, o.reason);

  // A sentence the model learns, then cannot improve on: the rule stops it
  // and the record keeps the curve (at least window + patience − 1 points).
  const char *sentence = tmp_path("data/sentence.txt");
  FILE *sf = fopen(sentence, "w");
  CHECK(sf, "cannot write %s", sentence);
  for (int i = 0; i < 800; i++) fputs("the cat sat on the mat. ", sf);
  fclose(sf);
  char data[1200];
  snprintf(data, sizeof data, "  train_path: %s\n  eval_path: %s\n  eval_every: 10\n", sentence, sentence);
  o = run(&t, "plateau", 300, data, "budget:\n  gain_tau: 2e-13\n");
  CHECK(!strcmp(o.stop, "marginal_gain") && o.step < 300 && o.ckpt == o.step && o.evals >= 6 &&
        strstr(o.reason, "budget.gain_tau"), "gain_tau: %s at step %lld, checkpoint %lld, %lld evaluations: %s",
        o.stop, (long long)o.step, (long long)o.ckpt, (long long)o.evals, o.reason);

  // Its curve: an SVG that parses, with both losses and the rule's fit.
  const char *svg = tmp_path("plateau.svg");
  CHECK(td_ctl(&t, NULL, 0, "curve %s > %s", o.id, svg) == 0, "trainctl curve %s failed", o.id);
  fflush(stdout);
  CHECK(py_run("-c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
               "n = sum(1 for e in r.iter() if e.tag.endswith(\"polyline\")); sys.exit(0 if n == 5 else n)' %s",
               svg) == 0, "%s does not parse as an SVG with 5 lines (two panels of two losses, and the fit)", svg);
  char text[512];
  td_sh("grep -o 'marginal-gain fit: [^<]*' %s > %s", svg, tmp_path("fit.txt"));
  FILE *ff = fopen(tmp_path("fit.txt"), "r");
  CHECK(ff && fgets(text, sizeof text, ff), "the curve has no fit legend");
  fclose(ff);
  printf("curve: %s", text);

  // Without a budget the job runs its steps, and says nothing of budgets.
  o = run(&t, "plain", 5, NULL, NULL);
  CHECK(!*o.stop && o.step == 5 && o.tokens == 5 * per && strstr(o.reason, "trained to its budget"),
        "plain: %s at step %lld: %s", o.stop, (long long)o.step, o.reason);

  snprintf(budget, sizeof budget, "budget:\n  max_tokens: %lld\n", (long long)(per - 1));
  td_refused(&t, jobfile("small", 10, NULL, budget), "spec.budget.max_tokens");
  td_refused(&t, jobfile("noeval", 10, NULL, "budget:\n  gain_tau: 1e-12\n"), "spec.budget.gain_tau: needs held-out loss");
  td_refused(&t, jobfile("window", 10, NULL, "budget:\n  gain_window: 2\n"), "spec.budget.gain_window");
  td_finish(&t);
  printf("test_e2e_budget: ok\n");
  return 0;
}
