// The Prometheus endpoint (metrics_listen, daemon/metrics.h) of a real
// daemon, scraped over HTTP by Python's urllib and parsed by
// prometheus_client (tests/e2e/prom_scrape.py) while a job with a FLOP
// budget trains and another waits: the running job's loss, tokens/s, MFU,
// FLOPs, tokens, budget left and phase times are there with sensible
// values, the queue depth is 1, the job counts by state add up.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "e2e/daemon.h"
#include "python.h"

// A port nobody listens on now (the kernel's choice for port 0).
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0, "socket failed");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &n) == 0,
        "cannot find a free port");
  close(fd);
  return ntohs(a.sin_port);
}

// The value of the sample whose line starts with `prefix` (NAN: none).
static double sample(const char *text, const char *prefix) {
  for (const char *p = text; (p = strstr(p, prefix)); p++)
    if (p == text || p[-1] == '\n') return strtod(strchr(p, '}') + 1, NULL);
  return NAN;
}

int main(void) {
  td t;
  td_init(&t);
  int port = free_port();
  char set[64];
  snprintf(set, sizeof set, "metrics_listen=127.0.0.1:%d", port);
  td_set(&t, set);
  td_start(&t);
  const char *busy = td_jobfile("busy.yaml", 1000000, 1000000, "budget:\n  max_flops: 1e15\n");
  char id[80], waiting[80];
  snprintf(id, sizeof id, "%s", td_submit(&t, busy, NULL));
  snprintf(waiting, sizeof waiting, "%s", td_submit(&t, td_jobfile("waiting.yaml", 10, 10, NULL), NULL));
  td_wait_step(&t, id, 5, 120);

  const char *out = tmp_path("scrape.txt");
  fflush(stdout);
  int rc = py_run("%s/tests/e2e/prom_scrape.py http://127.0.0.1:%d > %s", TRAIND_SOURCE_DIR, port, out);
  CHECK(rc == 0, "prom_scrape.py: exit %d (its reason is printed above)", rc);
  static char text[1 << 20];
  FILE *f = fopen(out, "r");
  CHECK(f, "cannot read %s", out);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;

  char key[256];
  // prom_scrape.py sorts the labels: budget, job, name, phase.
#define JOB(metric, before, after) \
  (snprintf(key, sizeof key, metric "{%sjob=\"%s\",name=\"busy.yaml\"%s}", before, id, after), key)
  double loss = sample(text, JOB("traind_job_loss", "", "")), tps = sample(text, JOB("traind_job_tokens_per_second", "", ""));
  double mfu = sample(text, JOB("traind_job_mfu", "", "")), flops = sample(text, JOB("traind_job_model_flops_total", "", ""));
  double tokens = sample(text, JOB("traind_job_tokens_total", "", ""));
  double left = sample(text, JOB("traind_job_budget_remaining_ratio", "budget=\"max_flops\",", ""));
  double fwd = sample(text, JOB("traind_job_phase_seconds", "", ",phase=\"forward\""));
  double step = sample(text, JOB("traind_job_step", "", ""));
  CHECK(loss > 0 && loss < 10 && tps > 0 && mfu > 0 && mfu < 1 && flops > 0 && tokens >= 5 * 256 && left > 0 &&
        left < 1 && fwd > 0 && step >= 5,
        "running job: loss %g, tokens/s %g, MFU %g, FLOPs %g, tokens %g, budget left %g, forward %g s, step %g; "
        "scrape:\n%s", loss, tps, mfu, flops, tokens, left, fwd, step, text);
  CHECK(sample(text, "traind_queue_depth{}") == 1, "queue depth %g; scrape:\n%s", sample(text, "traind_queue_depth{}"),
        text);
  CHECK(sample(text, "traind_jobs{state=\"running\"}") == 1 && sample(text, "traind_jobs{state=\"queued\"}") == 1,
        "job counts; scrape:\n%s", text);
  snprintf(key, sizeof key, "job=\"%s\"", waiting);
  CHECK(strstr(text, key), "the queued job is not listed; scrape:\n%s", text);
  printf("scraped %zu bytes: loss %.4f, %.0f tokens/s, MFU %.1f%%, %.4g FLOPs, %.0f tokens, budget left %.4f\n", n,
         loss, tps, 100 * mfu, flops, tokens, left);
  CHECK(td_ctl(&t, NULL, 0, "cancel %s", id) == 0 && td_ctl(&t, NULL, 0, "cancel %s", waiting) == 0, "cancel failed");
  td_finish(&t);
  printf("test_e2e_metrics: ok\n");
  return 0;
}
