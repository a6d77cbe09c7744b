// Training-step benchmark of the cuda backend on a 7B-shaped model
// (Qwen2.5-7B's dimensions: hidden 3584, 28 layers, 28 heads, 4 kv heads,
// ffn 18944, vocab 152064, q/k/v biases) at sequence 1024, streaming the
// layers as DESIGN §2 describes: every layer's bf16 weights live in pinned
// host memory and stream in on the copy-in stream, two slots deep, while
// the compute stream runs the previous layer; each layer's gradients are
// accumulated in fp32 on the device, finished to bf16 with their Σg²
// (eng_cuda_grad_finish) and stream out on the copy-out stream. Events
// order the three streams, so one host thread drives it all.
//
// The plan is fixed: every layer boundary kept on the device, each layer's
// inside recomputed in the backward, micro-batches of MB sequences, the
// embedding and the head resident. (The planner, engine/plan, chooses plans
// for the executor; this program measures the kernels and the streaming.)
// The optimizer update is the host's (optim/adamw8.h) and is not timed here.
//
// Prints TFLOPS by the 6·params·tokens convention (all parameters, the
// embedding and the head included; the recompute's extra forward is not
// counted), MFU against the H100/H200's dense bf16 peak of 989 TFLOPS,
// tokens/s, per-phase times, copy bandwidths and peak GPU memory; with $OUT
// set, writes the same as JSON to $OUT/bench_gpu.json. Sized for a machine
// with 128 GiB of host memory (about 30 GB pinned) and runs in well under
// a minute after the build.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TRAIND_HAVE_CUDA
int main(void) {
  fprintf(stderr, "bench_gpu: SKIP: this build has no CUDA backend\n");
  return 77;
}
#else

#include <cuda_runtime_api.h>
#include <string.h>
#include <time.h>

#include "backend/cuda.h"
#include "kernels/kmath_hd.h"

enum { B = 16, T = 1024, MB = 4, WARMUP = 1, STEPS = 2 };
static const double PEAK_TFLOPS = 989.0;

static eng_err err;

#define OK(call)                                                                          \
  do {                                                                                    \
    int rc_ = (call);                                                                     \
    if (rc_) {                                                                            \
      fprintf(stderr, "bench_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, err.msg);  \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define CU(call)                                                                          \
  do {                                                                                    \
    cudaError_t st_ = (call);                                                             \
    if (st_ != cudaSuccess) {                                                             \
      fprintf(stderr, "bench_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
              cudaGetErrorString(st_));                                                   \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Device regions, carved from the backend's arena; one function sizes
// (dev NULL) and carves, as the executor does.
typedef struct bufs {
  eng_bf16 *wslot[2];            // streamed layer weights
  float *gacc[2];                // layer gradient accumulators
  eng_bf16 *gout[2];             // finished layer gradients, copied out
  void *gscratch;                // eng_cuda_grad_finish's partials
  double *sumsq;                 // per shard Σg²
  eng_bf16 *emb, *head;          // resident: the embedding, final norm + lm_head
  float *gemb, *ghead;
  eng_bf16 *gbig;                // the embedding's and the head's finished gradients
  int32_t *ids, *targets;
  eng_bf16 *x;                   // boundaries 0..L of the whole batch
  eng_bf16 *dxa, *dxb;           // boundary gradients of the whole batch
  eng_bf16 *hn, *dh, *ybuf;      // one micro-batch
  float *hrstd;
  void *acts, *scr, *hscratch;
  double *loss;
} bufs;

static void *take(eng_dev *d, size_t bytes, size_t *total) {
  bytes = (bytes + 255) & ~(size_t)255;
  *total += bytes;
  if (!d) return NULL;
  void *p = eng_dev_alloc(d, bytes);
  if (!p) {
    fprintf(stderr, "bench_gpu: the arena is exhausted\n");
    exit(1);
  }
  return p;
}

static size_t carve(bufs *b, eng_dev *d, const eng_config *c, const eng_layout *lo) {
  size_t t = 0, n = (size_t)B * T, nm = (size_t)MB * T, dm = c->d_model, L = c->n_layers;
  for (int i = 0; i < 2; i++) {
    b->wslot[i] = take(d, lo->layer_numel * 2, &t);
    b->gacc[i] = take(d, lo->layer_numel * 4, &t);
    b->gout[i] = take(d, lo->layer_numel * 2, &t);
  }
  b->gscratch = take(d, eng_cuda_grad_finish_scratch_bytes(lo->head_numel), &t); // the largest shard
  b->sumsq = take(d, (L + 2) * sizeof(double), &t);
  b->emb = take(d, lo->embed.numel * 2, &t);
  b->head = take(d, lo->head_numel * 2, &t);
  b->gemb = take(d, lo->embed.numel * 4, &t);
  b->ghead = take(d, lo->head_numel * 4, &t);
  b->gbig = take(d, lo->embed.numel * 2, &t);
  b->ids = take(d, n * 4, &t);
  b->targets = take(d, n * 4, &t);
  b->x = take(d, (L + 1) * n * dm * 2, &t);
  b->dxa = take(d, n * dm * 2, &t);
  b->dxb = take(d, n * dm * 2, &t);
  b->hn = take(d, nm * dm * 2, &t);
  b->dh = take(d, nm * dm * 2, &t);
  b->ybuf = take(d, nm * dm * 2, &t);
  b->hrstd = take(d, nm * 4, &t);
  b->acts = take(d, eng_cuda_layer_acts_bytes(c, MB, T), &t);
  b->scr = take(d, eng_cuda_layer_scratch_bytes(c, MB, T), &t);
  b->hscratch = take(d, eng_cuda_head_loss_scratch_bytes(c->vocab), &t);
  b->loss = take(d, sizeof(double), &t);
  return t;
}

// Host side: pinned bf16 weights per layer and the gradient store.
typedef struct host {
  uint16_t **w, **g;
  uint16_t *gemb, *ghead;
} host;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float scale) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return scale * (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// Weights of std ~0.02 (norm weights 1): one random layer, copied to all.
static void fill_layer(uint16_t *w, const eng_layout *lo) {
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++) {
    const eng_tensor *t = &lo->layer_proto[p];
    int norm = p == ENG_P_ATTN_NORM || p == ENG_P_MLP_NORM || p == ENG_P_QNORM || p == ENG_P_KNORM;
    for (size_t i = 0; i < t->numel; i++) w[t->off + i] = eng_km_bf16_from_f32(norm ? 1.0f : frand(0.035f));
  }
}

typedef struct stream_state {
  cudaStream_t cs, in, out;
  cudaEvent_t wready[2], wfree[2], gready[2], gsent[2], big_ready, big_sent;
  int seq;     // index of the next weight copy in the step's schedule
  int gseq;    // index of the next layer gradient
} stream_state;

// Queues the copy of layer `layer`'s weights into slot seq&1 once the
// compute that last read that slot is done.
static void weights_in(stream_state *s, const bufs *b, const host *h, size_t bytes, int layer) {
  int k = s->seq++ & 1;
  CU(cudaStreamWaitEvent(s->in, s->wfree[k], 0));
  CU(cudaMemcpyAsync(b->wslot[k], h->w[layer], bytes, cudaMemcpyHostToDevice, s->in));
  CU(cudaEventRecord(s->wready[k], s->in));
}

int main(void) {
  eng_err e0 = {0};
  int ndev = eng_cuda_device_count(&e0);
  if (ndev <= 0) {
    fprintf(stderr, "bench_gpu: SKIP: %s\n", ndev < 0 ? e0.msg : "no CUDA device");
    return 77;
  }
  double t_setup = now();
  eng_config c = {.arch = ENG_ARCH_QWEN2, .vocab = 152064, .d_model = 3584, .n_layers = 28, .n_heads = 28,
                  .n_kv_heads = 4, .head_dim = 128, .d_ff = 18944, .max_pos = 32768, .rope_theta = 1e6f,
                  .rms_eps = 1e-6f, .init_std = 0.02f, .tie_embeddings = 0, .qkv_bias = 1, .qk_norm = 0};
  eng_layout lo;
  eng_layout_init(&lo, &c);
  const int L = c.n_layers, d = c.d_model, V = c.vocab;
  const size_t n = (size_t)B * T, nm = (size_t)MB * T, lbytes = lo.layer_numel * 2;
  const double params = (double)lo.total_numel, tokens = (double)n;
  OK(eng_cuda_check_config(&c, &err));

  eng_dev *dev;
  OK(eng_dev_open_cuda(&dev, 0, 0, &err));
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  bufs b;
  size_t need = carve(&b, NULL, &c, &lo);
  OK(eng_dev_reserve(dev, need, "the benchmark's buffers", &err));
  carve(&b, dev, &c, &lo);
  eng_cuda_ctx *cx = eng_dev_cuda_ctx(dev);
  stream_state s = {.cs = eng_dev_cuda_stream(dev, ENG_CUDA_STREAM_COMPUTE),
                    .in = eng_dev_cuda_stream(dev, ENG_CUDA_STREAM_COPY_IN),
                    .out = eng_dev_cuda_stream(dev, ENG_CUDA_STREAM_COPY_OUT)};
  for (int k = 0; k < 2; k++) {
    CU(cudaEventCreateWithFlags(&s.wready[k], cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&s.wfree[k], cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&s.gready[k], cudaEventDisableTiming));
    CU(cudaEventCreateWithFlags(&s.gsent[k], cudaEventDisableTiming));
  }
  CU(cudaEventCreateWithFlags(&s.big_ready, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&s.big_sent, cudaEventDisableTiming));

  // Host memory: pinned weights and gradient store (what crosses PCIe).
  host h = {malloc(L * sizeof(uint16_t *)), malloc(L * sizeof(uint16_t *)), NULL, NULL};
  for (int l = 0; l < L; l++) {
    OK(eng_dev_cuda_host_alloc(dev, (void **)&h.w[l], lbytes, &err));
    OK(eng_dev_cuda_host_alloc(dev, (void **)&h.g[l], lbytes, &err));
  }
  OK(eng_dev_cuda_host_alloc(dev, (void **)&h.gemb, lo.embed.numel * 2, &err));
  OK(eng_dev_cuda_host_alloc(dev, (void **)&h.ghead, lo.head_numel * 2, &err));
  fill_layer(h.w[0], &lo);
  for (int l = 1; l < L; l++) memcpy(h.w[l], h.w[0], lbytes);
  // The resident embedding and head, and the batch, uploaded once.
  uint16_t *tmp = malloc(lo.embed.numel * 2);
  for (size_t i = 0; i < lo.embed.numel; i++) tmp[i] = eng_km_bf16_from_f32(frand(0.035f));
  CU(cudaMemcpy(b.emb, tmp, lo.embed.numel * 2, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < lo.final_norm.numel; i++) tmp[i] = eng_km_bf16_from_f32(1.0f);
  CU(cudaMemcpy(b.head, tmp, lo.head_numel * 2, cudaMemcpyHostToDevice));
  free(tmp);
  int32_t *ids = malloc(n * 4), *targets = malloc(n * 4);
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(((uint64_t)i * 2654435761u) % (uint64_t)V);
  for (size_t i = 0; i < n; i++) targets[i] = (i + 1) % T ? ids[i + 1] : -1;
  CU(cudaMemcpy(b.ids, ids, n * 4, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(b.targets, targets, n * 4, cudaMemcpyHostToDevice));
  CU(cudaDeviceSynchronize());
  t_setup = now() - t_setup;

  // Copy bandwidths of one layer's weights, alone.
  cudaEvent_t e0c, e1c;
  CU(cudaEventCreate(&e0c));
  CU(cudaEventCreate(&e1c));
  float ms_in = 0, ms_out = 0;
  CU(cudaEventRecord(e0c, s.in));
  CU(cudaMemcpyAsync(b.wslot[0], h.w[0], lbytes, cudaMemcpyHostToDevice, s.in));
  CU(cudaEventRecord(e1c, s.in));
  CU(cudaEventSynchronize(e1c));
  CU(cudaEventElapsedTime(&ms_in, e0c, e1c));
  CU(cudaEventRecord(e0c, s.out));
  CU(cudaMemcpyAsync(h.g[0], b.gout[0], lbytes, cudaMemcpyDeviceToHost, s.out));
  CU(cudaEventRecord(e1c, s.out));
  CU(cudaEventSynchronize(e1c));
  CU(cudaEventElapsedTime(&ms_out, e0c, e1c));

  cudaEvent_t ev[4];
  for (int i = 0; i < 4; i++) CU(cudaEventCreate(&ev[i]));
  double t_fwd = 0, t_loss = 0, t_bwd = 0, t_step = 0, loss = 0;
  size_t peak_used = 0;
  eng_cuda_layer_acts acts;
  eng_cuda_layer_scratch scr;
  eng_cuda_layer_acts_bind(&acts, b.acts, &c, MB, T);
  eng_cuda_layer_scratch_bind(&scr, b.scr, &c, MB, T);
  const eng_bf16 *fnorm = b.head + lo.final_norm.off, *wmat = b.head + lo.lm_head.off;
  int count = 0;
  for (size_t i = 0; i < n; i++) count += targets[i] >= 0;

  for (int step = 0; step < WARMUP + STEPS; step++) {
    double w0 = now();
    s.seq = 0, s.gseq = 0;
    // The step's weight schedule: layers 0..L-1 forward, L-1..0 backward.
    weights_in(&s, &b, &h, lbytes, 0);
    weights_in(&s, &b, &h, lbytes, 1);
    CU(cudaEventRecord(ev[0], s.cs));
    OK(eng_cuda_zero(b.loss, sizeof(double), s.cs, &err));
    OK(eng_cuda_zero(b.gemb, lo.embed.numel * 4, s.cs, &err));
    OK(eng_cuda_zero(b.ghead, lo.head_numel * 4, s.cs, &err));
    OK(eng_cuda_embed_fwd(b.x, b.emb, b.ids, (int)n, d, V, s.cs, &err));
    for (int l = 0; l < L; l++) {
      int k = l & 1;
      CU(cudaStreamWaitEvent(s.cs, s.wready[k], 0));
      for (int i = 0; i < B / MB; i++) {
        const eng_bf16 *xin = b.x + ((size_t)l * n + (size_t)i * nm) * d;
        eng_bf16 *xout = b.x + ((size_t)(l + 1) * n + (size_t)i * nm) * d;
        OK(eng_cuda_layer_fwd(cx, &c, &lo, b.wslot[k], xin, xout, NULL, MB, T, &acts, &err));
      }
      CU(cudaEventRecord(s.wfree[k], s.cs));
      // Next in the schedule for this slot: layer l+2, or the backward's first ones.
      int next = l + 2 < L ? l + 2 : 2 * L - 1 - (l + 2);
      weights_in(&s, &b, &h, lbytes, next);
    }
    CU(cudaEventRecord(ev[1], s.cs));
    // Loss fused with the head, per micro-batch; its gradient lands in dxa.
    for (int i = 0; i < B / MB; i++) {
      const eng_bf16 *xl = b.x + ((size_t)L * n + (size_t)i * nm) * d;
      OK(eng_cuda_rmsnorm_fwd(b.hn, b.hrstd, xl, fnorm, (int)nm, d, c.rms_eps, s.cs, &err));
      OK(eng_cuda_head_loss(cx, b.dh, b.ghead + lo.lm_head.off, NULL, b.loss, b.hn, wmat, b.targets + i * nm,
                            (int)nm, d, V, 1.0f / (float)count, b.hscratch, &err));
      OK(eng_cuda_rmsnorm_bwd(cx, b.dxa + (size_t)i * nm * d, b.ghead + lo.final_norm.off, b.dh, xl, fnorm, b.hrstd,
                              (int)nm, d, 0, &err));
    }
    CU(cudaEventRecord(ev[2], s.cs));
    // The head's gradient leaves while the backward runs.
    OK(eng_cuda_grad_finish(b.gbig, b.sumsq + L + 1, b.ghead, lo.head_numel, b.gscratch, s.cs, &err));
    CU(cudaEventRecord(s.big_ready, s.cs));
    CU(cudaStreamWaitEvent(s.out, s.big_ready, 0));
    CU(cudaMemcpyAsync(h.ghead, b.gbig, lo.head_numel * 2, cudaMemcpyDeviceToHost, s.out));
    CU(cudaEventRecord(s.big_sent, s.out));
    eng_bf16 *dy = b.dxa, *dx = b.dxb;
    for (int l = L - 1; l >= 0; l--) {
      int k = s.gseq & 1, j = (L + (L - 1 - l)) & 1; // weight slot of this schedule entry
      CU(cudaStreamWaitEvent(s.cs, s.wready[j], 0));
      // The accumulator was last read by the finish of gradient gseq-2,
      // earlier on this stream; its output buffer by that copy-out.
      OK(eng_cuda_zero(b.gacc[k], lo.layer_numel * 4, s.cs, &err));
      for (int i = 0; i < B / MB; i++) {
        size_t o = (size_t)i * nm * d;
        const eng_bf16 *xin = b.x + (size_t)l * n * d + o;
        OK(eng_cuda_layer_fwd(cx, &c, &lo, b.wslot[j], xin, b.ybuf, NULL, MB, T, &acts, &err));
        OK(eng_cuda_layer_bwd(cx, &c, &lo, b.wslot[j], b.gacc[k], xin, &acts, dy + o, dx + o, NULL, MB, T, &scr, &err));
      }
      CU(cudaEventRecord(s.wfree[j], s.cs));
      int e_next = L + (L - 1 - l) + 2; // the schedule entry that reuses slot j
      if (e_next < 2 * L) weights_in(&s, &b, &h, lbytes, 2 * L - 1 - e_next);
      CU(cudaStreamWaitEvent(s.cs, s.gsent[k], 0));
      OK(eng_cuda_grad_finish(b.gout[k], b.sumsq + l + 1, b.gacc[k], lo.layer_numel, b.gscratch, s.cs, &err));
      CU(cudaEventRecord(s.gready[k], s.cs));
      CU(cudaStreamWaitEvent(s.out, s.gready[k], 0));
      CU(cudaMemcpyAsync(h.g[l], b.gout[k], lbytes, cudaMemcpyDeviceToHost, s.out));
      CU(cudaEventRecord(s.gsent[k], s.out));
      s.gseq++;
      eng_bf16 *t = dy;
      dy = dx, dx = t;
    }
    OK(eng_cuda_embed_bwd(b.gemb, dy, b.ids, (int)n, d, V, s.cs, &err));
    CU(cudaStreamWaitEvent(s.cs, s.big_sent, 0));
    OK(eng_cuda_grad_finish(b.gbig, b.sumsq, b.gemb, lo.embed.numel, b.gscratch, s.cs, &err));
    CU(cudaEventRecord(s.big_ready, s.cs));
    CU(cudaStreamWaitEvent(s.out, s.big_ready, 0));
    CU(cudaMemcpyAsync(h.gemb, b.gbig, lo.embed.numel * 2, cudaMemcpyDeviceToHost, s.out));
    CU(cudaEventRecord(ev[3], s.cs));
    OK(eng_dev_cuda_sync(dev, &err));
    double wall = now() - w0;
    size_t fr, tot;
    CU(cudaMemGetInfo(&fr, &tot));
    peak_used = tot - fr > peak_used ? tot - fr : peak_used;
    float f, lo_ms, bw;
    CU(cudaEventElapsedTime(&f, ev[0], ev[1]));
    CU(cudaEventElapsedTime(&lo_ms, ev[1], ev[2]));
    CU(cudaEventElapsedTime(&bw, ev[2], ev[3]));
    double lsum, sq[64];
    CU(cudaMemcpy(&lsum, b.loss, sizeof lsum, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(sq, b.sumsq, (L + 2) * sizeof(double), cudaMemcpyDeviceToHost));
    double gn = 0;
    for (int i = 0; i < L + 2; i++) gn += sq[i];
    printf("step %d%s: %.3f s (fwd %.3f, loss %.3f, bwd %.3f), loss %.4f, |g| %.4g\n", step,
           step < WARMUP ? " (warm-up)" : "", wall, f / 1e3, lo_ms / 1e3, bw / 1e3, lsum / count, sqrt(gn));
    if (step >= WARMUP) {
      t_fwd += f / 1e3 / STEPS, t_loss += lo_ms / 1e3 / STEPS, t_bwd += bw / 1e3 / STEPS, t_step += wall / STEPS;
      loss = lsum / count;
    }
  }

  double tflops = 6.0 * params * tokens / t_step / 1e12;
  printf("\nmodel      Qwen2.5-7B shape: %.3fe9 parameters (%.3fe9 without the embedding), bf16 weights streamed\n",
         params / 1e9, (params - (double)lo.embed.numel) / 1e9);
  printf("device     %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  printf("batch      %d x %d = %.0f tokens per step, micro-batches of %d sequences\n", B, T, tokens, MB);
  printf("step       %.3f s: forward %.3f s, loss+head %.3f s, backward (with recompute) %.3f s\n", t_step, t_fwd,
         t_loss, t_bwd);
  printf("throughput %.0f tokens/s, %.1f TFLOPS (6·params·tokens), MFU %.1f%% of %.0f\n", tokens / t_step, tflops,
         100.0 * tflops / PEAK_TFLOPS, PEAK_TFLOPS);
  printf("copies     one layer (%.0f MB bf16): in %.2f ms (%.1f GB/s), out %.2f ms (%.1f GB/s); %d per step each way\n",
         lbytes / 1e6, ms_in, lbytes / ms_in / 1e6, ms_out, lbytes / ms_out / 1e6, 2 * L);
  printf("memory     arena %.2f GiB, peak GPU use %.2f GiB; pinned host %.1f GB; setup %.1f s\n",
         need / 1073741824.0, peak_used / 1073741824.0, (2.0 * L * lbytes + 2.0 * lo.embed.numel * 2) / 1e9, t_setup);
  printf("loss       %.4f (random weights and tokens)\n", loss);
  const char *out = getenv("OUT");
  if (out && *out) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bench_gpu.json", out);
    FILE *f = fopen(path, "w");
    if (f) {
      fprintf(f,
              "{\"model\": \"qwen2.5-7b-shape\", \"params\": %.0f, \"batch\": %d, \"seq\": %d, \"micro_batch\": %d,\n"
              " \"step_s\": %.4f, \"fwd_s\": %.4f, \"loss_s\": %.4f, \"bwd_s\": %.4f, \"tokens_per_s\": %.1f,\n"
              " \"tflops\": %.2f, \"mfu\": %.4f, \"copy_in_gbps\": %.2f, \"copy_out_gbps\": %.2f,\n"
              " \"arena_gib\": %.3f, \"peak_gpu_gib\": %.3f, \"device\": \"%s\"}\n",
              params, B, T, MB, t_step, t_fwd, t_loss, t_bwd, tokens / t_step, tflops, tflops / PEAK_TFLOPS,
              lbytes / ms_in / 1e6, lbytes / ms_out / 1e6, need / 1073741824.0, peak_used / 1073741824.0, prop.name);
      fclose(f);
    }
  }
  for (int l = 0; l < L; l++) eng_dev_cuda_host_free(h.w[l]), eng_dev_cuda_host_free(h.g[l]);
  eng_dev_cuda_host_free(h.gemb);
  eng_dev_cuda_host_free(h.ghead);
  eng_dev_close(dev);
  return 0;
}

#endif
