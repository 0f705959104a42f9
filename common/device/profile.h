// profile.h: a hardware profile, the constants of the simulated GPU's cost model.
//
// Profiles are JSON files in common/device/profiles/ (or any path given to --profile). Every constant
// is an object {"value": ..., "unit": ..., "source": ...}: where the number comes from is part
// of the lesson, so a profile without sources does not load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlab {

// One kind of link a group of ranks communicates over, with NCCL's ring model constants.
struct LinkTier {
  std::string name;              // "NVLink4", "PCIe 4.0 x16", "InfiniBand NDR 400 Gb/s"
  double busbw_GBps = 0;         // ring bus bandwidth per GPU (Simple protocol)
  double simple_base_us = 0;     // NCCL ring base latency, Simple protocol
  double simple_hop_us = 0;      // per ring step, Simple protocol
  double ll_base_us = 0;         // LL protocol: lower latency...
  double ll_hop_us = 0;
  double ll_bw_fraction = 0;     // ...at a fraction of the bandwidth
};

// The network between nodes has three more of NCCL's constants (src/graph/tuning.cc, tag
// v2.23.4-1), because a ring that spans nodes is charged differently (cost_model.h, RingPath).
struct NetworkTier : LinkTier {
  double simple_hop_exposed_us = 0;  // a network step when each node holds one rank of the ring:
  double ll_hop_exposed_us = 0;      // NCCL then charges the network's Tree latencies
  double net_overhead_us = 0;        // CPU cost of posting one network transfer (the proxy thread):
                                     // no step of a ring that spans nodes is cheaper (x3 for Simple)
};

struct Profile {
  std::string name;
  std::string description;
  std::string path;  // the file it was loaded from

  // GPU
  std::string gpu_name;
  int64_t memory_bytes = 0;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
  double peak_tflops_f32 = 0;        // CUDA cores (PyTorch's default fp32 matmul: no TF32)
  double peak_tflops_bf16 = 0;       // tensor cores, dense
  double matmul_efficiency = 0;      // fraction of peak a large GEMM reaches
  double attention_efficiency = 0;   // fraction of peak a fused attention kernel (forward, backward) reaches
  double elementwise_efficiency = 0; // fraction of peak FLOP/s for non-GEMM kernels
  double hbm_GBps = 0;
  double kernel_overhead_us = 0;     // launch-to-start latency and tail of one kernel on the GPU

  // Host
  double launch_us = 0;              // CPU time of one kernel launch (framework + cudaLaunchKernel)
  double runtime_call_us = 0;        // CPU time of a cheap runtime call (event record, stream wait)
  double malloc_us = 0;              // cudaMalloc of a new segment
  double free_us = 0;                // cudaFree of a cached segment
  double h2d_GBps = 0, d2h_GBps = 0; // pinned host <-> device
  double memcpy_latency_us = 0;

  // Topology
  int gpus_per_node = 0;
  int nodes = 0;
  int nics_per_node = 0;  // network links of a node, shared by its GPUs (inter is one NIC)
  LinkTier intra;  // within a node
  NetworkTier inter;  // a group that spans nodes

  int max_ranks() const { return gpus_per_node * nodes; }
  int node_of(int rank) const { return rank / gpus_per_node; }
};

// Loads a profile by name (common/device/profiles/<name>.json, or $SHARDLAB_PROFILES/<name>.json) or
// by path (anything containing '/' or ending in .json). Errors name the file and the field.
Profile load_profile(const std::string& name_or_path);
// The names of the profiles shipped in common/device/profiles/, sorted.
std::vector<std::string> profile_names();

}  // namespace shardlab
