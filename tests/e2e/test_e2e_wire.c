// What the decoded message cannot show, against a real daemon: a string
// with an embedded NUL byte ("<id>\0x" would read as "<id>") is refused
// with INVALID_ARGUMENT naming the field, at the top level and nested;
// submissions beyond max_queued_jobs get RESOURCE_EXHAUSTED, and the queue
// takes more once it drains.
#define _GNU_SOURCE
#include "e2e/daemon.h"
#include "jobfile.h"
#include "pbset.h"

static td t;

static int raw(const char *method, const uint8_t *bytes, size_t n, rpc_status *st) {
  void *reply = NULL;
  size_t rn;
  int rc = rpc_unary_raw(t.r, method, bytes, n, &reply, &rn, 10000, st);
  free(reply);
  return rc;
}

int main(void) {
  td_init(&t);
  td_set(&t, "max_queued_jobs=2");
  td_start(&t);
  const char *file = td_jobfile("long.yaml", 1000000, 1000, NULL);
  char a[80];
  snprintf(a, sizeof a, "%s", td_submit(&t, file, NULL));
  td_wait_step(&t, a, 1, 120);

  // GetJob of "<a>\0x": field 1, length-delimited.
  uint8_t get[128];
  size_t idn = strlen(a);
  get[0] = 0x0a;
  get[1] = (uint8_t)(idn + 2);
  memcpy(get + 2, a, idn);
  memcpy(get + 2 + idn, "\0x", 2);
  rpc_status st;
  int rc = raw("/traind.v1.Trainer/GetJob", get, idn + 4, &st);
  CHECK(rc == GRPC_STATUS_INVALID_ARGUMENT && strstr(st.msg, "job_id: contains a NUL byte"),
        "GetJob \"%s\\0x\": %s %s", a, rpc_code_name(st.code), st.msg);

  // A SubmitJob whose spec.name is "nul-here" with a NUL for its '-'.
  Traind__V1__SubmitJobRequest *r = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  char err[512];
  CHECK(jobfile_load(r, file, err, sizeof err) == 0, "%s", err);
  free(r->spec->name);
  r->spec->name = strdup("nul-here");
  size_t n = protobuf_c_message_get_packed_size(&r->base);
  uint8_t *b = malloc(n);
  protobuf_c_message_pack(&r->base, b);
  uint8_t *at = memmem(b, n, "nul-here", 8);
  CHECK(at, "packed request lacks the name");
  at[3] = 0;
  rc = raw("/traind.v1.Trainer/SubmitJob", b, n, &st);
  CHECK(rc == GRPC_STATUS_INVALID_ARGUMENT && strstr(st.msg, "spec.name: contains a NUL byte"),
        "SubmitJob with a NUL in spec.name: %s %s", rpc_code_name(st.code), st.msg);
  free(b);
  protobuf_c_message_free_unpacked(&r->base, NULL);

  // The queue limit: a runs, two queue, the third is refused.
  char q1[80], q2[80], out[4096];
  snprintf(q1, sizeof q1, "%s", td_submit(&t, td_jobfile("q1.yaml", 4, 2, NULL), NULL));
  snprintf(q2, sizeof q2, "%s", td_submit(&t, td_jobfile("q2.yaml", 4, 2, NULL), NULL));
  const char *q3 = td_jobfile("q3.yaml", 4, 2, NULL);
  FILE *p;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "TRAIND_ADDR=%s %s submit %s 2>&1", t.sock, t.bin_trainctl, q3);
  CHECK((p = popen(cmd, "r")), "popen");
  out[fread(out, 1, sizeof out - 1, p)] = 0;
  rc = pclose(p);
  CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) != 0 && strstr(out, "RESOURCE_EXHAUSTED") &&
            strstr(out, "2 jobs are queued, the limit (max_queued_jobs)"),
        "a third queued job: exit %d: %s", WEXITSTATUS(rc), out);
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", a) == 0, "cancel %s", a);
  td_wait_success(&t, q1, 120);
  char q3id[80];
  snprintf(q3id, sizeof q3id, "%s", td_submit(&t, q3, NULL));
  td_wait_success(&t, q3id, 120);
  printf("NUL bytes refused (job_id, spec.name); the third queued job refused: %s", out);
  td_finish(&t);
  return 0;
}
