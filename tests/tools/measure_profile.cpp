// measure_profile: a sim profile measured from the GPU in this machine.
//
// Starts from a profile file (--base, for what one GPU cannot measure: the datasheet peaks, the
// node's topology and its links) and replaces every constant a single GPU can measure, each with
// its source saying how and where it was measured:
//   gpu:   name, memory, SMs, compute capability (cudaGetDeviceProperties); matmul_efficiency
//          (cuBLAS SGEMM 8192^3 TFLOP/s over the base's fp32 peak); attention_efficiency
//          (shardlab's fp32 FlashAttention-2 kernels, cuda/attention_kernels.cuh, at GPT-2 small's
//          shape: B 4, 12 heads, T 1024, hs 64, causal; FLOPs as model/attention.cpp charges them,
//          over the base's fp32 peak); hbm_GBps (a 1 GiB
//          device-to-device copy reads and writes every byte); kernel_overhead_us (back-to-back
//          tiny kernels on the GPU's own clock)
//   host:  launch_us (CPU time of one op launched through shardlab's CUDA device), runtime_call_us
//          (cudaEventRecord), malloc_us and free_us (cudaMalloc, cudaFree of a 20 MiB segment), h2d/d2h_GBps (256 MiB
//          from/to pinned memory), memcpy_latency_us (a 4-byte copy)
// The result is written where --out says (common/device/profiles/<name>.json to ship it); the sim's
// --profile then predicts this GPU, and bench_cuda_ops shows how close.
//
//   cmake --build --preset default --target measure_profile
//   build/tests/measure_profile --base h100-8 --name h100-measured --out common/device/profiles/h100-measured.json
// Without a visible GPU it prints why and exits 77.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/check.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"
#include "cuda/kernels.h"
#include "../gpu/cuda_timing.h"
#include "run/flags.h"
#include "model/ops.h"

using namespace shardlab;
using nlohmann::json;

namespace {

double host_us_per_call(int calls, const std::function<void()>& call) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
}

// Device microseconds per call of `work` on stream s.
double device_us_per_call(cudaStream_t s, int reps, const std::function<void()>& work) {
  return device_ms_per_call(s, reps, work) * 1e3;
}

std::string fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

template <class T>
void set(json& node, T value, const std::string& source) {
  node["value"] = value;
  node["source"] = source;
}

}  // namespace

int main(int argc, char** argv) {
  std::string base = "h100-8", name = "measured", out = "measured.json";
  Flags flags("measure_profile");
  flags.add_string("base", &base, "the profile to start from (a name in common/device/profiles/ or a path)");
  flags.add_string("name", &name, "the new profile's name");
  flags.add_string("out", &out, "where to write it");
  try {
    if (!flags.parse(argc, argv)) {
      std::cout << flags.usage();
      return 0;
    }
  } catch (const FlagError& e) {
    std::cerr << "measure_profile: error: " << e.what() << "\n";
    return 2;
  }
  if (skipped_without_gpu()) return kSkippedExitCode;

  try {
    const Profile base_profile = load_profile(base);
    json p;
    {
      std::ifstream in(base_profile.path);
      p = json::parse(in);
    }
    CudaDevice dev(base_profile, 0, 1, 0, 0);
    Stream& stream = dev.compute_stream();
    const cudaStream_t s = CudaDevice::handle(stream);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    const std::string gpu = dev.profile().gpu_name;
    const std::string by = "measured on " + gpu + " by tests/tools/measure_profile.cpp, " + date + ": ";

    p["name"] = name;
    p["description"] = "Measured from one " + gpu + "; topology and links from " + base_profile.name + ".";
    json& g = p["gpu"];
    g["name"] = gpu;
    set(g["memory_bytes"], dev.profile().memory_bytes, by + "cudaGetDeviceProperties totalGlobalMem");
    set(g["sm_count"], dev.profile().sm_count, by + "cudaGetDeviceProperties multiProcessorCount");
    g["compute_capability"]["value"] =
        std::to_string(dev.profile().compute_major) + "." + std::to_string(dev.profile().compute_minor);
    g["compute_capability"]["source"] = by + "cudaGetDeviceProperties major.minor";

    // SGEMM 8192^3 through the same cuBLAS call the ops use, against the datasheet peak.
    const int64_t n = 8192;
    Tensor a = dev.empty({n, n}, DType::f32, stream, "a"), b = dev.empty({n, n}, DType::f32, stream, "b"),
           c = dev.empty({n, n}, DType::f32, stream, "c");
    for (Tensor* t : {&a, &b, &c}) ops::fill(dev, stream, *t, 0.001f);
    const double gemm_us = device_us_per_call(s, 5, [&] { cuda::matmul_forward(c.f32(), a.f32(), b.f32(), nullptr, n, n, n, s); });
    const double tflops = 2.0 * n * n * n / gemm_us / 1e6;
    set(g["matmul_efficiency"], tflops / base_profile.peak_tflops_f32,
        by + "cuBLAS SGEMM 8192^3 at " + std::to_string(tflops) + " TFLOP/s over the base's fp32 peak");
    for (Tensor* t : {&a, &b, &c}) dev.free(*t);

    // Attention: the fused forward and backward kernels the ops launch, at GPT-2 small's shape with
    // the chapters' sequence length, causal. FLOPs as ops::attention_forward / attention_backward
    // charge them (4 hs and 8 hs per unmasked query-key pair); one efficiency for both, as the sim has.
    {
      const int64_t B = 4, NH = 12, T = 1024, hs = 64;
      const double pairs = static_cast<double>(B * NH) * static_cast<double>(T) * static_cast<double>(T + 1) / 2;
      auto head = [&](const char* what) { return dev.empty({B, NH, T, hs}, DType::f32, stream, what); };
      Tensor q = head("q"), k = head("k"), v = head("v"), o = head("out"), dout = head("dout"), dq = head("dq"),
             dk = head("dk"), dv = head("dv");
      Tensor lse = dev.empty({B, NH, T}, DType::f32, stream, "lse");
      for (Tensor* t : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) ops::fill(dev, stream, *t, 0.001f);
      const double fwd_us = device_us_per_call(s, 10, [&] {
        cuda::attention_forward(o.f32(), lse.f32(), q.f32(), k.f32(), v.f32(), B, NH, {0, T, T}, {0, T, T}, hs, true, s);
      });
      const double bwd_us = device_us_per_call(s, 10, [&] {
        cuda::attention_backward(dq.f32(), dk.f32(), dv.f32(), dout.f32(), q.f32(), k.f32(), v.f32(), o.f32(),
                                 lse.f32(), B, NH, {0, T, T}, {0, T, T}, hs, true, s);
      });
      const double fwd_tflops = 4.0 * hs * pairs / fwd_us / 1e6, bwd_tflops = 8.0 * hs * pairs / bwd_us / 1e6;
      const double attn_tflops = 12.0 * hs * pairs / (fwd_us + bwd_us) / 1e6;
      set(g["attention_efficiency"], attn_tflops / base_profile.peak_tflops_f32,
          by + "shardlab's fp32 FlashAttention-2 kernels (cuda/attention_kernels.cuh: 64 x 64 tiles, online "
               "softmax, dq by atomics; Dao's FlashAttention library has no fp32 path) at B 4, 12 heads, T 1024, "
               "hs 64, causal: forward " + fixed(fwd_tflops, 2) +
              " TFLOP/s, backward " + fixed(bwd_tflops, 2) + ", both " + fixed(attn_tflops, 2) +
              " TFLOP/s over the base's fp32 peak (FLOPs as model/attention.cpp counts them: 4 hs forward, 8 hs "
              "backward per unmasked query-key pair)");
      for (Tensor* t : {&q, &k, &v, &o, &dout, &dq, &dk, &dv, &lse}) dev.free(*t);
    }

    // HBM: a 1 GiB device-to-device copy moves every byte in and out.
    const size_t big = size_t{1} << 30;
    Tensor src = dev.empty({static_cast<int64_t>(big / 4)}, DType::f32, stream, "src"),
           dst = dev.empty({static_cast<int64_t>(big / 4)}, DType::f32, stream, "dst");
    const double copy_us = device_us_per_call(s, 10, [&] { cuda::copy(dst.data, src.data, big, s); });
    set(g["hbm_GBps"], 2.0 * static_cast<double>(big) / copy_us / 1e3, by + "1 GiB cudaMemcpyAsync device to device, read + write");
    dev.free(src);
    dev.free(dst);

    // A tiny kernel, back to back: what one kernel costs the GPU beyond its work. Filled with ones:
    // zeros are a cudaMemsetAsync (kernels.cu), not a kernel.
    Tensor tiny = dev.empty({1}, DType::f32, stream, "tiny");
    const double tiny_us = device_us_per_call(s, 1000, [&] { cuda::fill(tiny.f32(), 1, 1.0f, s); });
    set(g["kernel_overhead_us"], tiny_us, by + "1000 one-element fill kernels back to back, per kernel");

    // Host costs.
    json& h = p["host"];
    const double launch = host_us_per_call(10000, [&] { ops::fill(dev, stream, tiny, 1.0f); });
    dev.synchronize();
    set(h["launch_us"], launch, by + "CPU time of ops::fill on the CUDA device (event brackets and trace included)");
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    set(h["runtime_call_us"], host_us_per_call(10000, [&] { CUDA_CHECK(cudaEventRecord(e, s)); }), by + "cudaEventRecord");
    CUDA_CHECK(cudaEventDestroy(e));
    std::vector<void*> segments(20, nullptr);
    size_t next = 0;
    set(h["malloc_us"], host_us_per_call(20, [&] { CUDA_CHECK(cudaMalloc(&segments[next++], 20 << 20)); }),
        by + "cudaMalloc of a 20 MiB segment");
    next = 0;
    set(h["free_us"], host_us_per_call(20, [&] { CUDA_CHECK(cudaFree(segments[next++])); }),
        by + "cudaFree of a 20 MiB segment");

    const size_t mid = size_t{256} << 20;
    void* pinned = nullptr;
    void* device = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, mid));
    CUDA_CHECK(cudaMalloc(&device, mid));
    auto copy_GBps = [&](cudaMemcpyKind kind, void* to, const void* from) {
      return static_cast<double>(mid) / device_us_per_call(s, 5, [&] { CUDA_CHECK(cudaMemcpyAsync(to, from, mid, kind, s)); }) / 1e3;
    };
    set(h["h2d_GBps"], copy_GBps(cudaMemcpyHostToDevice, device, pinned), by + "256 MiB from pinned memory");
    set(h["d2h_GBps"], copy_GBps(cudaMemcpyDeviceToHost, pinned, device), by + "256 MiB to pinned memory");
    set(h["memcpy_latency_us"],
        device_us_per_call(s, 1000, [&] { CUDA_CHECK(cudaMemcpyAsync(device, pinned, 4, cudaMemcpyHostToDevice, s)); }),
        by + "4-byte copies from pinned memory, back to back");
    CUDA_CHECK(cudaFreeHost(pinned));
    CUDA_CHECK(cudaFree(device));
    dev.free(tiny);

    {
      // Closed (so flushed) before it is read back: the first H200 run read it still buffered,
      // half written, and failed on a file that was fine a moment later.
      std::ofstream file(out);
      file << p.dump(2) << "\n";
      file.close();
      if (!file) throw std::runtime_error("cannot write " + out);
    }
    load_profile(out);  // it must load as a profile
    std::cout << p.dump(2) << "\nwrote " << out << "\n";
  } catch (const std::exception& e) {
    std::cerr << "measure_profile: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
