// trainctl list / show / cancel / node.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pbset.h"
#include "trainctl.h"

#define K(x) TRAIND__V1__##x

// Parses a command's flags (own + global) and returns the positional count
// left, or -1 after printing the usage problem.
static int parse(ctl *c, int argc, char **argv, const struct option *own, int (*on_opt)(void *, int, const char *),
                 void *ctx) {
  struct option *opts = ctl_opts(own);
  int opt, bad = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1)
    if (!(on_opt && on_opt(ctx, opt, optarg)) && !ctl_global(c, opt, optarg)) bad = 1;
  free(opts);
  return bad ? -1 : argc - optind;
}

static int one_job(ctl *c, int argc, char **argv, const char *cmd) {
  int n = parse(c, argc, argv, NULL, NULL, NULL);
  if (n != 1) {
    if (n >= 0) fprintf(stderr, "trainctl %s: expected one job id\n", cmd);
    return -1;
  }
  return optind;
}

// One call about one job (req's job_id already set): its reply, or the exit
// code of the failure (reported as trainctl `cmd`).
static int job_call(ctl *c, const char *cmd, const char *method, ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *resp, ProtobufCMessage **reply) {
  rpc *r = ctl_rpc(c);
  if (!r) return EXIT_UNREACHABLE;
  char path[64];
  snprintf(path, sizeof path, "/traind.v1.Trainer/%s", method);
  rpc_status st;
  if (rpc_unary(r, path, req, resp, reply, c->timeout_ms, &st)) return ctl_fail(cmd, &st);
  return EXIT_OK;
}

static void print_job(const Traind__V1__Job *j) {
  char created[64], started[64], finished[64], eta[32];
  ctl_fmt_time(j->created_ms, created, sizeof created);
  ctl_fmt_time(j->started_ms, started, sizeof started);
  ctl_fmt_time(j->finished_ms, finished, sizeof finished);
  const Traind__V1__Progress *p = j->progress;
  printf("job        %s%s%s\n", j->id, j->spec && *j->spec->name ? "  " : "", j->spec ? j->spec->name : "");
  printf("state      %s%s%s\n", ctl_state_name(j->state), *j->error ? ": " : "", j->error);
  printf("priority   %d%s\n", j->priority, j->preempt ? " (preempts lower priorities)" : "");
  printf("owner      %s\n", *j->owner ? j->owner : "(recorded before owners were)");
  printf("device     %s   attempts %d", j->device, j->attempts);
  if (j->crashes) printf("   the daemon died while running it %d time%s", j->crashes, j->crashes == 1 ? "" : "s");
  printf("\n");
  printf("created    %s   started %s   finished %s\n", created, started, finished);
  if (j->model)
    printf("model      %s, %d layers, hidden %d, vocab %d, %lld parameters\n",
           protobuf_c_enum_descriptor_get_value(&traind__v1__arch__descriptor, j->model->arch)
               ? protobuf_c_enum_descriptor_get_value(&traind__v1__arch__descriptor, j->model->arch)->name + 5
               : "?",
           j->model->num_hidden_layers, j->model->hidden_size, j->model->vocab_size, (long long)j->parameters);
  if (p) {
    ctl_fmt_duration(p->eta_s, eta, sizeof eta);
    printf("progress   step %lld of %lld, loss %.4f", (long long)p->step, (long long)p->total_steps, p->loss);
    if (!isnan(p->eval_loss) && p->eval_loss != 0) printf(", eval %.4f", p->eval_loss);
    printf(", %.0f tokens/s", p->tokens_per_s);
    if (j->state == K(JOB_STATE__JOB_STATE_RUNNING)) printf(", ETA %s", eta);
    printf("\n");
  }
  const Traind__V1__Compute *cp = j->compute;
  if (cp) {
    char wall[32];
    ctl_fmt_duration(cp->wall_seconds, wall, sizeof wall);
    printf("compute    %lld tokens (%lld counted), %.3g model FLOPs (%.3g executed), %s", (long long)cp->tokens,
           (long long)cp->counted_tokens, cp->model_flops, cp->executed_flops, wall);
    if (!isnan(cp->mfu)) printf(", MFU %.1f%% of %.3g FLOP/s", 100.0 * cp->mfu, cp->peak_flops);
    printf("\n");
    if (*cp->stop_reason) printf("stopped by %s after %zu evaluation%s\n", cp->stop_reason, cp->n_evals,
                                 cp->n_evals == 1 ? "" : "s");
  }
  const Traind__V1__BudgetSpec *b = j->spec ? j->spec->budget : NULL;
  if (b) {
    printf("budget    ");
    if (b->max_tokens) printf(" tokens %lld", (long long)b->max_tokens);
    if (b->max_flops > 0) printf(" FLOPs %.3g", b->max_flops);
    if (b->max_wall_seconds > 0) printf(" wall %gs", b->max_wall_seconds);
    if (b->gain_tau > 0) printf(" gain_tau %.3g", b->gain_tau);
    if (b->gl_alpha > 0) printf(" gl_alpha %g", b->gl_alpha);
    printf("\n");
  }
  printf("checkpoint %s", j->checkpoint_step >= 0 ? "" : "none yet");
  if (j->checkpoint_step >= 0) printf("step %lld", (long long)j->checkpoint_step);
  printf("\nevents     %llu (trainctl logs %s)\n", (unsigned long long)j->last_seq, j->id);
}

int cmd_show(ctl *c, int argc, char **argv) {
  int i = one_job(c, argc, argv, "show");
  if (i < 0) return EXIT_USAGE;
  Traind__V1__GetJobRequest req = K(GET_JOB_REQUEST__INIT);
  req.job_id = argv[i];
  ProtobufCMessage *reply;
  int rc = job_call(c, "show", "GetJob", &req.base, &traind__v1__job__descriptor, &reply);
  if (rc) return rc;
  if (c->json) ctl_print_json(reply);
  else print_job((Traind__V1__Job *)reply);
  protobuf_c_message_free_unpacked(reply, NULL);
  return EXIT_OK;
}

static int timeline_opt(void *ctx, int opt, const char *arg) {
  (void)arg;
  if (opt != 'p') return 0;
  *(int *)ctx = 1;
  return 1;
}

int cmd_timeline(ctl *c, int argc, char **argv) {
  static const struct option own[] = {{"predicted", 0, 0, 'p'}, {0, 0, 0, 0}};
  int predicted = 0, n = parse(c, argc, argv, own, timeline_opt, &predicted);
  if (n != 1) {
    if (n >= 0) fprintf(stderr, "trainctl timeline: expected one job id\n");
    return EXIT_USAGE;
  }
  Traind__V1__GetTimelineRequest req = K(GET_TIMELINE_REQUEST__INIT);
  req.job_id = argv[optind];
  ProtobufCMessage *reply;
  int rc = job_call(c, "timeline", "GetTimeline", &req.base, &traind__v1__timeline__descriptor, &reply);
  if (rc) return rc;
  const Traind__V1__Timeline *t = (const Traind__V1__Timeline *)reply;
  const char *svg = predicted ? t->predicted_svg : t->measured_svg;
  if (c->json) {
    ctl_print_json(reply);
  } else if (!*svg) {
    fprintf(stderr, "trainctl timeline: job %s has %s\n", t->job_id,
            predicted ? "no predicted step (it was not planned since the daemon started)"
                      : "no measured step since the daemon started");
    rc = EXIT_REFUSED;
  } else {
    fputs(svg, stdout);
  }
  protobuf_c_message_free_unpacked(reply, NULL);
  return rc;
}

int cmd_cancel(ctl *c, int argc, char **argv) {
  int i = one_job(c, argc, argv, "cancel");
  if (i < 0) return EXIT_USAGE;
  Traind__V1__CancelJobRequest req = K(CANCEL_JOB_REQUEST__INIT);
  req.job_id = argv[i];
  ProtobufCMessage *reply;
  int rc = job_call(c, "cancel", "CancelJob", &req.base, &traind__v1__job__descriptor, &reply);
  if (rc) return rc;
  if (c->json) ctl_print_json(reply);
  else printf("%s %s\n", ((Traind__V1__Job *)reply)->id, ctl_state_name(((Traind__V1__Job *)reply)->state));
  protobuf_c_message_free_unpacked(reply, NULL);
  return EXIT_OK;
}

typedef struct list_opts {
  Traind__V1__ListJobsRequest *req;
  long limit;
  int bad;
} list_opts;

static int list_opt(void *ctx, int opt, const char *arg) {
  list_opts *l = ctx;
  char err[256], name[64];
  switch (opt) {
  case 's':
    snprintf(name, sizeof name, "%s", arg);
    if (pbset(&l->req->base, "states", name, err, sizeof err)) {
      fprintf(stderr, "trainctl list: --state %s: not a job state (queued, running, succeeded, ...)\n", arg);
      l->bad = 1;
    }
    return 1;
  case 'l': l->limit = strtol(arg, NULL, 10); return 1;
  case 'a': l->limit = -1; return 1;
  }
  return 0;
}

int cmd_list(ctl *c, int argc, char **argv) {
  static const struct option own[] = {
      {"state", required_argument, 0, 's'}, {"limit", required_argument, 0, 'l'}, {"all", no_argument, 0, 'a'}, {0, 0, 0, 0}};
  list_opts l = {(Traind__V1__ListJobsRequest *)pbset_new(&traind__v1__list_jobs_request__descriptor), 50, 0};
  int n = parse(c, argc, argv, own, list_opt, &l);
  int rc = EXIT_OK;
  rpc *r = NULL;
  if (n != 0 || l.bad || l.limit == 0) {
    if (n > 0) fprintf(stderr, "trainctl list: unexpected argument \"%s\"\n", argv[optind]);
    rc = EXIT_USAGE;
  } else if (!(r = ctl_rpc(c))) {
    rc = EXIT_UNREACHABLE;
  }
  if (!c->json && !rc) printf("%-12s %-11s %5s %15s %8s  %-19s  %s\n", "JOB", "STATE", "PRIO", "STEP", "LOSS", "CREATED", "NAME");
  long shown = 0;
  char token[80] = "";
  while (!rc) {
    l.req->page_size = l.limit > 0 && l.limit - shown < 1000 ? (int)(l.limit - shown) : 1000;
    l.req->page_token = token;
    l.req->include_spec = 1;
    ProtobufCMessage *reply;
    rpc_status st;
    rc = rpc_unary(r, "/traind.v1.Trainer/ListJobs", &l.req->base, &traind__v1__list_jobs_response__descriptor, &reply,
                   c->timeout_ms, &st);
    l.req->page_token = NULL; // points at token, not to be freed
    if (rc) {
      rc = ctl_fail("list", &st);
      break;
    }
    Traind__V1__ListJobsResponse *resp = (Traind__V1__ListJobsResponse *)reply;
    for (size_t i = 0; i < resp->n_jobs; i++, shown++) {
      const Traind__V1__Job *j = resp->jobs[i];
      if (c->json) {
        ctl_print_json(&j->base);
        continue;
      }
      char created[64], step[40];
      ctl_fmt_time(j->created_ms, created, sizeof created);
      snprintf(step, sizeof step, "%lld/%lld", (long long)(j->progress ? j->progress->step : 0),
               (long long)(j->progress ? j->progress->total_steps : 0));
      printf("%-12s %-11s %5d %15s %8.4f  %-19s  %s\n", j->id, ctl_state_name(j->state), j->priority, step,
             j->progress ? j->progress->loss : 0.0, created, j->spec ? j->spec->name : "");
    }
    snprintf(token, sizeof token, "%s", resp->next_page_token);
    protobuf_c_message_free_unpacked(reply, NULL);
    if (!*token || (l.limit > 0 && shown >= l.limit)) break;
  }
  l.req->page_token = NULL;
  protobuf_c_message_free_unpacked(&l.req->base, NULL);
  return rc;
}

int cmd_node(ctl *c, int argc, char **argv) {
  if (parse(c, argc, argv, NULL, NULL, NULL) != 0) return EXIT_USAGE;
  rpc *r = ctl_rpc(c);
  if (!r) return EXIT_UNREACHABLE;
  Traind__V1__GetNodeRequest req = K(GET_NODE_REQUEST__INIT);
  ProtobufCMessage *reply;
  rpc_status st;
  if (rpc_unary(r, "/traind.v1.Trainer/GetNode", &req.base, &traind__v1__node__descriptor, &reply, c->timeout_ms, &st))
    return ctl_fail("node", &st);
  Traind__V1__Node *n = (Traind__V1__Node *)reply;
  if (c->json) {
    ctl_print_json(reply);
  } else {
    char started[64];
    ctl_fmt_time(n->started_ms, started, sizeof started);
    printf("traind %s on %s, up since %s\n%d running, %d queued\n", n->version, n->hostname, started, n->running, n->queued);
    for (size_t i = 0; i < n->n_devices; i++) {
      const Traind__V1__Device *d = n->devices[i];
      printf("device %-6s %s%s  %s%s%s\n", d->name, d->usable ? "usable" : "not usable", "", d->description,
             *d->running_job ? "  running " : "", d->running_job);
    }
    for (size_t i = 0; i < n->n_data_roots; i++) printf("data root %s\n", n->data_roots[i]);
    if (*n->engine_note) printf("note: %s\n", n->engine_note);
  }
  protobuf_c_message_free_unpacked(reply, NULL);
  return EXIT_OK;
}
