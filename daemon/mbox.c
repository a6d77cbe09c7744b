#include "mbox.h"

static void mbox_drain(uv_async_t *a) {
  mbox *b = a->data;
  uv_mutex_lock(&b->lock);
  mbox_item *it = b->head;
  b->head = b->tail = NULL;
  uv_mutex_unlock(&b->lock);
  while (it) {
    mbox_item *next = it->next; // the handler may free or re-post it
    it->next = NULL;
    b->fn(b, it);
    it = next;
  }
}

int mbox_init(mbox *b, uv_loop_t *loop, mbox_fn fn, void *data) {
  b->head = b->tail = NULL;
  b->fn = fn;
  b->data = data;
  b->async.data = b;
  int rc = uv_mutex_init(&b->lock);
  if (rc) return rc;
  rc = uv_async_init(loop, &b->async, mbox_drain);
  if (rc) uv_mutex_destroy(&b->lock);
  return rc;
}

void mbox_post(mbox *b, mbox_item *it) {
  it->next = NULL;
  uv_mutex_lock(&b->lock);
  if (b->tail) b->tail->next = it;
  else b->head = it;
  b->tail = it;
  uv_mutex_unlock(&b->lock);
  uv_async_send(&b->async);
}

void mbox_close(mbox *b, uv_close_cb cb) { uv_close((uv_handle_t *)&b->async, cb); }
