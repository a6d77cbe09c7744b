// GetNode, the health service, and the method table.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "grpc/health/v1/health.pb-c.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants
#define H(x) GRPC__HEALTH__V1__##x // constants

enum { MAX_GPUS = 16 };

// GPUs as the NVIDIA driver lists them, without CUDA: reported (not usable)
// when the engine cannot run on them (no CUDA in this build, no driver).
static int gpus_find(char names[][160], int cap) {
  DIR *dir = opendir("/proc/driver/nvidia/gpus");
  if (!dir) return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dir)) && n < cap) {
    if (de->d_name[0] == '.') continue;
    char path[512], line[256];
    snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", de->d_name);
    snprintf(names[n], 160, "NVIDIA GPU at %.100s", de->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      if (strncmp(line, "Model:", 6)) continue;
      char *m = line + 6;
      m += strspn(m, " \t");
      m[strcspn(m, "\n")] = 0;
      snprintf(names[n], 160, "%.100s at %.40s", m, de->d_name);
    }
    if (f) fclose(f);
    n++;
  }
  closedir(dir);
  return n;
}

// GPUs as CUDA numbers them, the numbers spec.device.gpu takes.
static int gpus_cuda(int n, char names[][160], int64_t *mem) {
  for (int i = 0; i < n; i++) {
    eng_err e = {0};
    eng_gpu_info info;
    if (eng_gpu_describe(i, &info, &e)) snprintf(names[i], 160, "CUDA device %d (%.120s)", i, e.msg);
    else snprintf(names[i], 160, "%s", info.name);
    mem[i] = (int64_t)info.memory_bytes;
  }
  return n;
}

void api_node(srv_call *c, ProtobufCMessage *req) {
  traind *d = srv_call_data(c);
  val_err e;
  if (val_message(req, "", &e)) {
    api_refuse(c, &e);
    return;
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  T(Node) node = K(NODE__INIT);
  node.version = TRAIND_VERSION;
  node.hostname = host;
  node.started_ms = d->started_ms;
  node.queued = d->n_queued;
  const char *running = sched_running_id(d);
  node.running = running != NULL;
  node.n_data_roots = (size_t)d->cfg.n_roots;
  node.data_roots = d->cfg.roots;

  T(Device) devs[1 + MAX_GPUS], *ptrs[1 + MAX_GPUS];
  char gpu_names[MAX_GPUS][160], gpu_ids[MAX_GPUS][16], note[600], cpu_desc[160];
  int64_t gpu_mem[MAX_GPUS] = {0};
  eng_err ge = {0};
  int nc = eng_gpu_count(&ge);
  int ng = nc < 0 ? gpus_find(gpu_names, MAX_GPUS) : gpus_cuda(nc < MAX_GPUS ? nc : MAX_GPUS, gpu_names, gpu_mem);
  if (nc < 0) snprintf(note, sizeof note, "this build's engine runs jobs on the cpu backend only: %s", ge.msg);
  else snprintf(note, sizeof note, "jobs run on the cpu backend or on a GPU listed here (spec.device.gpu)");
  node.engine_note = note;
  traind__v1__device__init(&devs[0]);
  devs[0].name = "cpu";
  devs[0].usable = 1;
  const char *route = "?", *core = "";
  eng_cpu_gemm_route(&route, &core, &ge); // checked when the daemon started
  snprintf(cpu_desc, sizeof cpu_desc, "the cpu backend (host arena, worker threads); products on the %s route%s%s",
           route, *core ? ", OpenBLAS core " : "", core);
  devs[0].description = cpu_desc;
  devs[0].running_job = running ? (char *)running : "";
  devs[0].memory_bytes = d->cfg.cpu_memory_bytes;
  for (int i = 0; i < ng; i++) {
    traind__v1__device__init(&devs[1 + i]);
    snprintf(gpu_ids[i], sizeof gpu_ids[i], "gpu:%d", i);
    devs[1 + i].name = gpu_ids[i];
    devs[1 + i].usable = nc > 0;
    devs[1 + i].description = gpu_names[i];
    devs[1 + i].memory_bytes = gpu_mem[i];
  }
  for (int i = 0; i <= ng; i++) ptrs[i] = &devs[i];
  node.n_devices = (size_t)(1 + ng);
  node.devices = ptrs;
  srv_reply(c, &node.base);
}

static Grpc__Health__V1__HealthCheckResponse__ServingStatus serving(const traind *d, const char *service, int *known) {
  *known = !*service || !strcmp(service, "traind.v1.Trainer");
  return d->draining ? H(HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING)
                     : H(HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
}

// The answer to a health request; 0 when the request is refused.
static int health_answer(srv_call *c, ProtobufCMessage *req, Grpc__Health__V1__HealthCheckResponse *resp,
                         int *known) {
  val_err e;
  if (val_message(req, "", &e)) {
    api_refuse(c, &e);
    return 0;
  }
  Grpc__Health__V1__HealthCheckRequest *r = (Grpc__Health__V1__HealthCheckRequest *)req;
  grpc__health__v1__health_check_response__init(resp);
  resp->status = serving(srv_call_data(c), r->service, known);
  return 1;
}

void api_health_check(srv_call *c, ProtobufCMessage *req) {
  Grpc__Health__V1__HealthCheckResponse resp;
  int known;
  if (!health_answer(c, req, &resp, &known)) return;
  if (!known)
    srv_fail(c, GRPC_STATUS_NOT_FOUND, "service: \"%.200s\" is not served here",
             ((Grpc__Health__V1__HealthCheckRequest *)req)->service);
  else srv_reply(c, &resp.base);
}

// The status once; it only changes at shutdown, when every call is
// cancelled anyway, so the stream then stays open until the client leaves.
void api_health_watch(srv_call *c, ProtobufCMessage *req) {
  Grpc__Health__V1__HealthCheckResponse resp;
  int known;
  if (!health_answer(c, req, &resp, &known)) return;
  if (!known) resp.status = H(HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN);
  srv_send(c, &resp.base, NULL);
}

#define M(name, type, fn, streaming) {"/traind.v1.Trainer/" name, &traind__v1__##type##__descriptor, fn, streaming}
const srv_method api_methods[] = {
    M("SubmitJob", submit_job_request, api_submit, 0),
    M("GetJob", get_job_request, api_get, 0),
    M("ListJobs", list_jobs_request, api_list, 0),
    M("CancelJob", cancel_job_request, api_cancel, 0),
    M("WatchJob", watch_job_request, api_watch, 1),
    M("PlanJob", plan_job_request, api_plan, 0),
    M("ExportJob", export_job_request, api_export, 1),
    M("GetNode", get_node_request, api_node, 0),
    M("GetTimeline", get_timeline_request, api_timeline, 0),
    M("ScoreData", score_data_request, api_score, 1),
    {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor, api_health_check, 0},
    {"/grpc.health.v1.Health/Watch", &grpc__health__v1__health_check_request__descriptor, api_health_watch, 1},
};
#undef M
const int api_n_methods = sizeof api_methods / sizeof api_methods[0];
