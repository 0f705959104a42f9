// synthetic_trace.h: the million-event trace both viewer benchmarks measure, and what a loaded
// model keeps in memory. bench_viewer_load times loading it; bench_viewer_frame draws it.
//
// Each rank repeats a realistic mix: a cpu_op enclosing a cudaLaunchKernel (cuda_runtime) with an
// ac2g flow to its kernel, kernels rotating over 3 streams (compute, comm with NCCL collective
// args, copy as gpu_memcpy), a "GPU memory" counter every 4th launch and a ProfilerStep#
// annotation every 1000 launches.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>

#include "trace_model.h"

namespace shardlab::viewer::synthetic {

// The name PyTorch's profiler gives a rank's file (tensorboard_trace_handler's default,
// <hostname>_<pid>.<milliseconds>.pt.trace.json): the benchmarks' directories look like a real
// job's, and the viewer ranks the files by their distributedInfo.
inline std::string kineto_file_name(int rank) {
  std::string name = "node0_";
  name.append(std::to_string(4100 + rank)).append(".1700000000123.pt.trace.json");
  return name;
}

// Writes one rank's file with about `events` events; returns the count written.
inline size_t write_rank(const std::filesystem::path& path, int rank, size_t events) {
  std::ofstream out(path, std::ios::binary);
  const int host = 100000 + rank;
  out << "{\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": " << rank << ", \"world_size\": 8},\n"
      << " \"schemaVersion\": 1, \"displayTimeUnit\": \"ns\",\n \"traceEvents\": [\n"
      << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << host << ", \"tid\": 0, \"args\": {\"name\": \"rank "
      << rank << " CPU\"}}";
  for (int s = 7; s <= 9; ++s)
    out << ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": " << s << ", \"args\": {\"name\": \"stream "
        << s << "\"}}";
  static const char* kOps[] = {"aten::mm", "aten::add", "aten::gelu", "aten::layer_norm", "aten::softmax"};
  static const char* kKernels[] = {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
                                   "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
                                   "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"};
  char line[1024];
  size_t written = 0;
  int64_t t = 1000000;  // ns
  uint64_t corr = static_cast<uint64_t>(rank) * 1000000000ull;
  size_t launch = 0;
  const auto us = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  while (written < events) {
    if (launch % 1000 == 0) {
      std::snprintf(line, sizeof line,
                    ",\n{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#%zu\", \"pid\": %d, "
                    "\"tid\": 1, \"ts\": %.3f, \"dur\": %.3f}",
                    launch / 1000, host, us(t), us(1000 * 12000 - 1));
      out << line;
      ++written;
    }
    ++corr;
    const int stream = 7 + static_cast<int>(launch % 3);
    std::snprintf(line, sizeof line,
                  ",\n{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": %d, \"tid\": 1, \"ts\": %.3f, "
                  "\"dur\": 10.000, \"args\": {\"External id\": %zu, \"Sequence number\": %zu, \"Fwd thread id\": 1}}"
                  ",\n{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": %d, \"tid\": 1, "
                  "\"ts\": %.3f, \"dur\": 5.000, \"args\": {\"correlation\": %llu}}"
                  ",\n{\"ph\": \"s\", \"id\": %llu, \"pid\": %d, \"tid\": 1, \"ts\": %.3f, \"cat\": \"ac2g\", \"name\": \"ac2g\"}",
                  kOps[launch % 5], host, us(t), launch, launch, host, us(t + 2000),
                  static_cast<unsigned long long>(corr), static_cast<unsigned long long>(corr), host, us(t + 2000));
    out << line;
    const int64_t k0 = t + 6000;
    if (stream == 8) {
      std::snprintf(line, sizeof line,
                    ",\n{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclDevKernel_AllReduce_Sum_bf16_RING_LL\", "
                    "\"pid\": 0, \"tid\": 8, \"ts\": %.3f, \"dur\": 11.500, \"args\": {\"device\": 0, \"stream\": 8, "
                    "\"correlation\": %llu, \"Collective name\": \"allreduce\", \"In msg nelems\": 1048576, "
                    "\"Out msg nelems\": 1048576, \"Group size\": 8, \"dtype\": \"BFloat16\", \"Process Group Name\": "
                    "\"0\", \"Process Group Ranks\": [0, 1, 2, 3, 4, 5, 6, 7], \"Seq\": %zu}}",
                    us(k0), static_cast<unsigned long long>(corr), launch);
    } else {
      std::snprintf(line, sizeof line,
                    ",\n{\"ph\": \"X\", \"cat\": \"%s\", \"name\": \"%s\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                    "\"dur\": 11.500, \"args\": {\"device\": 0, \"stream\": %d, \"correlation\": %llu, \"grid\": [132, 1, 1], "
                    "\"block\": [128, 1, 1], \"registers per thread\": 168, \"bytes\": 4194304}}",
                    stream == 9 ? "gpu_memcpy" : "kernel", stream == 9 ? "Memcpy HtoD (Pageable -> Device)" : kKernels[launch % 3],
                    stream, us(k0), stream, static_cast<unsigned long long>(corr));
    }
    out << line;
    std::snprintf(line, sizeof line,
                  ",\n{\"ph\": \"f\", \"id\": %llu, \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"cat\": \"ac2g\", "
                  "\"name\": \"ac2g\", \"bp\": \"e\"}",
                  static_cast<unsigned long long>(corr), stream, us(k0));
    out << line;
    written += 5;
    if (launch % 4 == 0) {
      std::snprintf(line, sizeof line,
                    ",\n{\"ph\": \"C\", \"name\": \"GPU memory\", \"pid\": 0, \"ts\": %.3f, \"args\": {\"allocated\": %zu, "
                    "\"reserved\": 4294967296}}",
                    us(k0), (launch % 1000) * 1048576);
      out << line;
      ++written;
    }
    ++launch;
    t += 12000;
  }
  out << "\n]}\n";
  return written;
}

// The model's heap and object footprint, from sizeof and container sizes.
inline size_t footprint(const TraceModel& m) {
  size_t bytes = sizeof m;
  for (const std::string& s : m.names) bytes += sizeof s + s.capacity();
  for (const std::string& s : m.args_json) bytes += sizeof s + (s.capacity() > 15 ? s.capacity() : 0);
  for (const Rank& r : m.ranks) {
    bytes += sizeof r;
    for (const Lane& l : r.lanes) bytes += sizeof l + l.slices.capacity() * sizeof(Slice);
    for (const Counter& c : r.counters) bytes += sizeof c + c.samples.capacity() * sizeof c.samples[0];
    bytes += r.flows.capacity() * sizeof(Flow);
    bytes += r.timeline.slices.capacity() * sizeof(shardlab::DeviceSlice);
    bytes += r.timeline.collectives.capacity() * sizeof(shardlab::CollectiveRecord);
    bytes += r.timeline.memory.capacity() * sizeof(shardlab::MemorySample);
  }
  return bytes;
}
}  // namespace shardlab::viewer::synthetic
