// What every implementation of the collectives shares (coll.h).
#include "dist/coll.h"

void eng_coll_slice(size_t count, int world, int r, size_t *off, size_t *n) {
  size_t per = (count + (size_t)world - 1) / (size_t)world, o = per * (size_t)r;
  *off = o < count ? o : count;
  *n = o < count ? (count - o < per ? count - o : per) : 0;
}
