#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int max_level = LOG_LVL_INFO;

void log_level_set(int level) { atomic_store(&max_level, level); }

static const struct {
  const char *name;
  int level;
} levels[] = {{"error", LOG_LVL_ERR}, {"warning", LOG_LVL_WARN}, {"info", LOG_LVL_INFO}, {"debug", LOG_LVL_DEBUG}};

int log_level_parse(const char *name) {
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
    if (!strcmp(name, levels[i].name)) return levels[i].level;
  return -1;
}

static const char *level_name(int level) {
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
    if (levels[i].level == level) return levels[i].name;
  return "?";
}

void log_msg(int level, const char *fmt, ...) {
  if (level > atomic_load(&max_level)) return;
  char line[2048];
  int n;
  if (getenv("JOURNAL_STREAM")) {
    n = snprintf(line, sizeof line, "<%d>", level);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ traind %s: ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                 level_name(level));
  }
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof line - 2) len = sizeof line - 2; // truncated: keep the newline
  // A multi-line message would confuse journald's line-per-record parsing.
  for (size_t i = (size_t)n; i < len; i++)
    if (line[i] == '\n') line[i] = ' ';
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w; // nowhere left to report a failed log write
}
