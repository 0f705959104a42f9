// Chapter 01: ring all-reduce by hand, against a naive all-reduce and the library's.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch01                     # checks, then a sweep to 16 MiB
//   mpirun -np 8 build/chapters/shardlab_ch01 --compute skip      # the sweep to 1 GiB, time only
//
// Data parallel training ends every step by summing gradients across ranks: an all-reduce.
// This lesson builds one from nothing but send/recv pairs (ring_allreduce.h), checks it and a
// naive one against a plain reference, then measures all three the way nccl-tests does:
// for message sizes from 8 B up, the time, the algorithm bandwidth algbw = S / t, and the bus
// bandwidth busbw = algbw x 2(N-1)/N, beside what the latency-bandwidth model predicts.

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // the sweep's rows in summary.json

#include "01_ring_allreduce/ring_allreduce.h"
#include "run/job.h"
#include "comm/mpi_comm.h"

using namespace shardlab;

namespace {

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = 0;  // 0: 1 GiB with --compute skip, 16 MiB with real data
  int64_t warmup = 1;
};
Options opt;

void add_flags(Flags& f) {
  f.add_int("min-bytes", &opt.min_bytes, 4, int64_t{1} << 40, "smallest message of the sweep (bytes, a power of two)");
  f.add_int("max-bytes", &opt.max_bytes, 0, int64_t{1} << 40,
            "largest message of the sweep (0: 1 GiB with --compute skip, 16 MiB with real data)");
  f.add_int("warmup", &opt.warmup, 0, 100, "untimed repetitions before the timed ones (--steps)");
}

enum class Variant { ring, naive, library };
const char* variant_name(Variant v) { return v == Variant::ring ? "ring" : v == Variant::naive ? "naive" : "library"; }

// One all-reduce of `buf` by the chosen algorithm. `scratch` is as large as buf.
void all_reduce(Variant v, Comm& comm, const Tensor& buf, const Tensor& scratch, Stream& s) {
  switch (v) {
    case Variant::ring: ch01::ring_allreduce(comm, buf, scratch, s); break;
    case Variant::naive: ch01::naive_allreduce(comm, buf, scratch, s); break;
    case Variant::library: comm.all_reduce(buf, ReduceOp::sum, s); break;
  }
}

// Part 1: every variant gives the exact sum, for counts that do not divide evenly too.
// Rank r contributes (r + 1) x (i % 7 + 1): small integers, exact in float, any order of sums.
void check(Job& job, Comm& comm, Stream& s) {
  Device& dev = job.device();
  const int n = comm.size();
  const std::vector<int64_t> counts = {0, 1, n - 1, n + 1, 1000, (int64_t{1} << 20) + 3};
  for (Variant v : {Variant::ring, Variant::naive, Variant::library}) {
    for (int64_t count : counts) {
      if (count == 0 && n == 1) continue;  // same as count 1 - 1
      Tensor buf = dev.empty({count}, DType::f32, s, "buf");
      Tensor scratch = dev.empty({count}, DType::f32, s, "scratch");
      Tensor host = dev.host_empty({count}, DType::f32, "host");
      for (int64_t i = 0; i < count; ++i) host.f32()[i] = static_cast<float>((comm.rank() + 1) * (i % 7 + 1));
      dev.memcpy(s, buf, host);
      all_reduce(v, comm, buf, scratch, s);
      dev.memcpy(s, host, buf);
      dev.synchronize();
      const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
      for (int64_t i = 0; i < count; ++i)
        if (host.f32()[i] != ranks_sum * static_cast<float>(i % 7 + 1))
          throw std::runtime_error(std::string(variant_name(v)) + " all-reduce of " + std::to_string(count) +
                                   " elements: element " + std::to_string(i) + " is " + std::to_string(host.f32()[i]) +
                                   ", expected " + std::to_string(ranks_sum * static_cast<float>(i % 7 + 1)));
      dev.host_free(host);
      dev.free(scratch);
      dev.free(buf);
    }
  }
  job.say("check: ring, naive and library all-reduce equal the reference at counts 0, 1, N-1, N+1, 1000, 2^20+3\n");
}

struct Row {
  int64_t bytes;
  double time_us[3];
};

// Part 2: the sweep. Each message size is one ProfilerStep in the trace.
void sweep(Job& job, Comm& comm, Stream& s) {
  Device& dev = job.device();
  const int n = comm.size();
  const int64_t max_bytes = opt.max_bytes ? opt.max_bytes : (dev.computes() ? int64_t{16} << 20 : int64_t{1} << 30);
  std::vector<int64_t> sizes;
  for (int64_t b = opt.min_bytes; b <= max_bytes; b *= 2) sizes.push_back(b);
  const RingPath path = ring_path(dev.profile(), comm.world_ranks());

  // One buffer of the largest size; each message is a view of its front.
  Tensor buf = dev.empty({max_bytes / 4}, DType::f32, s, "buf");
  Tensor scratch = dev.empty({max_bytes / 4}, DType::f32, s, "scratch");
  if (dev.computes()) ops::fill(dev, s, buf, 1.0f);

  job.say("sweep on " + std::to_string(n) + " ranks, " + path.link.name + " (profile " + dev.profile().name +
          "), float sum, " + std::to_string(job.steps()) + " timed repetition(s) after " +
          std::to_string(opt.warmup) + " warm-up, " + (dev.simulated() ? "simulated" : "measured") + " time\n");
  job.say("                           ring                 |          naive            |         library           |     model (NCCL ring)");
  job.say("   size(B)     count   time(us) algbw  busbw  |  time(us) algbw  busbw   |  time(us) algbw  busbw   |  time(us) algbw  busbw");
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  nlohmann::json rows = nlohmann::json::array();
  auto add_row = [&](const char* variant, int64_t bytes, double t_us) {
    const double algbw = t_us > 0 ? static_cast<double>(bytes) / t_us / 1e3 : 0.0;  // GB/s
    rows.push_back({{"variant", variant}, {"bytes", bytes}, {"count", bytes / 4}, {"time_us", t_us},
                    {"algbw_GBps", algbw}, {"busbw_GBps", algbw * factor}});
    return std::make_pair(algbw, algbw * factor);
  };

  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t bytes = sizes[i], count = bytes / 4;
    const Tensor msg = buf.view(0, {count});
    Row row{bytes, {0, 0, 0}};
    {
      Job::Step step(job, static_cast<int64_t>(i), static_cast<int64_t>(sizes.size()), false);
      for (Variant v : {Variant::ring, Variant::naive, Variant::library}) {
        HostScope scope(dev, std::string(variant_name(v)) + " " + human_bytes(static_cast<double>(bytes)));
        for (int64_t w = 0; w < opt.warmup; ++w) all_reduce(v, comm, msg, scratch, s);
        // Line the ranks up, then time the repetitions with events on the stream.
        dev.synchronize();
        comm.barrier();
        const Event start = dev.record(s);
        for (int64_t r = 0; r < job.steps(); ++r) all_reduce(v, comm, msg, scratch, s);
        const Event end = dev.record(s);
        dev.synchronize(end);
        row.time_us[static_cast<int>(v)] = dev.elapsed_us(start, end) / static_cast<double>(job.steps());
      }
    }
    const double model_us = static_cast<double>(collective_ns(path, CollectiveKind::all_reduce, static_cast<double>(bytes))) / 1e3;
    char line[256];
    int at = std::snprintf(line, sizeof line, "%10lld %9lld", static_cast<long long>(bytes), static_cast<long long>(count));
    for (int v = 0; v < 3; ++v) {
      const auto [alg, bus] = add_row(variant_name(static_cast<Variant>(v)), bytes, row.time_us[v]);
      at += std::snprintf(line + at, sizeof line - static_cast<size_t>(at), "  %9.2f %6.2f %6.2f  |", row.time_us[v], alg, bus);
    }
    const auto [alg, bus] = add_row("model", bytes, model_us);
    // NCCL times both protocols and takes the faster: LL below a size, Simple above.
    rows.back()["protocol"] = collective_protocol(path, CollectiveKind::all_reduce, static_cast<double>(bytes));
    std::snprintf(line + at, sizeof line - static_cast<size_t>(at), "  %9.2f %6.2f %6.2f", model_us, alg, bus);
    job.say(line);
  }
  job.results()["sweep"] = rows;
  // Where the model (and so the library, which the sim prices with it) changes protocol.
  std::vector<nlohmann::json> model_rows;
  for (const auto& r : rows)
    if (r["variant"] == "model") model_rows.push_back(r);
  for (size_t i = 1; i < model_rows.size(); ++i)
    if (model_rows[i - 1]["protocol"] == "LL" && model_rows[i]["protocol"] == "SIMPLE")
      job.say("\nprotocol: LL up to " + human_bytes(model_rows[i - 1]["bytes"].get<double>()) + ", Simple from " +
              human_bytes(model_rows[i]["bytes"].get<double>()) +
              " (LL: less latency per step, " + std::to_string(static_cast<int>(path.link.ll_bw_fraction * 100 + 0.5)) +
              "% of the bandwidth)");
  // What the model charges before any byte moves: NCCL's ring latency (cost_model.h).
  const auto AR = CollectiveKind::all_reduce;
  const int steps = ring_steps(AR, n), crossing = ring_network_steps(AR, path.nodes);
  char latency[192];
  std::snprintf(latency, sizeof latency, "latency (model): Simple %.1f us, LL %.1f us: %d ring steps", collective_latency_us(path, AR, false),
                collective_latency_us(path, AR, true), steps);
  job.say(std::string(latency) + (path.nodes > 1 ? ", " + std::to_string(crossing) + " of them across the network"
                                                 : ", each an intra-node hop"));

  // Headline figures: the largest message (bandwidth bound) and the smallest (latency bound, at
  // the default sizes); a sweep of one size has only the first.
  const auto find = [&](const char* variant, int64_t bytes, const char* key) {
    for (const auto& r : rows)
      if (r["variant"] == variant && r["bytes"] == bytes) return r[key].get<double>();
    return 0.0;
  };
  const int64_t big = sizes.back(), small = sizes.front();
  job.say("\nfigures (" + (big == small ? human_bytes(static_cast<double>(big)) + " messages):"
                                         : "the largest message, " + human_bytes(static_cast<double>(big)) +
                                               ", and the smallest, " + std::to_string(small) + " B):"));
  for (const char* v : {"ring", "naive", "library", "model"})
    job.figure(std::string(v) + "_busbw_GBps", find(v, big, "busbw_GBps"), "GB/s",
               std::string(v) + ": bus bandwidth at " + human_bytes(static_cast<double>(big)));
  if (small < big)
    for (const char* v : {"ring", "naive", "library", "model"})
      job.figure(std::string(v) + "_small_us", find(v, small, "time_us"), "us",
                 std::string(v) + ": time of the " + std::to_string(small) + " B all-reduce" +
                     (small <= 4096 ? " (all latency)" : ""));
  job.figure("link_busbw_GBps", path.link.busbw_GBps, "GB/s", "the profile's bus bandwidth for this group (" + path.link.name + ")");
  dev.free(scratch);
  dev.free(buf);
}

void lesson(Job& job) {
  Device& dev = job.device();
  job.set_strategy("ring vs naive vs library");
  // All communication on one stream, as NCCL runs one communicator's work in order.
  Stream& s = dev.create_stream("comm");
  if (dev.computes()) check(job, job.world(), s);
  sweep(job, job.world(), s);
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "01_ring_allreduce",
                            .title = "Ring all-reduce by hand",
                            .default_steps = 2};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
