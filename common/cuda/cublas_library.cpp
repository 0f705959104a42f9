// cublas_library.cpp: cuBLAS opened at run time (cublas_library.h says why).
#include "cublas_library.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace shardlab::cuda {

// Opened on first use, not linked. Its libcublasLt carries some 185 MB of data whose
// relocation, at load, costs every process about 0.1 s of CPU and 27,000 page faults, even a
// sim run that never multiplies on a GPU: 16 ranks on a laptop's two cores paid over a second
// before main(). (cudart and NCCL load in a few milliseconds, so they stay linked.)
namespace {

#define SHARDLAB_STR2(x) #x
#define SHARDLAB_STR(x) SHARDLAB_STR2(x)

CublasLibrary open_cublas() {
  // The soname of the toolkit we compiled against, found as the loader finds linked libraries
  // (LD_LIBRARY_PATH, the executable's run path), else in that toolkit's library directory.
  const std::string soname = "libcublas.so." SHARDLAB_STR(CUBLAS_VER_MAJOR);
  std::string tried = soname;
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef SHARDLAB_CUDA_LIBRARY_DIR
  if (lib == nullptr) {
    const std::string path = std::string(SHARDLAB_CUDA_LIBRARY_DIR) + "/" + soname;
    tried += " or " + path;
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (lib == nullptr)
    throw std::runtime_error("cannot open cuBLAS (" + tried + "): " + dlerror() +
                             "; put the CUDA toolkit's library directory on LD_LIBRARY_PATH");
  CublasLibrary api;
  api.path = soname;
  auto symbol = [&](const char* name) {
    void* f = dlsym(lib, name);
    if (f == nullptr) throw std::runtime_error("cuBLAS (" + soname + ") has no " + name);
    return f;
  };
  // The names behind cublas_v2.h's macros (cublasCreate is cublasCreate_v2, ...).
  api.create = reinterpret_cast<decltype(api.create)>(symbol("cublasCreate_v2"));
  api.set_math_mode = reinterpret_cast<decltype(api.set_math_mode)>(symbol("cublasSetMathMode"));
  api.set_stream = reinterpret_cast<decltype(api.set_stream)>(symbol("cublasSetStream_v2"));
  api.sgemm = reinterpret_cast<decltype(api.sgemm)>(symbol("cublasSgemm_v2"));
  api.gemm_ex = reinterpret_cast<decltype(api.gemm_ex)>(symbol("cublasGemmEx"));
  api.status_string = reinterpret_cast<decltype(api.status_string)>(symbol("cublasGetStatusString"));
  return api;
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary api = open_cublas();  // thread-safe, once; a failure throws again next call
  return api;
}

}  // namespace shardlab::cuda
