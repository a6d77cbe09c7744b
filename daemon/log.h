// Logging to stderr, the daemon's only log sink (DESIGN §5). Under systemd
// (JOURNAL_STREAM set) each line starts with the sd-daemon priority prefix
// "<N>" so journald records its level; elsewhere with a UTC timestamp and
// the level's name. One write(2) per line, so lines from different threads
// never interleave.
#ifndef TRAIND_LOG_H
#define TRAIND_LOG_H

enum { LOG_LVL_ERR = 3, LOG_LVL_WARN = 4, LOG_LVL_INFO = 6, LOG_LVL_DEBUG = 7 };

// Lines above this level are dropped (default INFO; the config's log_level).
void log_level_set(int level);
// "error", "warning", "info", "debug" -> level; -1 when unknown.
int log_level_parse(const char *name);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
