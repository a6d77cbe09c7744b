// The FLOP rate MFU is quoted against (DESIGN §8): on the cpu backend a
// large fp32 product ([1024, 1024]·[1024, 1024]ᵀ through eng_k_linear_fwd,
// the route and threads the run's products take): the fastest of those
// run in a tenth of a second, once per process (a run raises its copy to any
// step that executed faster: the measurement ran under another's load); a
// GPU's comes from its profile (the spec's peak_flops).
#ifndef ENG_COMPUTE_PEAK_H
#define ENG_COMPUTE_PEAK_H

// FLOP/s; thread-safe, measured on the first call.
double eng_cpu_peak_flops(void);

#endif
