// libFuzzer target over what bad bytes on the wire reach in the daemon:
// protobuf-c decoding of every request type and the daemon's validation of
// it (daemon/validate.c), with real data roots, files and a symlink that
// escapes them. The first byte picks the request type. Built with clang
// -fsanitize=fuzzer,address,undefined by daemon/CMakeLists.txt and run for a
// bounded time by ctest (label fuzz) from the seeds in tests/fuzz/seeds.
#define _GNU_SOURCE
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "grpc/health/v1/health.pb-c.h"
#include "validate.h"

static char root[64];
static char *roots[1];
static val_roots vr;

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void cleanup(void) { nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(root, sizeof root, "/tmp/traind-fuzz-XXXXXX");
  if (!mkdtemp(root)) abort();
  char p[128], q[128];
  snprintf(p, sizeof p, "%s/train.txt", root);
  FILE *f = fopen(p, "w");
  if (!f) abort();
  fputs("some training text\n", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/model", root);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/escape", root);
  symlink("/etc", p);
  snprintf(q, sizeof q, "%s/loop", root);
  symlink(q, q);
  roots[0] = realpath(root, NULL);
  atexit(cleanup);
  vr = (val_roots){roots, 1};
  return 0;
}

static const ProtobufCMessageDescriptor *types[] = {
    &traind__v1__submit_job_request__descriptor, &traind__v1__list_jobs_request__descriptor,
    &traind__v1__watch_job_request__descriptor,  &traind__v1__export_job_request__descriptor,
    &traind__v1__get_job_request__descriptor,    &traind__v1__plan_job_request__descriptor,
    &grpc__health__v1__health_check_request__descriptor, &traind__v1__score_data_request__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *d = types[data[0] % (sizeof types / sizeof types[0])];
  val_err e;
  // As the server does: the bytes first, then the decoded message.
  if (val_wire(d, data + 1, size - 1, &e)) {
    if (strlen(e.msg) == 0 || strlen(e.msg) >= sizeof e.msg) abort();
    return 0;
  }
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
  if (!m) return 0;
  int rc = 0;
  if (d == &traind__v1__submit_job_request__descriptor) {
    Traind__V1__SubmitJobRequest *r = (Traind__V1__SubmitJobRequest *)m;
    rc = val_submit_head(r, &e);
    if (!rc) rc = val_submit(r, &vr, &e);
  } else if (d == &traind__v1__list_jobs_request__descriptor) {
    rc = val_list((Traind__V1__ListJobsRequest *)m, &e);
  } else if (d == &traind__v1__watch_job_request__descriptor) {
    rc = val_watch((Traind__V1__WatchJobRequest *)m, &e);
  } else if (d == &traind__v1__export_job_request__descriptor) {
    rc = val_export((Traind__V1__ExportJobRequest *)m, &e);
  } else if (d == &traind__v1__score_data_request__descriptor) {
    rc = val_score((Traind__V1__ScoreDataRequest *)m, &e);
  } else if (d == &traind__v1__plan_job_request__descriptor) {
    rc = val_message(m, "", &e);
    if (!rc) rc = val_plan_sizing((Traind__V1__PlanJobRequest *)m, &e);
    if (!rc) rc = val_spec(((Traind__V1__PlanJobRequest *)m)->spec, "spec", &vr, &e);
  } else {
    rc = val_message(m, "", &e);
    if (!rc && d == &traind__v1__get_job_request__descriptor) rc = val_id(((Traind__V1__GetJobRequest *)m)->job_id, "job_id", &e);
  }
  // A refusal must say something, and what it says must be a C string.
  if (rc && (strlen(e.msg) == 0 || strlen(e.msg) >= sizeof e.msg)) abort();
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
