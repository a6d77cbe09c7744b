#define _GNU_SOURCE // getgrouplist
#include "owner.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traind.h"

void owner_name(const srv_caller *c, char out[OWNER_MAX]) {
  if (c->local) snprintf(out, OWNER_MAX, "uid:%u", (unsigned)c->peer.uid);
  else snprintf(out, OWNER_MAX, "token");
}

int owner_uid(const char *owner, uid_t *uid) {
  unsigned u;
  char end;
  if (sscanf(owner, "uid:%u%c", &u, &end) != 1) return -1;
  *uid = (uid_t)u;
  return 0;
}

// admin_group: a group name or a number.
static int admin_gid(const char *group, gid_t *gid) {
  char *end;
  unsigned long n = strtoul(group, &end, 10);
  if (*group && !*end) {
    *gid = (gid_t)n;
    return 0;
  }
  struct group gr, *res = NULL;
  char buf[4096];
  if (getgrnam_r(group, &gr, buf, sizeof buf, &res) || !res) return -1;
  *gid = gr.gr_gid;
  return 0;
}

int owner_groups(uid_t uid, gid_t gid, gid_t *out, int max) {
  struct passwd pw, *res = NULL;
  char buf[4096];
  int n = max;
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) || !res || getgrouplist(pw.pw_name, pw.pw_gid, out, &n) < 0) n = 0;
  for (int i = 0; i < n; i++)
    if (out[i] == gid) return n;
  if (n < max) out[n++] = gid;
  return n;
}

int owner_admin(const traind *d, const srv_caller *c) {
  if (!c->local) return 0;
  if (c->peer.uid == 0 || c->peer.uid == geteuid()) return 1;
  gid_t g;
  if (!d->cfg.admin_group || admin_gid(d->cfg.admin_group, &g)) return 0;
  for (int i = 0; i < c->peer.n_groups; i++)
    if (c->peer.groups[i] == g) return 1;
  return 0;
}

void owner_access_of(const srv_caller *c, owner_access *out) {
  if (!c->local) {
    *out = (owner_access){0};
    return;
  }
  *out = (owner_access){.set = 1, .uid = c->peer.uid, .gid = c->peer.gid, .n_groups = c->peer.n_groups};
  memcpy(out->groups, c->peer.groups, (size_t)c->peer.n_groups * sizeof *out->groups);
}

void owner_access_of_job(const job *j, owner_access *out) {
  uid_t uid;
  if (owner_uid(j->owner, &uid)) {
    *out = (owner_access){0};
    return;
  }
  *out = (owner_access){.set = 1, .uid = uid, .gid = j->owner_gid};
  out->n_groups = owner_groups(uid, j->owner_gid, out->groups, LSN_GROUPS_MAX);
}

int owner_may(const traind *d, const srv_caller *c, const job *j) {
  char me[OWNER_MAX];
  owner_name(c, me);
  return (*j->owner && !strcmp(me, j->owner)) || owner_admin(d, c);
}
