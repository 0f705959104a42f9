// cublas_library.h: the cuBLAS functions the kernels call, opened on first use (dlopen), not
// linked. Why: libcublasLt's relocation costs every process about 0.1 s of CPU at load, which
// a sim run, or a rank that never multiplies on a GPU, should not pay (cublas_library.cpp has
// the figures). cudart and NCCL are cheap to load and stay linked.
//
//   CUBLAS_CHECK(cuda::cublas().sgemm(handle, ...));  // as cublasSgemm
#pragma once

#include <cublas_v2.h>

#include <string>

#include "check.h"

namespace shardlab::cuda {

struct CublasLibrary {
  std::string path;  // the soname it was opened by
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*,
                          const float*, int, const float*, int, const float*, float*, int);
  // cublasGemmEx: operands of any cudaDataType (bf16 under mixed precision), accumulated in the
  // compute type.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char* (*status_string)(cublasStatus_t);
};

// Opens cuBLAS once (thread-safe) and returns its functions. Throws std::runtime_error naming
// the library and the loader's reason when it cannot be opened or lacks a function; needs no
// GPU (opening is not initializing).
const CublasLibrary& cublas();

}  // namespace shardlab::cuda

// CUDA_CHECK's twin for cuBLAS: throws std::runtime_error naming the call, the place and
// cuBLAS's own words.
#define CUBLAS_CHECK(call)                                                                         \
  do {                                                                                             \
    const cublasStatus_t status_ = (call);                                                         \
    if (status_ != CUBLAS_STATUS_SUCCESS)                                                          \
      shardlab::cuda::fail(#call, __FILE__, __LINE__, shardlab::cuda::cublas().status_string(status_)); \
  } while (0)
