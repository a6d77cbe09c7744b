// trainctl: the command line client of traind. Each command lives in its
// own file (cmd_*.c) and returns one of the exit codes below.
#ifndef TRAIND_TRAINCTL_H
#define TRAIND_TRAINCTL_H

#include <getopt.h>
#include <stdio.h>

#include "rpc.h"
#include "traind/v1/traind.pb-c.h"

enum {
  EXIT_OK = 0,
  EXIT_JOB_FAILED = 1,  // the job watched ended FAILED or CANCELLED
  EXIT_USAGE = 2,       // bad flags or job file
  EXIT_REFUSED = 3,     // the daemon refused the request (invalid, not found, exists, ...)
  EXIT_UNREACHABLE = 4, // the daemon could not be reached, or failed to answer
};

typedef struct ctl {
  const char *addr;
  rpc_options opts;
  int json;
  int timeout_ms;
  rpc *r;
} ctl;

// The options every command takes, to be appended to its own; returns 1
// when opt was one of them.
extern const struct option ctl_global_opts[];
int ctl_global(ctl *c, int opt, const char *arg);
// Builds an option table of a command's own plus the global ones.
struct option *ctl_opts(const struct option *own);

// Connects (lazily, on first use); prints the problem and returns NULL.
rpc *ctl_rpc(ctl *c);
// Prints a failed call's status and maps it to an exit code.
int ctl_fail(const char *what, const rpc_status *st);
// GetJob on r: 0 and the record in *out (free it with
// protobuf_c_message_free_unpacked), or the call's failure in *st.
int ctl_get_job(ctl *c, rpc *r, const char *job, Traind__V1__Job **out, rpc_status *st);
// Prints a message as JSON on one line.
void ctl_print_json(const ProtobufCMessage *m);
const char *ctl_state_name(int state);
void ctl_fmt_time(int64_t ms, char *buf, size_t n);
void ctl_fmt_duration(double s, char *buf, size_t n);

int cmd_submit(ctl *c, int argc, char **argv);
int cmd_plan(ctl *c, int argc, char **argv);
int cmd_list(ctl *c, int argc, char **argv);
int cmd_show(ctl *c, int argc, char **argv);
int cmd_cancel(ctl *c, int argc, char **argv);
int cmd_timeline(ctl *c, int argc, char **argv);
int cmd_node(ctl *c, int argc, char **argv);
int cmd_watch(ctl *c, int argc, char **argv);
int cmd_logs(ctl *c, int argc, char **argv);
int cmd_export(ctl *c, int argc, char **argv);
int cmd_curve(ctl *c, int argc, char **argv);
int cmd_score(ctl *c, int argc, char **argv);
// Follows a job's events from after_seq (reconnecting when the daemon goes
// away) and returns the exit code for the state it ends in.
int ctl_follow(ctl *c, const char *job, uint64_t after_seq, int follow, int live);

#endif
