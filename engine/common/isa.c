#include "common/isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int eng_isa_supported(eng_isa isa) {
  switch (isa) {
  case ENG_ISA_SCALAR: return 1;
#if defined(__x86_64__)
  case ENG_ISA_AVX2: return __builtin_cpu_supports("avx2");
  case ENG_ISA_AVX512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  default: return 0;
  }
}

static pthread_once_t auto_once = PTHREAD_ONCE_INIT;
static eng_isa auto_isa;

static void auto_init(void) {
  const char *env = getenv("TRAIND_ISA");
  for (eng_isa i = ENG_ISA_SCALAR; i <= ENG_ISA_AVX512; i++)
    if (env && strcmp(env, eng_isa_name(i)) == 0 && eng_isa_supported(i)) {
      auto_isa = i;
      return;
    }
  auto_isa = eng_isa_supported(ENG_ISA_AVX512) ? ENG_ISA_AVX512
             : eng_isa_supported(ENG_ISA_AVX2) ? ENG_ISA_AVX2
                                               : ENG_ISA_SCALAR;
}

eng_isa eng_isa_resolve(eng_isa isa) {
  if (isa != ENG_ISA_AUTO) return eng_isa_supported(isa) ? isa : ENG_ISA_AUTO;
  pthread_once(&auto_once, auto_init);
  return auto_isa;
}

const char *eng_isa_name(eng_isa isa) {
  switch (isa) {
  case ENG_ISA_SCALAR: return "scalar";
  case ENG_ISA_AVX2: return "avx2";
  case ENG_ISA_AVX512: return "avx512";
  default: return "auto";
  }
}
