// The daemon's configuration: a file of `key = value` lines ('#' starts a
// comment; data_root may repeat), then command-line overrides. SIGHUP
// rereads the file and applies what can change while running (data roots,
// retention, defaults, limits, token, log level); the rest needs a restart
// and the daemon says so. The file must be a regular file.
#ifndef TRAIND_CONFIG_H
#define TRAIND_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum { CFG_MAX_ROOTS = 32 };

typedef struct cfg {
  char *state_dir;          // RocksDB and scratch; $STATE_DIRECTORY, else /var/lib/traind
  char *socket_path;        // $RUNTIME_DIRECTORY/traind.sock, else <state_dir>/traind.sock
  unsigned socket_mode;     // 0660
  char *tcp;                // "host:port" or NULL (then TLS and a token are required)
  char *tls_cert, *tls_key; // PEM file paths
  char *token_file;         // file holding the bearer token
  char *profile_file;       // device profile the planner uses (engine/plan/profiles format);
                            // NULL: calibrate this machine per job shape
  char *admin_group;        // a group (name or gid) whose members act on every job (daemon/owner.h)
  char *metrics_listen;     // "host:port" of the Prometheus metrics endpoint (daemon/metrics.h), or NULL: off
  char *profile_override;   // fields replacing the profile's (same format, any subset), or NULL
  char *roots[CFG_MAX_ROOTS]; // data roots, resolved with realpath when loaded
  int n_roots;
  int max_message_bytes;    // largest request (default 1 MiB)
  int max_connections;      // open Unix socket connections (default 256)
  int max_streams;          // calls open at once on one connection (default 100)
  int retention_jobs;       // finished jobs kept (default 1000; 0 = no limit)
  int64_t retention_age_s;  // finished jobs kept this long (default 30 days; 0 = no limit)
  int drain_timeout_s;      // SIGTERM: time allowed to checkpoint the running job (default 20)
  int checkpoint_every;     // default CheckpointSpec.every_steps (100)
  int checkpoint_keep;      // default CheckpointSpec.keep (2)
  int64_t cpu_memory_bytes; // default device arena of cpu jobs (1 GiB)
  int metrics_interval_ms;  // least time between recorded step events (1000; 0 = every step)
  int64_t host_memory_bytes; // host memory a job may take when it starts (0, the default: what
                            // the machine and the daemon's cgroup have available then)
  int max_crashes;          // a job during which the daemon died this many times fails (3)
  int max_queued_jobs;      // submissions beyond this many queued jobs are refused (10000)
  int runner_nice;          // niceness of a job's threads (10): clients are answered first
  int runner_idle;          // 1 (default): a job's threads run SCHED_IDLE (runner.c)
  int log_level;            // LOG_LVL_*
} cfg;

// Defaults, the file (NULL: none), then the overrides (another cfg's fields
// set by flags: strings non-NULL, numbers >= 0, roots when n_roots > 0).
// Returns 0, or -1 with a message naming the file, line and key.
int cfg_load(cfg *c, const char *path, const cfg *over, char *err, size_t errlen);
// Sets one key of c as a line of the file would (for command-line flags).
int cfg_set(cfg *c, const char *key, const char *value, char *err, size_t errlen);
// Marks every field of an override cfg as unset.
void cfg_unset(cfg *over);
void cfg_free(cfg *c);

#endif
