// trainctl score: a model's loss on every sample of a data file, written as
// a scores file (FILE, or stdout) for a job's select.band_file. The daemon
// reads both with the caller's access and scores on its thread pool.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainctl.h"

#define K(x) TRAIND__V1__##x

int cmd_score(ctl *c, int argc, char **argv) {
  static const struct option own[] = {{"model-dir", 1, 0, 'm'}, {"data", 1, 0, 'd'}, {"seq", 1, 0, 's'},
                                      {"batch", 1, 0, 'b'},     {"out", 1, 0, 'o'},  {0, 0, 0, 0}};
  struct option *opts = ctl_opts(own);
  Traind__V1__ScoreDataRequest req = K(SCORE_DATA_REQUEST__INIT);
  const char *out = NULL;
  char model[4096] = "", data[4096] = "";
  int opt, bad = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    // Paths relative to where trainctl runs: the daemon has another cwd.
    if (opt == 'm' || opt == 'd') {
      char *abs = realpath(optarg, NULL);
      snprintf(opt == 'm' ? model : data, 4096, "%s", abs ? abs : optarg);
      free(abs);
    } else if (opt == 's') {
      req.seq_len = atoi(optarg);
    } else if (opt == 'b') {
      req.batch_size = atoi(optarg);
    } else if (opt == 'o') {
      out = optarg;
    } else if (!ctl_global(c, opt, optarg)) {
      bad = 1;
    }
  }
  free(opts);
  if (bad || optind != argc || !*model || !*data || !req.seq_len) {
    if (!bad) fprintf(stderr, "trainctl score: --model-dir, --data and --seq are required\n");
    return EXIT_USAGE;
  }
  req.model_dir = model;
  req.data_path = data;
  rpc *r = ctl_rpc(c);
  if (!r) return EXIT_UNREACHABLE;
  FILE *f = stdout;
  char tmp[4200] = "";
  if (out) {
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    if (!(f = fopen(tmp, "w"))) {
      perror(tmp);
      return EXIT_USAGE;
    }
  }
  rpc_stream *s;
  rpc_status st;
  ProtobufCMessage *m;
  int last = 0, rc = EXIT_OK;
  unsigned long long samples = 0;
  double flops = 0;
  if (rpc_stream_open(r, "/traind.v1.Trainer/ScoreData", &req.base, 0, &s, &st) == 0) {
    while (rpc_stream_next(s, &traind__v1__score_chunk__descriptor, &m, &st) == 1) {
      const Traind__V1__ScoreChunk *ch = (const Traind__V1__ScoreChunk *)m;
      if (fwrite(ch->data.data, 1, ch->data.len, f) != ch->data.len) rc = EXIT_USAGE;
      last = ch->last;
      samples = ch->samples;
      flops = ch->model_flops;
      protobuf_c_message_free_unpacked(m, NULL);
    }
    rpc_stream_close(s);
  }
  if (st.code != GRPC_STATUS_OK) rc = ctl_fail("score", &st);
  else if (!last) rc = EXIT_UNREACHABLE, fprintf(stderr, "trainctl score: the stream ended before the last chunk\n");
  if (out) {
    if (fclose(f) || rc || rename(tmp, out)) {
      unlink(tmp);
      if (!rc) perror(out), rc = EXIT_USAGE;
    } else {
      fprintf(stderr, "trainctl score: %llu samples scored (%.3g model FLOPs) into %s\n", samples, flops, out);
    }
  }
  return rc;
}
