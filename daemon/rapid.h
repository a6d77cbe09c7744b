// HTTP/2 rapid-reset protection (DESIGN §5): the calls each Unix connection's
// client cancels, counted per connection and one-second window; a connection
// over the limit is shut down. (Calls that end without a request message
// count too: the core cannot tell them from cancelled ones, and no client
// sends them.) It counts on the completion-queue thread,
// where every call's close comes back first, so a flood is cut at the rate
// the core delivers it, however far behind the loop is (a loop that counted
// let the core queue calls it had not yet matched, without bound).
// Completion-queue thread only.
#ifndef TRAIND_RAPID_H
#define TRAIND_RAPID_H

typedef struct rapid rapid;

// path: the socket's, for the log line (copied).
rapid *rapid_new(const char *path, int max_per_s);
// A call on the Unix connection fd was cancelled by its client. The one
// that takes the connection over the limit shuts it down (the core, which
// owns fd, closes it once it sees the end) and logs who it was. fd must
// still be the connection's: the caller holds a call on it.
void rapid_note(rapid *r, int fd);
void rapid_free(rapid *r);

#endif
