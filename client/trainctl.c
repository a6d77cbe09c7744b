// trainctl: global options, the command table, helpers shared by commands.
#include "trainctl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pbjson.h"

#define TRAINCTL_DEFAULT_ADDR "/run/traind/traind.sock"

static void usage(FILE *f) {
  fprintf(f,
          "usage: trainctl [global options] COMMAND [options] [args]\n"
          "The command line client of traind (the training daemon).\n"
          "\n"
          "commands:\n"
          "  submit [JOBFILE] [flags]   queue a job from a YAML job file and/or flags; prints its id\n"
          "        --name S --model-dir DIR --data PATH --eval PATH --steps N --tokens N --batch N\n"
          "        --seq N --lr X --checkpoint-every N --keep N --priority N --preempt\n"
          "        --request-id ID (default: a random one; retries reuse it) --set KEY=VALUE\n"
          "        (KEY as in the job file, e.g. training.warmup_steps) --watch (then follow it)\n"
          "  list [--state S]... [--limit N | --all]   jobs, newest first\n"
          "  show JOB                   one job in full\n"
          "  watch JOB [--from SEQ]     follow a job: a live line (progress towards whichever of its\n"
          "                             steps and budgets it reaches first, ETA, loss, tokens/s,\n"
          "                             phases, FLOPs, MFU)\n"
          "                             on a terminal, one line per event otherwise\n"
          "  cancel JOB                 cancel a queued or running job\n"
          "  logs JOB [--follow]        a job's events so far (and then new ones with --follow)\n"
          "  plan [JOBFILE] [flags]     the plan a job would run with (flags as for submit)\n"
          "       [--flops F | --gpu-hours H] [--fit NAME]   instead of the job's model: the\n"
          "                             compute-optimal parameters and tokens for F training FLOPs\n"
          "                             (or H hours of this machine) under a scaling-law fit\n"
          "                             (chinchilla, the default; besiroglu; or E,A,B,alpha,beta),\n"
          "                             and the nearest Qwen3-shaped model (the job's vocabulary)\n"
          "                             that fits, with its plan and predicted wall time\n"
          "  export JOB DIR [--step N] [--bf16]   write a checkpoint's model as a Hugging Face dir\n"
          "  timeline JOB [--predicted] a job's last measured step as an SVG timeline (compute,\n"
          "                             copies in and out, store, optimizer) on stdout; its plan's\n"
          "                             predicted step with --predicted\n"
          "  curve JOB                  a job's training and held-out loss against tokens and model\n"
          "                             FLOPs as an SVG on stdout, with its stopping rule's fit\n"
          "  score --model-dir DIR --data PATH --seq N [--batch B] [--out FILE]\n"
          "                             a model's mean loss on every sample of a data file: the\n"
          "                             scores file a job's select.band_file takes (stdout\n"
          "                             without --out)\n"
          "  node                       the daemon: version, devices, queue\n"
          "\n"
          "global options (before or after the command):\n"
          "  --addr ADDR        unix:/path, /path or host:port (TLS); default $TRAIND_ADDR,\n"
          "                     else " TRAINCTL_DEFAULT_ADDR "\n"
          "  --token-file F     bearer token for TCP (default $TRAIND_TOKEN_FILE)\n"
          "  --ca F             PEM roots to check the daemon's TLS certificate with\n"
          "  --json             JSON output (one object per line for watch and logs)\n"
          "  --timeout S        deadline of each call in seconds (default 30)\n"
          "\n"
          "exit codes:\n"
          "  0  success (watch: the job SUCCEEDED)\n"
          "  1  the job ended FAILED or CANCELLED (watch, submit --watch)\n"
          "  2  bad usage: unknown flag, unreadable or malformed job file\n"
          "  3  the daemon refused the request (invalid argument, not found, already exists, ...)\n"
          "  4  the daemon could not be reached or failed to answer\n");
}

const struct option ctl_global_opts[] = {{"addr", required_argument, 0, 1000},
                                         {"token-file", required_argument, 0, 1001},
                                         {"ca", required_argument, 0, 1002},
                                         {"json", no_argument, 0, 1003},
                                         {"timeout", required_argument, 0, 1004},
                                         {"help", no_argument, 0, 1005},
                                         {0, 0, 0, 0}};

static char *read_token(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "trainctl: --token-file %s: cannot read it\n", path);
    exit(EXIT_USAGE);
  }
  char buf[512] = "";
  if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
  fclose(f);
  buf[strcspn(buf, "\r\n")] = 0;
  return strdup(buf);
}

int ctl_global(ctl *c, int opt, const char *arg) {
  switch (opt) {
  case 1000: c->addr = arg; return 1;
  case 1001: c->opts.token = read_token(arg); return 1;
  case 1002: c->opts.ca_file = arg; return 1;
  case 1003: c->json = 1; return 1;
  case 1004: {
    char *end;
    double s = strtod(arg, &end);
    if (*end || s <= 0 || s > 86400) {
      fprintf(stderr, "trainctl: --timeout %s: expected seconds in (0, 86400]\n", arg);
      exit(EXIT_USAGE);
    }
    c->timeout_ms = (int)(s * 1000);
    return 1;
  }
  case 1005: usage(stdout); exit(EXIT_OK);
  }
  return 0;
}

struct option *ctl_opts(const struct option *own) {
  size_t n = 0, g = sizeof ctl_global_opts / sizeof ctl_global_opts[0];
  while (own && own[n].name) n++;
  struct option *all = calloc(n + g, sizeof *all);
  if (!all) exit(EXIT_USAGE);
  if (n) memcpy(all, own, n * sizeof *all);
  memcpy(all + n, ctl_global_opts, g * sizeof *all);
  return all;
}

rpc *ctl_rpc(ctl *c) {
  if (c->r) return c->r;
  char err[512];
  if (rpc_open(&c->r, c->addr, &c->opts, err, sizeof err)) {
    fprintf(stderr, "trainctl: %s: %s\n", c->addr, err);
    return NULL;
  }
  return c->r;
}

int ctl_get_job(ctl *c, rpc *r, const char *job, Traind__V1__Job **out, rpc_status *st) {
  Traind__V1__GetJobRequest g = TRAIND__V1__GET_JOB_REQUEST__INIT;
  g.job_id = (char *)job;
  return rpc_unary(r, "/traind.v1.Trainer/GetJob", &g.base, &traind__v1__job__descriptor,
                   (ProtobufCMessage **)out, c->timeout_ms, st);
}

int ctl_fail(const char *what, const rpc_status *st) {
  fprintf(stderr, "trainctl: %s: %s: %s\n", what, rpc_code_name(st->code), st->msg);
  switch (st->code) {
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_NOT_FOUND:
  case GRPC_STATUS_ALREADY_EXISTS:
  case GRPC_STATUS_FAILED_PRECONDITION:
  case GRPC_STATUS_UNIMPLEMENTED:
  case GRPC_STATUS_PERMISSION_DENIED:
  case GRPC_STATUS_UNAUTHENTICATED:
  case GRPC_STATUS_OUT_OF_RANGE:
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return EXIT_REFUSED;
  default: return EXIT_UNREACHABLE;
  }
}

void ctl_print_json(const ProtobufCMessage *m) {
  json_t *j = pbjson_from(m);
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s) puts(s);
  free(s);
  json_decref(j);
  fflush(stdout);
}

const char *ctl_state_name(int state) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&traind__v1__job_state__descriptor, state);
  return v ? v->name + strlen("JOB_STATE_") : "?";
}

void ctl_fmt_time(int64_t ms, char *buf, size_t n) {
  if (ms <= 0) {
    snprintf(buf, n, "-");
    return;
  }
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

void ctl_fmt_duration(double s, char *buf, size_t n) {
  if (!(s >= 0)) snprintf(buf, n, "?");
  else if (s < 60) snprintf(buf, n, "%.0fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
  else if (s < 4 * 86400) snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
  else if (s < 3 * 365.25 * 86400) snprintf(buf, n, "%.1f days", s / 86400);
  else snprintf(buf, n, "%.3g years", s / (365.25 * 86400));
}

static const struct {
  const char *name;
  int (*fn)(ctl *c, int argc, char **argv);
} commands[] = {{"submit", cmd_submit}, {"list", cmd_list},   {"show", cmd_show}, {"watch", cmd_watch},
                {"cancel", cmd_cancel}, {"logs", cmd_logs},   {"plan", cmd_plan}, {"export", cmd_export}, {"timeline", cmd_timeline},
                {"node", cmd_node},     {"curve", cmd_curve},   {"score", cmd_score}};

int main(int argc, char **argv) {
  ctl c = {0};
  c.addr = getenv("TRAIND_ADDR");
  if (!c.addr || !*c.addr) c.addr = TRAINCTL_DEFAULT_ADDR;
  const char *tf = getenv("TRAIND_TOKEN_FILE");
  if (tf && *tf) c.opts.token = read_token(tf);
  c.timeout_ms = 30000;
  // Global options before the command; "+" stops at the command's name.
  int opt;
  while ((opt = getopt_long(argc, argv, "+", ctl_global_opts, NULL)) != -1)
    if (!ctl_global(&c, opt, optarg)) {
      usage(stderr);
      return EXIT_USAGE;
    }
  if (optind >= argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *name = argv[optind];
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(name, commands[i].name)) continue;
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    optind = 0; // the command parses its own arguments (0: getopt starts afresh)
    int rc = commands[i].fn(&c, sub_argc, sub_argv);
    rpc_close(c.r);
    free((char *)c.opts.token);
    return rc;
  }
  fprintf(stderr, "trainctl: unknown command \"%s\" (see trainctl --help)\n", name);
  return EXIT_USAGE;
}
