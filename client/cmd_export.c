// trainctl export: writes the streamed files of ExportJob into a directory.
// Each file is written as .NAME.part and renamed when its last chunk came
// and its size matches, so the directory never holds a truncated file
// under its real name.
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainctl.h"

#define K(x) TRAIND__V1__##x

typedef struct sink {
  const char *dir;
  char name[256];
  int fd;
  uint64_t written;
} sink;

static int bad_name(const char *n) { return !*n || strchr(n, '/') || n[0] == '.' || strlen(n) > 200; }

static int chunk(sink *s, const Traind__V1__ExportChunk *ch) {
  char part[4400], final[4400];
  if (bad_name(ch->file)) {
    fprintf(stderr, "trainctl export: the daemon sent a file name that is not a plain name: \"%s\"\n", ch->file);
    return -1;
  }
  if (s->fd < 0 || strcmp(s->name, ch->file)) {
    if (s->fd >= 0) {
      fprintf(stderr, "trainctl export: %s ended before its last chunk\n", s->name);
      return -1;
    }
    snprintf(s->name, sizeof s->name, "%s", ch->file);
    snprintf(part, sizeof part, "%s/.%s.part", s->dir, s->name);
    s->fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    s->written = 0;
    if (s->fd < 0) {
      fprintf(stderr, "trainctl export: %s: %s\n", part, strerror(errno));
      return -1;
    }
  }
  if (ch->offset != s->written) {
    fprintf(stderr, "trainctl export: %s: chunk at offset %llu, expected %llu\n", s->name,
            (unsigned long long)ch->offset, (unsigned long long)s->written);
    return -1;
  }
  size_t off = 0;
  while (off < ch->data.len) {
    ssize_t w = write(s->fd, ch->data.data + off, ch->data.len - off);
    if (w < 0) {
      fprintf(stderr, "trainctl export: writing %s: %s\n", s->name, strerror(errno));
      return -1;
    }
    off += (size_t)w;
  }
  s->written += ch->data.len;
  if (!ch->last) return 0;
  snprintf(part, sizeof part, "%s/.%s.part", s->dir, s->name);
  snprintf(final, sizeof final, "%s/%s", s->dir, s->name);
  int bad = s->written != ch->size || fsync(s->fd) != 0;
  close(s->fd);
  s->fd = -1;
  if (bad || rename(part, final)) {
    fprintf(stderr, "trainctl export: %s: %s\n", final,
            bad ? "its size does not match what the daemon announced" : strerror(errno));
    return -1;
  }
  printf("%s (%llu bytes)\n", final, (unsigned long long)s->written);
  return 0;
}

int cmd_export(ctl *c, int argc, char **argv) {
  static const struct option own[] = {{"step", required_argument, 0, 's'}, {"bf16", no_argument, 0, 'b'}, {0, 0, 0, 0}};
  struct option *opts = ctl_opts(own);
  Traind__V1__ExportJobRequest req = K(EXPORT_JOB_REQUEST__INIT);
  int opt, bad = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (opt == 's') {
      char *end;
      req.step = strtoll(optarg, &end, 10);
      bad |= *end != 0 || req.step < 0;
    } else if (opt == 'b') {
      req.bf16 = 1;
    } else if (!ctl_global(c, opt, optarg)) {
      bad = 1;
    }
  }
  free(opts);
  if (bad || optind != argc - 2) {
    fprintf(stderr, "usage: trainctl export JOB DIR [--step N] [--bf16]\n");
    return EXIT_USAGE;
  }
  req.job_id = argv[optind];
  sink s = {argv[optind + 1], "", -1, 0};
  int created = mkdir(s.dir, 0755) == 0;
  if (!created && errno != EEXIST) {
    fprintf(stderr, "trainctl export: %s: %s\n", s.dir, strerror(errno));
    return EXIT_USAGE;
  }
  rpc *r = ctl_rpc(c);
  if (!r) return EXIT_UNREACHABLE;
  rpc_stream *st;
  rpc_status status;
  if (rpc_stream_open(r, "/traind.v1.Trainer/ExportJob", &req.base, 0, &st, &status)) {
    if (created) rmdir(s.dir); // nothing came: leave no empty directory behind
    return ctl_fail("export", &status);
  }
  ProtobufCMessage *m;
  int rc = EXIT_OK;
  while (rpc_stream_next(st, &traind__v1__export_chunk__descriptor, &m, &status) == 1) {
    int e = chunk(&s, (Traind__V1__ExportChunk *)m);
    protobuf_c_message_free_unpacked(m, NULL);
    if (e) {
      rc = EXIT_UNREACHABLE;
      break;
    }
  }
  rpc_stream_close(st);
  if (s.fd >= 0) close(s.fd);
  if (!rc && status.code) rc = ctl_fail("export", &status);
  if (rc && created) rmdir(s.dir); // succeeds only when no file arrived
  return rc;
}
