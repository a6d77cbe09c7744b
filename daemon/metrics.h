// Prometheus metrics (DESIGN §5, §8): the text exposition format at
// http://<metrics_listen>/metrics, served from the loop (the numbers are
// the loop's; a scrape renders only unfinished jobs, so it stays cheap with
// many jobs kept). Off unless the config names an address. One request per
// connection (Connection: close), a header of at most 8 KiB, a few
// connections at once; anything else gets 404, 405 or 431.
#ifndef TRAIND_METRICS_H
#define TRAIND_METRICS_H

#include <stddef.h>

#include "traind.h"

typedef struct metrics metrics;

// Listens on addr ("127.0.0.1:9464", "[::1]:9464"); err names it on failure.
int metrics_start(metrics **out, traind *d, const char *addr, char *err, size_t errlen);
// Closes the listener and any open connection; frees m once they are closed.
void metrics_stop(metrics *m);

// The exposition text (malloc'ed, *n bytes), or NULL when out of memory.
char *metrics_render(const traind *d, size_t *n);

#endif
