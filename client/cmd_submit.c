// trainctl submit / plan: a SubmitJobRequest from a job file and flags.
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "jobfile.h"
#include "pbset.h"
#include "trainctl.h"

#define K(x) TRAIND__V1__##x

// The flags for common fields and the path each sets.
static const struct {
  const char *flag, *path;
} field_flags[] = {
    {"name", "spec.name"},          {"model-dir", "spec.model.hf_dir"}, {"data", "spec.data.train_path"},
    {"eval", "spec.data.eval_path"}, {"steps", "spec.training.steps"}, {"tokens", "spec.training.tokens"},
    {"batch", "spec.training.batch_size"}, {"seq", "spec.training.seq_len"}, {"lr", "spec.training.lr"},
    {"checkpoint-every", "spec.checkpoints.every_steps"}, {"keep", "spec.checkpoints.keep"},
    {"priority", "priority"}, {"request-id", "request_id"}, {"seed", "spec.seed"},
};
enum {
  N_FIELD_FLAGS = sizeof field_flags / sizeof field_flags[0],
  OPT_PREEMPT = 2000, OPT_SET, OPT_WATCH, OPT_FLOPS, OPT_GPU_HOURS, OPT_FIT
};

// plan's sizing flags (PlanJobRequest.flops, gpu_hours, fit).
typedef struct sizing_flags {
  double flops, gpu_hours;
  const char *fit;
} sizing_flags;

static int is_path_field(const char *path) {
  return !strcmp(path, "spec.model.hf_dir") || !strcmp(path, "spec.data.train_path") ||
         !strcmp(path, "spec.data.eval_path");
}

// A random request id, so that the retries below are idempotent.
static void request_id_make(char *out, size_t n) {
  unsigned char b[12];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
    for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(rand() ^ getpid());
  }
  size_t k = (size_t)snprintf(out, n, "tc-");
  for (size_t i = 0; i < sizeof b && k + 2 < n; i++) k += (size_t)snprintf(out + k, n - k, "%02x", b[i]);
}

// Parses the job file and flags into *out. Returns an exit code (OK: built).
// watch: submit's --watch (NULL: refused); sz: plan's sizing flags (NULL: refused).
static int build(int argc, char **argv, Traind__V1__SubmitJobRequest **out, ctl *c, int *watch, sizing_flags *sz) {
  struct option own[N_FIELD_FLAGS + 7];
  for (int i = 0; i < N_FIELD_FLAGS; i++) own[i] = (struct option){field_flags[i].flag, required_argument, 0, i};
  own[N_FIELD_FLAGS] = (struct option){"preempt", no_argument, 0, OPT_PREEMPT};
  own[N_FIELD_FLAGS + 1] = (struct option){"set", required_argument, 0, OPT_SET};
  own[N_FIELD_FLAGS + 2] = (struct option){"watch", no_argument, 0, OPT_WATCH};
  own[N_FIELD_FLAGS + 3] = (struct option){"flops", required_argument, 0, OPT_FLOPS};
  own[N_FIELD_FLAGS + 4] = (struct option){"gpu-hours", required_argument, 0, OPT_GPU_HOURS};
  own[N_FIELD_FLAGS + 5] = (struct option){"fit", required_argument, 0, OPT_FIT};
  own[N_FIELD_FLAGS + 6] = (struct option){0, 0, 0, 0};
  struct option *opts = ctl_opts(own);
  Traind__V1__SubmitJobRequest *req = (Traind__V1__SubmitJobRequest *)pbset_new(&traind__v1__submit_job_request__descriptor);
  // Flags apply after the job file: collect them first.
  const char *sets[256][2];
  int n_sets = 0, opt, rc = EXIT_OK;
  char err[1024];
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (opt >= 0 && opt < N_FIELD_FLAGS) {
      if (n_sets < 256) sets[n_sets][0] = field_flags[opt].path, sets[n_sets++][1] = optarg;
    } else if (opt == OPT_PREEMPT) {
      if (n_sets < 256) sets[n_sets][0] = "preempt", sets[n_sets++][1] = "true";
    } else if (opt == OPT_SET) {
      char *eq = strchr(optarg, '=');
      if (!eq) {
        fprintf(stderr, "trainctl: --set %s: expected KEY=VALUE\n", optarg);
        rc = EXIT_USAGE;
        goto out;
      }
      *eq = 0;
      static char keys[256][512];
      if (n_sets < 256) {
        jobfile_key_path(optarg, keys[n_sets], sizeof keys[0]);
        sets[n_sets][0] = keys[n_sets], sets[n_sets++][1] = eq + 1;
      }
    } else if (opt == OPT_WATCH && watch) {
      *watch = 1;
    } else if ((opt == OPT_FLOPS || opt == OPT_GPU_HOURS || opt == OPT_FIT) && sz) {
      char *end = NULL;
      double v = opt == OPT_FIT ? 0 : strtod(optarg, &end);
      if (opt != OPT_FIT && (end == optarg || *end || !(v > 0))) {
        fprintf(stderr, "trainctl: --%s %s: expected a positive number\n", opt == OPT_FLOPS ? "flops" : "gpu-hours",
                optarg);
        rc = EXIT_USAGE;
        goto out;
      }
      if (opt == OPT_FLOPS) sz->flops = v;
      else if (opt == OPT_GPU_HOURS) sz->gpu_hours = v;
      else sz->fit = optarg;
    } else if (opt == OPT_FLOPS || opt == OPT_GPU_HOURS || opt == OPT_FIT) {
      fprintf(stderr, "trainctl: --flops, --gpu-hours and --fit are plan's\n");
      rc = EXIT_USAGE;
      goto out;
    } else if (!ctl_global(c, opt, optarg)) {
      rc = EXIT_USAGE;
      goto out;
    }
  }
  if (optind < argc - 1) {
    fprintf(stderr, "trainctl: expected at most one job file, got \"%s\" and \"%s\"\n", argv[optind], argv[optind + 1]);
    rc = EXIT_USAGE;
    goto out;
  }
  if (optind == argc - 1) {
    const char *file = argv[optind];
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    char *base = realpath(dirname(dir), NULL);
    if (jobfile_load(req, file, err, sizeof err) || jobfile_abs_paths(req, base ? base : ".", err, sizeof err)) {
      fprintf(stderr, "trainctl: %s\n", err);
      free(base);
      rc = EXIT_USAGE;
      goto out;
    }
    free(base);
  }
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, ".");
  for (int i = 0; i < n_sets; i++) {
    char abs[8300];
    const char *v = sets[i][1];
    if (is_path_field(sets[i][0]) && v[0] != '/') { // relative to where trainctl runs
      snprintf(abs, sizeof abs, "%s/%s", cwd, v);
      v = abs;
    }
    if (pbset(&req->base, sets[i][0], v, err, sizeof err)) {
      fprintf(stderr, "trainctl: %s\n", err);
      rc = EXIT_USAGE;
      goto out;
    }
  }
  if (!*req->request_id) {
    char id[64];
    request_id_make(id, sizeof id);
    pbset(&req->base, "request_id", id, err, sizeof err);
  }
out:
  free(opts);
  if (rc) protobuf_c_message_free_unpacked(&req->base, NULL);
  else *out = req;
  return rc;
}

int cmd_submit(ctl *c, int argc, char **argv) {
  Traind__V1__SubmitJobRequest *req;
  int watch = 0;
  int rc = build(argc, argv, &req, c, &watch, NULL);
  if (rc) return rc;
  rpc *r = ctl_rpc(c);
  if (!r) {
    protobuf_c_message_free_unpacked(&req->base, NULL);
    return EXIT_UNREACHABLE;
  }
  // The request id makes retries safe: the daemon returns the job the
  // first attempt created, even when that attempt's answer was lost.
  rpc_status st;
  ProtobufCMessage *reply = NULL;
  for (int attempt = 0;; attempt++) {
    rc = rpc_unary(r, "/traind.v1.Trainer/SubmitJob", &req->base, &traind__v1__submit_job_response__descriptor,
                   &reply, c->timeout_ms, &st);
    if (!(rc == GRPC_STATUS_UNAVAILABLE || rc == GRPC_STATUS_DEADLINE_EXCEEDED) || attempt == 4) break;
    fprintf(stderr, "trainctl: submit: %s (%s); retrying with the same request id\n", rpc_code_name(st.code), st.msg);
    usleep(200000u << attempt);
  }
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (rc) return ctl_fail("submit", &st);
  Traind__V1__SubmitJobResponse *resp = (Traind__V1__SubmitJobResponse *)reply;
  if (c->json) ctl_print_json(reply);
  else printf("%s\n", resp->job->id);
  fflush(stdout);
  if (!resp->created) fprintf(stderr, "trainctl: the request id matched an earlier submission: job %s\n", resp->job->id);
  char id[80];
  snprintf(id, sizeof id, "%s", resp->job->id);
  protobuf_c_message_free_unpacked(reply, NULL);
  return watch ? ctl_follow(c, id, 0, 1, !c->json && isatty(STDOUT_FILENO)) : EXIT_OK;
}

// The sizing part of a PlanJob answer, for a person.
static void print_sizing(const Traind__V1__Sizing *z, const Traind__V1__PlanJobResponse *r) {
  char wall[32];
  ctl_fmt_duration(z->wall_seconds, wall, sizeof wall);
  printf("compute-optimal for %.3g FLOPs (fit %s): %.3g parameters, %.3g tokens (%.1f per parameter), loss %.4f\n",
         z->flops, z->fit, z->params_optimal, z->tokens_optimal, z->tokens_optimal / z->params_optimal, z->loss_optimal);
  for (size_t i = 0; i < z->n_skipped; i++) printf("  does not fit this machine: %s\n", z->skipped[i]);
  const Traind__V1__ModelConfig *m = z->model;
  printf("nearest that fits: %s, %.3g parameters (hidden %d, %d layers, %d heads, %d KV heads, head_dim %d, MLP %d, "
         "vocab %d%s)\n", z->shape, z->params, m->hidden_size, m->num_hidden_layers, m->num_attention_heads,
         m->num_key_value_heads, m->head_dim, m->intermediate_size, m->vocab_size,
         m->tie_word_embeddings ? ", tied" : "");
  printf("  %.3g tokens = %lld steps of this job's batch, predicted loss %.4f, %s at %.0f tokens/s (profile %s)\n",
         z->tokens, (long long)z->steps, z->loss, wall, r->tokens_per_s, r->profile);
}

int cmd_plan(ctl *c, int argc, char **argv) {
  Traind__V1__SubmitJobRequest *req;
  sizing_flags sz = {0};
  int rc = build(argc, argv, &req, c, NULL, &sz);
  if (rc) return rc;
  rpc *r = ctl_rpc(c);
  Traind__V1__PlanJobRequest plan = K(PLAN_JOB_REQUEST__INIT);
  plan.spec = req->spec;
  plan.flops = sz.flops;
  plan.gpu_hours = sz.gpu_hours;
  plan.fit = (char *)(sz.fit ? sz.fit : "");
  rpc_status st;
  ProtobufCMessage *reply = NULL;
  rc = r ? rpc_unary(r, "/traind.v1.Trainer/PlanJob", &plan.base, &traind__v1__plan_job_response__descriptor, &reply,
                     c->timeout_ms, &st)
         : -1;
  protobuf_c_message_free_unpacked(&req->base, NULL);
  if (rc < 0) return EXIT_UNREACHABLE;
  if (rc) return ctl_fail("plan", &st);
  const Traind__V1__PlanJobResponse *pr = (const Traind__V1__PlanJobResponse *)reply;
  if (c->json) {
    ctl_print_json(reply);
  } else {
    if (pr->sizing) print_sizing(pr->sizing, pr);
    printf("%s\n", pr->summary);
  }
  protobuf_c_message_free_unpacked(reply, NULL);
  return EXIT_OK;
}
