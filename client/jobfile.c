#include "jobfile.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "pbset.h"

void jobfile_key_path(const char *key, char *out, size_t n) {
  int top = !strcmp(key, "request_id") || !strcmp(key, "priority") || !strcmp(key, "preempt") || !strncmp(key, "spec.", 5);
  snprintf(out, n, "%s%s", top ? "" : "spec.", key);
}

typedef struct parse {
  yaml_parser_t p;
  ProtobufCMessage *req;
  const char *file;
  char *err;
  size_t errlen;
} parse;

static int next(parse *ps, yaml_event_t *ev) {
  if (yaml_parser_parse(&ps->p, ev)) return 0;
  snprintf(ps->err, ps->errlen, "%s:%zu: %s", ps->file, ps->p.problem_mark.line + 1,
           ps->p.problem ? ps->p.problem : "not valid YAML");
  return -1;
}

static int node(parse *ps, yaml_event_t *ev, const char *path, int line);

static int set(parse *ps, const char *path, const char *value, int line) {
  char msg[600];
  if (!*value || !strcmp(value, "~") || !strcmp(value, "null")) return 0; // left unset
  if (pbset(ps->req, path, value, msg, sizeof msg) == 0) return 0;
  // Errors name the key as the file spells it.
  snprintf(ps->err, ps->errlen, "%s:%d: %s", ps->file, line, !strncmp(msg, "spec.", 5) ? msg + 5 : msg);
  return -1;
}

static int mapping(parse *ps, const char *prefix) {
  for (;;) {
    yaml_event_t k;
    if (next(ps, &k)) return -1;
    if (k.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&k);
      return 0;
    }
    int line = (int)k.start_mark.line + 1;
    if (k.type != YAML_SCALAR_EVENT) {
      snprintf(ps->err, ps->errlen, "%s:%d: expected a key", ps->file, line);
      yaml_event_delete(&k);
      return -1;
    }
    char path[512];
    if (*prefix) snprintf(path, sizeof path, "%s.%s", prefix, (const char *)k.data.scalar.value);
    else jobfile_key_path((const char *)k.data.scalar.value, path, sizeof path);
    yaml_event_delete(&k);
    yaml_event_t v;
    if (next(ps, &v)) return -1;
    int rc = node(ps, &v, path, line);
    yaml_event_delete(&v);
    if (rc) return rc;
  }
}

static int node(parse *ps, yaml_event_t *ev, const char *path, int line) {
  switch (ev->type) {
  case YAML_SCALAR_EVENT: return set(ps, path, (const char *)ev->data.scalar.value, line);
  case YAML_MAPPING_START_EVENT: return mapping(ps, path);
  case YAML_SEQUENCE_START_EVENT:
    for (;;) {
      yaml_event_t it;
      if (next(ps, &it)) return -1;
      if (it.type == YAML_SEQUENCE_END_EVENT) {
        yaml_event_delete(&it);
        return 0;
      }
      int rc = it.type == YAML_SCALAR_EVENT ? set(ps, path, (const char *)it.data.scalar.value, (int)it.start_mark.line + 1)
                                            : (snprintf(ps->err, ps->errlen, "%s:%zu: %s: only lists of values are supported",
                                                        ps->file, it.start_mark.line + 1, path), -1);
      yaml_event_delete(&it);
      if (rc) return rc;
    }
  default: snprintf(ps->err, ps->errlen, "%s:%d: %s: unexpected YAML here (anchors and aliases are not supported)", ps->file, line, path); return -1;
  }
}

int jobfile_load(Traind__V1__SubmitJobRequest *req, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  parse ps = {.req = &req->base, .file = path, .err = err, .errlen = errlen};
  yaml_parser_initialize(&ps.p);
  yaml_parser_set_input_file(&ps.p, f);
  int rc = 0, done = 0;
  while (!rc && !done) {
    yaml_event_t ev;
    if ((rc = next(&ps, &ev))) break;
    switch (ev.type) {
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_START_EVENT:
    case YAML_DOCUMENT_END_EVENT: break;
    case YAML_STREAM_END_EVENT: done = 1; break;
    case YAML_MAPPING_START_EVENT: rc = mapping(&ps, ""); break;
    default:
      snprintf(err, errlen, "%s:%zu: a job file is a mapping of keys (name, model, data, training, ...)", path,
               ev.start_mark.line + 1);
      rc = -1;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&ps.p);
  fclose(f);
  return rc;
}

static int abs_path(char **field, const char *name, const char *base, char *err, size_t errlen) {
  if (!*field || !**field || (*field)[0] == '/') return 0;
  size_t n = strlen(base) + strlen(*field) + 2;
  char *p = malloc(n);
  if (!p) {
    snprintf(err, errlen, "%s: out of memory", name);
    return -1;
  }
  snprintf(p, n, "%s/%s", base, *field);
  free(*field);
  *field = p;
  return 0;
}

int jobfile_abs_paths(Traind__V1__SubmitJobRequest *req, const char *base, char *err, size_t errlen) {
  Traind__V1__JobSpec *s = req->spec;
  if (!s) return 0;
  if (s->model && s->model->source_case == TRAIND__V1__MODEL_SPEC__SOURCE_HF_DIR &&
      abs_path(&s->model->hf_dir, "model.hf_dir", base, err, errlen))
    return -1;
  if (s->data && (abs_path(&s->data->train_path, "data.train_path", base, err, errlen) ||
                  abs_path(&s->data->eval_path, "data.eval_path", base, err, errlen)))
    return -1;
  return 0;
}
