// Chapter 00: streams and events.
//
//   cmake --preset default && cmake --build --preset default
//   mpirun -np 4 build/chapters/shardlab_ch00                 # simulated GPU, real math
//   mpirun -np 4 build/chapters/shardlab_ch00 --race          # also the case with a missing wait
//
// A GPU runs work from queues called streams. The CPU only *enqueues*: a launch returns long
// before the kernel runs, so the CPU races ahead of the GPU until something makes it wait.
// Work on one stream runs in order; work on two streams may overlap, and nothing orders it
// unless you say so with an event: record(A) marks a point in stream A, wait(B, e) makes B's
// later work wait for that point. This lesson moves data in, computes on it and moves results
// out, chunk by chunk, four ways:
//
//   (a) serialized      one stream: every copy and kernel waits for the one before it
//   (b) overlapped      a copy stream and a compute stream, ordered by events: copies of one
//                       chunk run while another chunk computes
//   (c) missing wait    (b) without the compute stream's wait: fast and wrong on a real GPU;
//                       the simulator's race check names the two ops and the buffer (--race)
//   (d) late event      (b) with the "input ready" event recorded one call too late, after
//                       the copy-out of the previous chunk: a false dependency that costs time
//
// On two or more ranks each step ends with an all-reduce of the last chunk's results, so a
// collective across ranks appears in the trace: it starts when the last rank arrives.

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "00_streams_events/polynomial.h"
#include "run/job.h"
#include "trace/metrics.h"
#include "model/rng.h"

using namespace shardlab;

namespace {

struct Options {
  int64_t chunks = 6;        // how many pieces the data moves in
  int64_t chunk_kib = 256;   // size of one chunk
  int64_t degree = 3000;     // polynomial degree: the kernel's arithmetic per element
  bool race = false;         // also run case (c), the missing wait
};
Options opt;

void add_flags(Flags& f) {
  f.add_int("chunks", &opt.chunks, 1, 4096, "number of chunks the data moves in");
  f.add_int("chunk-kib", &opt.chunk_kib, 1, 1 << 20, "size of one chunk in KiB");
  f.add_int("degree", &opt.degree, 1, 1 << 20, "polynomial degree: FLOPs per element / 2");
  f.add_bool("race", &opt.race, "also run case (c): the overlapped pipeline without its wait");
}

// Host data: pinned input and output (pinned memory is what lets cudaMemcpyAsync be async).
struct HostData {
  Tensor x, y;        // [chunks * chunk_elems]
  std::vector<float> reference;
  int64_t chunk_elems = 0;
};

// Device buffers of one case: the copy stream allocates the inputs it fills, the compute
// stream the outputs it writes (the caching allocator keeps a pool per stream).
struct Buffers {
  std::vector<Tensor> in, out;
};

Buffers allocate(Device& dev, Stream& copy, int64_t chunk_elems) {
  Buffers b;
  for (int64_t i = 0; i < opt.chunks; ++i) {
    b.in.push_back(dev.empty({chunk_elems}, DType::f32, copy, "in[" + std::to_string(i) + "]"));
    b.out.push_back(dev.empty({chunk_elems}, DType::f32, dev.compute_stream(), "out[" + std::to_string(i) + "]"));
  }
  return b;
}

void release(Device& dev, Buffers& b) {
  for (auto& t : b.in) dev.free(t);
  for (auto& t : b.out) dev.free(t);
}

Tensor chunk(const Tensor& t, int64_t i, int64_t elems) { return t.view(i * elems, {elems}); }

// (a) Everything on the compute stream. Safe without a single event, and slow: the copy engine
// and the SMs take turns.
void serialized(Device& dev, const HostData& h, Buffers& b) {
  Stream& compute = dev.compute_stream();
  for (int64_t i = 0; i < opt.chunks; ++i) {
    dev.memcpy(compute, b.in[i], chunk(h.x, i, h.chunk_elems));
    ch00::polynomial(dev, compute, b.in[i], b.out[i], opt.degree);
    dev.memcpy(compute, chunk(h.y, i, h.chunk_elems), b.out[i]);
  }
}

// (b), (c), (d): the copy stream brings chunk i+1 in while the compute stream works on chunk i,
// then takes chunk i's result out.
enum class Pipeline { correct, missing_wait, late_event };

void overlapped(Device& dev, Stream& copy, const HostData& h, Buffers& b, Pipeline kind) {
  // lab: begin 00.overlap "the overlapped pipeline: two streams ordered by events" #the-idea uses(dev, copy, h, b, kind)
  Stream& compute = dev.compute_stream();
  std::vector<Event> in_ready(opt.chunks);

  dev.memcpy(copy, b.in[0], chunk(h.x, 0, h.chunk_elems));
  in_ready[0] = dev.record(copy);  // "chunk 0 is on the device"
  for (int64_t i = 0; i < opt.chunks; ++i) {
    const bool next = i + 1 < opt.chunks;
    // Start bringing the next chunk in before computing this one: that is the overlap.
    if (next) dev.memcpy(copy, b.in[i + 1], chunk(h.x, i + 1, h.chunk_elems));
    if (next && kind != Pipeline::late_event) in_ready[i + 1] = dev.record(copy);

    // The compute stream must not read chunk i before its copy finished. Leaving this wait
    // out is case (c): on a GPU the kernel would read whatever bytes happen to be there.
    if (kind != Pipeline::missing_wait) dev.wait(compute, in_ready[i]);
    ch00::polynomial(dev, compute, b.in[i], b.out[i], opt.degree);
    const Event done = dev.record(compute);  // "chunk i's result is ready"

    // The copy stream takes the result out only after the kernel wrote it.
    dev.wait(copy, done);
    dev.memcpy(copy, chunk(h.y, i, h.chunk_elems), b.out[i]);

    // Case (d): the "next chunk is in" event recorded here marks the end of the copy-out too,
    // which waited for this chunk's kernel. The next kernel now waits for all of that: a
    // dependency the data never needed.
    if (next && kind == Pipeline::late_event) in_ready[i + 1] = dev.record(copy);
  }
  // lab: end
}

// How many results differ from the reference, bit for bit (the same math in the same order).
// Every correct case must have none.
int64_t wrong_outputs(const Device& dev, const HostData& h, const std::string& what, bool must_match) {
  if (!dev.computes()) return 0;
  const float* y = h.y.f32();
  int64_t wrong = 0;
  for (size_t i = 0; i < h.reference.size(); ++i) {
    if (y[i] == h.reference[i]) continue;
    if (must_match)
      throw std::runtime_error(what + ": output element " + std::to_string(i) + " is " + std::to_string(y[i]) +
                               ", expected " + std::to_string(h.reference[i]));
    ++wrong;
  }
  return wrong;
}

// Inputs depend on the seed and the rank, so every rank moves different numbers.
std::vector<float> make_inputs(int64_t n, int64_t seed, int rank) {
  std::vector<float> x(static_cast<size_t>(n));
  Rng rng(derive_seed(static_cast<uint64_t>(seed), static_cast<uint64_t>(rank)));
  for (auto& v : x) v = static_cast<float>(rng.uniform());  // [0, 1)
  return x;
}

void lesson(Job& job) {
  Device& dev = job.device();
  job.set_strategy(opt.race ? "streams+race" : "streams");
  job.expect_races(opt.race);  // case (c) races on purpose: its reports are the lesson
  // A second stream for copies. Its work can run at the same time as the compute stream's.
  Stream& copy = dev.create_stream("copy");

  HostData h;
  h.chunk_elems = opt.chunk_kib * 1024 / 4;
  const int64_t n = opt.chunks * h.chunk_elems;
  h.x = dev.host_empty({n}, DType::f32, "x (pinned)");
  h.y = dev.host_empty({n}, DType::f32, "y (pinned)");
  if (dev.computes()) {
    const std::vector<float> x = make_inputs(n, job.flags().seed, job.rank());
    std::copy(x.begin(), x.end(), h.x.f32());
    h.reference.resize(x.size());
    ch00::polynomial_cpu(x.data(), h.reference.data(), n, opt.degree);
  }
  job.say("each step: " + std::to_string(opt.chunks) + " chunks of " + std::to_string(opt.chunk_kib) +
          " KiB in, a degree-" + std::to_string(opt.degree) + " polynomial on each, results out\n");

  struct Case {
    std::string key, title;
    Pipeline kind;
    bool one_stream;
  };
  std::vector<Case> cases = {{"a_serialized", "(a) serialized: one stream", Pipeline::correct, true},
                             {"b_overlapped", "(b) overlapped: copy + compute streams", Pipeline::correct, false},
                             {"d_late_event", "(d) late event: a false dependency", Pipeline::late_event, false}};
  if (opt.race) cases.insert(cases.begin() + 2, {"c_missing_wait", "(c) missing wait: a race", Pipeline::missing_wait, false});

  std::vector<int64_t> gpu_ns(cases.size()), cpu_issue_ns(cases.size());
  int64_t race_wrong_outputs = 0;  // results of case (c) that differ from the reference
  Tensor reduced;  // the last chunk's results, all-reduced across ranks
  for (int64_t step = 0; step < job.steps(); ++step) {
    Job::Step s(job, step);
    for (size_t c = 0; c < cases.size(); ++c) {
      HostScope scope(dev, cases[c].title);
      Buffers b = allocate(dev, copy, h.chunk_elems);
      const int64_t t0 = dev.now_ns();
      if (cases[c].one_stream) serialized(dev, h, b);
      else overlapped(dev, copy, h, b, cases[c].kind);
      // The CPU is done issuing long before the GPU is done running: it ran ahead.
      cpu_issue_ns[c] = dev.now_ns() - t0;
      // The host waits here for both streams; reading y before this would read garbage.
      dev.synchronize();
      gpu_ns[c] = dev.now_ns() - t0;
      // The race case is the one allowed wrong results: on a GPU its kernels may read an input
      // before its copy lands. The sim runs ops in launch order, so there it has none.
      const bool racy = cases[c].kind == Pipeline::missing_wait;
      race_wrong_outputs += wrong_outputs(dev, h, cases[c].title, !racy);
      release(dev, b);
    }
    if (job.world_size() > 1) {
      // A collective: every rank contributes its last chunk's results; the sum arrives on all.
      HostScope scope(dev, "all-reduce of the last chunk");
      reduced = dev.empty({h.chunk_elems}, DType::f32, dev.compute_stream(), "reduced");
      dev.memcpy(dev.compute_stream(), reduced, chunk(h.y, opt.chunks - 1, h.chunk_elems));
      job.world().all_reduce(reduced, ReduceOp::sum, dev.compute_stream());
      Tensor back = dev.host_empty({h.chunk_elems}, DType::f32, "reduced (pinned)");
      dev.memcpy(dev.compute_stream(), back, reduced);
      dev.synchronize();
      if (dev.computes()) {
        // Every rank's inputs are known from (seed, rank): check the sum against them.
        const int64_t first = (opt.chunks - 1) * h.chunk_elems;
        std::vector<double> expected(static_cast<size_t>(h.chunk_elems), 0.0);
        std::vector<float> y(static_cast<size_t>(h.chunk_elems));
        for (int r = 0; r < job.world_size(); ++r) {
          const std::vector<float> x = make_inputs(n, job.flags().seed, r);
          ch00::polynomial_cpu(x.data() + first, y.data(), h.chunk_elems, opt.degree);
          for (size_t i = 0; i < y.size(); ++i) expected[i] += y[i];
        }
        for (size_t i = 0; i < y.size(); ++i)
          if (std::abs(back.f32()[i] - expected[i]) > 1e-5 * std::abs(expected[i]) + 1e-6)
            throw std::runtime_error("all-reduce: element " + std::to_string(i) + " is " +
                                     std::to_string(back.f32()[i]) + ", expected " + std::to_string(expected[i]));
      }
      dev.host_free(back);
      dev.free(reduced);
    }
  }

  job.say("\nfigures of the last step (" + std::string(dev.simulated() ? "simulated" : "measured") + " time):");
  for (size_t c = 0; c < cases.size(); ++c)
    job.figure(cases[c].key + "_us", static_cast<double>(gpu_ns[c]) / 1e3, "us", cases[c].title + ": start to host sync");
  job.figure("b_cpu_issue_us", static_cast<double>(cpu_issue_ns[1]) / 1e3, "us",
             "(b): time the CPU spent issuing; the rest of (b) it waited in synchronize");
  job.figure("overlap_speedup", static_cast<double>(gpu_ns[0]) / static_cast<double>(gpu_ns[1]), "x",
             "(a) / (b): what the second stream buys");
  const size_t d = cases.size() - 1;
  job.figure("false_dependency_cost_us", static_cast<double>(gpu_ns[d] - gpu_ns[1]) / 1e3, "us",
             "(d) - (b): time lost to the late event");
  if (job.world_size() > 1) {
    const CollectiveMetrics last = collective_metrics(dev.trace().timeline()).back();
    job.figure("allreduce_us", last.time_us, "us", "the all-reduce of one chunk across all ranks");
    job.figure("allreduce_busbw_GBps", last.busbw_GBps, "GB/s", "its bus bandwidth: small messages are latency bound");
  }
  job.figure("race_reports", static_cast<double>(dev.race_reports().size()), "",
             opt.race ? "races the sim found (case c)" : "races the sim found (run with --race to see one)");
  if (opt.race && dev.computes())
    job.figure("race_wrong_outputs", static_cast<double>(race_wrong_outputs), "",
               "results of case (c), over all steps, that differ from the reference: the race in the data");
  dev.host_free(h.x);
  dev.host_free(h.y);
}

}  // namespace

int main(int argc, char** argv) {
  const ChapterInfo chapter{.id = "00_streams_events",
                            .title = "Streams and events",
                            .default_steps = 3};
  return run_chapter(argc, argv, chapter, add_flags, lesson);
}
