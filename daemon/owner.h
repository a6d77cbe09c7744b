// Who owns a job and who may act on it (DESIGN §5). A job records the
// caller that submitted it: "uid:N" over the Unix socket (the connection's
// SO_PEERCRED, daemon/listen.h), "token" over TCP (the daemon has one bearer
// token, so every TCP caller is the same one). Get, List, Watch, Cancel and
// Export act on the caller's own jobs; the others do not exist for it
// (NOT_FOUND, as for an unknown id). Admins act on every job: root, the
// daemon's own user, and the members of admin_group. Jobs from before owners
// were recorded (owner "") are the admins'. Request ids are per owner.
#ifndef TRAIND_OWNER_H
#define TRAIND_OWNER_H

#include <sys/types.h>

#include "server.h"

typedef struct traind traind;
typedef struct job job;

enum { OWNER_MAX = 24 };

// The caller's name as a job records it.
void owner_name(const srv_caller *c, char out[OWNER_MAX]);
int owner_admin(const traind *d, const srv_caller *c);
int owner_may(const traind *d, const srv_caller *c, const job *j);
// The uid behind an owner name: 0 and *uid for "uid:N", -1 otherwise.
int owner_uid(const char *owner, uid_t *uid);

// The groups of uid's user: gid (the connection's), the user's primary group
// and the supplementary groups of its entry in the user database (only gid
// when it has none); at most max, written to out. Returns how many.
int owner_groups(uid_t uid, gid_t gid, gid_t *out, int max);

// The access a job's files are opened with (engine/common/fs_open.h): its
// local owner's uid, gid (the connection's) and groups (owner_groups: as the
// connection had them for a call, looked up again when a queued job starts);
// nobody reads through a job what they could not read themselves. Jobs
// without a local owner (TCP, recorded before owners) read with the daemon's
// access: set = 0.
typedef struct owner_access {
  int set;
  uid_t uid;
  gid_t gid;
  int n_groups;
  gid_t groups[LSN_GROUPS_MAX];
} owner_access;
void owner_access_of(const srv_caller *c, owner_access *out);
void owner_access_of_job(const job *j, owner_access *out);

#endif
