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
  if (c->local) snprintf(out, OWNER_MAX, "uid:%u", (unsigned)c->uid);
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

// The caller's primary group (from the connection), then the supplementary
// groups of its user, when the user has an entry.
static int in_group(const srv_caller *c, gid_t gid) {
  if (c->gid == gid) return 1;
  struct passwd pw, *res = NULL;
  char buf[4096];
  if (getpwuid_r(c->uid, &pw, buf, sizeof buf, &res) || !res) return 0;
  gid_t groups[256];
  int n = 256;
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0) return 0;
  for (int i = 0; i < n; i++)
    if (groups[i] == gid) return 1;
  return 0;
}

int owner_admin(const traind *d, const srv_caller *c) {
  if (!c->local) return 0;
  if (c->uid == 0 || c->uid == geteuid()) return 1;
  gid_t g;
  return d->cfg.admin_group && !admin_gid(d->cfg.admin_group, &g) && in_group(c, g);
}

// uid and gid, and the supplementary groups of uid's entry in the user
// database (none when it has no entry).
static void access_fill(uid_t uid, gid_t gid, owner_access *out) {
  *out = (owner_access){.set = 1, .uid = uid, .gid = gid};
  struct passwd pw, *res = NULL;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) || !res) return;
  int n = (int)(sizeof out->groups / sizeof out->groups[0]);
  if (getgrouplist(pw.pw_name, gid, out->groups, &n) >= 0) out->n_groups = n;
}

void owner_access_of(const srv_caller *c, owner_access *out) {
  if (c->local) access_fill(c->uid, c->gid, out);
  else *out = (owner_access){0};
}

void owner_access_of_job(const job *j, owner_access *out) {
  uid_t uid;
  if (owner_uid(j->owner, &uid)) *out = (owner_access){0};
  else access_fill(uid, j->owner_gid, out);
}

int owner_may(const traind *d, const srv_caller *c, const job *j) {
  char me[OWNER_MAX];
  owner_name(c, me);
  return (*j->owner && !strcmp(me, j->owner)) || owner_admin(d, c);
}
