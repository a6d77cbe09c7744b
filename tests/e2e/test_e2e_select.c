// Data selection through a real daemon (spec.select, DESIGN §8): a job that
// selects online spends its scoring passes against its FLOP budget and
// says so in its record; one trains on a percentile band of a scores file
// that trainctl score wrote through the daemon (ScoreData); a wrong
// rule, a missing reference, a band file outside the data roots and an empty
// band are refused at submit, by field.
#define _GNU_SOURCE
#include <math.h>

#include "compute/flops.h"
#include "e2e/daemon.h"
#include "tiny.h"

static const char *jobfile(const char *name, const char *tail) {
  char file[64];
  snprintf(file, sizeof file, "%s.yaml", name);
  return td_jobfile(file, 40, 1000000, tail);
}

int main(void) {
  td t;
  td_init(&t);
  td_start(&t);
  eng_spec s;
  tiny_spec(&s, 2);
  eng_step_flops f;
  eng_err e = {0};
  CHECK_OK(eng_flops_step(&s.config, 4, 64, 0, 0, &f, &e), &e);

  // Online, a pool of 2 batches: a step costs its own FLOPs and two thirds
  // of them again.
  char tail[512];
  snprintf(tail, sizeof tail, "budget:\n  max_flops: %.17g\nselect:\n  rule: dynamics\n  pool: 2\n", 12.5 * f.model);
  const char *id = td_submit(&t, jobfile("online", tail), NULL);
  char jid[80];
  snprintf(jid, sizeof jid, "%s", id);
  Traind__V1__Job *j = td_wait_done(&t, jid, 600);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED && j->compute, "online: ended %d: %s", j->state,
        j->error);
  int64_t steps = j->progress->step;
  double spent = j->compute->model_flops, want = steps * f.model * 5.0 / 3.0;
  CHECK(steps == 7 && fabs(spent / want - 1) < 1e-9 && !strcmp(j->compute->stop_reason, "max_flops") &&
            j->checkpoint_step == steps,
        "online: %lld steps, %.6g model FLOPs (%.6g with scoring), stopped by \"%s\", checkpoint %lld", (long long)steps,
        spent, want, j->compute->stop_reason, (long long)j->checkpoint_step);
  printf("online: dynamics, pool 2: %lld steps for %.4g model FLOPs, scoring counted\n", (long long)steps, spent);
  protobuf_c_message_free_unpacked(&j->base, NULL);

  // Offline: a model (the tiny one, untrained, as a Hugging Face directory)
  // scores the demo text through trainctl score; the job trains on the
  // lower half of the scores.
  eng_run *r;
  CHECK_OK(eng_open(&s, &r, &e), &e);
  const char *model = tmp_path("data/model");
  CHECK_OK(eng_export_hf(r, model, 0, &e), &e);
  eng_close(r);
  const char *scores = tmp_path("data/scores.txt");
  char out[4096];
  CHECK(td_ctl(&t, out, sizeof out, "score --model-dir %s --data %s --seq 64 --batch 4 --out %s 2>&1", model,
               s.train_path, scores) == 0, "trainctl score failed: %s", out);
  CHECK(strstr(out, "2899 samples scored"), "trainctl score said: %s", out);
  FILE *sf = fopen(scores, "r");
  char head[128];
  CHECK(sf && fgets(head, sizeof head, sf) && !strcmp(head, "# traind scores v1 samples 2899 seq_len 64\n"),
        "the scores file starts: %s", head);
  fclose(sf);
  CHECK(td_ctl(&t, out, sizeof out, "score --model-dir %s --data /etc/hostname --seq 64 2>&1", model) != 0 &&
            strstr(out, "data_path"), "scoring a file outside the roots: %s", out);
  snprintf(tail, sizeof tail, "select:\n  band_file: %s\n  band_lo: 0\n  band_hi: 50\n", scores);
  snprintf(jid, sizeof jid, "%s", td_submit(&t, jobfile("band", tail), NULL));
  j = td_wait_done(&t, jid, 600);
  CHECK(j->state == TRAIND__V1__JOB_STATE__JOB_STATE_SUCCEEDED && j->progress->step == 40, "band: ended %d at %lld: %s",
        j->state, (long long)j->progress->step, j->error);
  protobuf_c_message_free_unpacked(&j->base, NULL);
  printf("offline: 40 steps on the lower half of the demo text's scores\n");

  td_refused(&t, jobfile("rule", "select:\n  rule: hardest\n"), "spec.select.rule");
  td_refused(&t, jobfile("noref", "select:\n  rule: reducible\n"), "spec.select.reference");
  td_refused(&t, jobfile("outside", "select:\n  band_file: /etc/hostname\n  band_hi: 50\n"), "spec.select.band_file");
  snprintf(tail, sizeof tail, "select:\n  band_file: %s\n  band_lo: 60\n  band_hi: 50\n", scores);
  td_refused(&t, jobfile("empty", tail), "spec.select.band");
  td_finish(&t);
  printf("test_e2e_select: ok\n");
  return 0;
}
