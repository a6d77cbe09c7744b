# The CUDA kernels (engine/kernels/cuda, .cu) and the cuda backend
# (engine/backend/cuda, C on the CUDA runtime's C API) as one static library, shared by the full build (engine/CMakeLists.txt) and the
# engine-only GPU build (tests/gpu/CMakeLists.txt), so both compile the same
# sources with the same flags. host_lib provides the C pieces the CUDA code
# calls (eng_err_set); it may depend on the new library in turn (static
# libraries may form a cycle).
#
# Flags: sm_90 machine code plus PTX for newer chips; no FMA contraction
# (--fmad=false), as -ffp-contract=off does for C (DESIGN §6): a fused
# multiply-add happens only where the code writes fmaf, so the shared
# per-element math (kernels/kmath_hd.h) rounds the same on host and device.
# IEEE division and sqrt are nvcc's defaults and stay on.
function(traind_add_cuda_library name engine_dir host_lib)
  file(GLOB srcs CONFIGURE_DEPENDS ${engine_dir}/kernels/cuda/*.cu ${engine_dir}/backend/cuda/*.c)
  add_library(${name} STATIC ${srcs})
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "90-real;90-virtual" CUDA_STANDARD 17
                                           CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${name} PUBLIC ${engine_dir})
  target_compile_options(${name} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false;-Werror=all-warnings;-Xcompiler=-Wall,-Wextra,-Werror,-ffp-contract=off>")
  target_link_libraries(${name} PUBLIC CUDA::cudart CUDA::cublasLt ${host_lib})
  # NCCL (dist/coll.h) where the toolkit has it: else the collectives over
  # it are left out (backend/cuda/coll_nccl.c), and dist/coll.c says so.
  find_library(TRAIND_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(TRAIND_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(TRAIND_NCCL_LIBRARY AND TRAIND_NCCL_INCLUDE)
    target_include_directories(${name} PUBLIC ${TRAIND_NCCL_INCLUDE})
    target_link_libraries(${name} PUBLIC ${TRAIND_NCCL_LIBRARY})
    target_compile_definitions(${name} PUBLIC TRAIND_HAVE_NCCL=1)
    target_compile_definitions(${host_lib} PUBLIC TRAIND_HAVE_NCCL=1) # dist/coll.c: no stand-in
  else()
    message(STATUS "NCCL not found beside the CUDA toolkit: building without the NCCL collectives")
    set_source_files_properties(${engine_dir}/backend/cuda/coll_nccl.c PROPERTIES HEADER_FILE_ONLY ON)
  endif()
endfunction()
