// A mailbox into the loop thread: other threads (the completion-queue
// thread, the runners) push items onto a locked list and wake the loop with
// uv_async_send; the loop drains the whole list, oldest first, because
// libuv coalesces wakeups (several sends may run the callback once).
//
// Items are intrusive: the poster embeds an mbox_item in its own struct and
// keeps it alive until the handler has run, so posting never allocates.
#ifndef TRAIND_MBOX_H
#define TRAIND_MBOX_H

#include <uv.h>

typedef struct mbox_item {
  struct mbox_item *next;
} mbox_item;

typedef struct mbox mbox;
typedef void (*mbox_fn)(mbox *b, mbox_item *it);

struct mbox {
  uv_async_t async;
  uv_mutex_t lock;
  mbox_item *head, *tail;
  mbox_fn fn;   // runs on the loop thread, once per item
  void *data;   // the owner's
};

int mbox_init(mbox *b, uv_loop_t *loop, mbox_fn fn, void *data);
// Any thread.
void mbox_post(mbox *b, mbox_item *it);
// Loop thread; cb runs once the async handle is closed (may be NULL).
void mbox_close(mbox *b, uv_close_cb cb);

#endif
