// The CUDA path's library loading, which needs no GPU: cuBLAS is opened on first use
// (common/cuda/cublas_library.h), so a missing or mismatched library would otherwise show only
// on a GPU machine, at the first matmul. Compiled into the unit tests where nvcc is found.
#include <catch2/catch.hpp>

#include <string>

#include "cuda/cublas_library.h"

using namespace shardlab;

TEST_CASE("cuda: cuBLAS opens on first use with every function the kernels call", "[cuda]") {
  const cuda::CublasLibrary& api = cuda::cublas();
  CHECK(api.path.rfind("libcublas.so.", 0) == 0);
  CHECK(api.create != nullptr);
  CHECK(api.set_math_mode != nullptr);
  CHECK(api.set_stream != nullptr);
  CHECK(api.sgemm != nullptr);
  CHECK(api.gemm_ex != nullptr);
  REQUIRE(api.status_string != nullptr);
  // A call into the library that needs no GPU: it answers in its own words ("the library was
  // not initialized" in CUDA 13), one for each status.
  const std::string not_initialized = api.status_string(CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(!not_initialized.empty());
  CHECK(not_initialized != api.status_string(CUBLAS_STATUS_SUCCESS));
  CHECK(&cuda::cublas() == &api);  // opened once
}
