// Viewer model on real PyTorch profiler (Kineto) traces (tests/data, sources in its README):
//   - kineto_v100_2021_excerpt.json: events of a real GPU run (Tesla V100, PyTorch of May 2021,
//     from Kineto's own test data): kernels and a memcpy on stream 7, CPU ops on the main and the
//     autograd thread, launch -> kernel flows, ProfilerStep#2. That PyTorch wrote categories
//     "Kernel", "Runtime", "Operator", flows "async"/"launch" and thread ids as strings.
//   - kineto_cpu_torch2.15.pt.trace.json.gz: PyTorch 2.15 on a CPU (this machine has no GPU):
//     today's categories (cpu_op, user_annotation), ProfilerStep#2..4, fwdbwd flows, host
//     [memory] events (host memory, drawn as a counter).
//   - kineto_gpu_synthetic/: a SYNTHETIC two-rank GPU step in Kineto 2.x's spellings (no GPU here
//     to record one): python_function frames, cudaLaunchKernel / cudaLaunchKernelExC with ac2g
//     flows, record_param_comms, ncclDevKernel_* and ncclKernel_* kernels with the collective
//     args, gpu_user_annotation, [memory] for GPU and host (make_kineto_gpu_synthetic.py).
//   - torch_gloo/: real multi-rank runs (PyTorch 2.15, gloo on the CPU), DDP and FSDP on 2 and 4
//     ranks, under the profiler's default file names (make_torch_gloo_traces.py).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "trace/metrics.h"
#include "trace_model.h"

using namespace shardlab;
using namespace shardlab::viewer;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(SHARDLAB_SOURCE_DIR) / "tests" / "data";

const Lane& lane_named(const Rank& r, const std::string& name) {
  for (const Lane& l : r.lanes)
    if (l.name == name) return l;
  FAIL("no lane named " << name);
  throw std::logic_error("unreachable");
}

// "ProfilerStep#2/aten::linear/aten::mm": the slice's name after its ancestors' (by depth).
std::string path_of(const TraceModel& m, const Lane& l, size_t i) {
  std::string path = m.names[l.slices[i].name];
  int depth = l.slices[i].depth;
  for (size_t j = i; j-- > 0 && depth > 0;) {
    if (l.slices[j].depth != depth - 1) continue;
    REQUIRE(l.slices[j].start_us <= l.slices[i].start_us);
    REQUIRE(l.slices[j].end_us >= l.slices[i].end_us);
    path = m.names[l.slices[j].name] + "/" + path;
    --depth;
  }
  return path;
}

// The index of the first slice of the lane with this name (and correlation, if given).
size_t find_slice(const TraceModel& m, const Lane& l, const std::string& name, uint64_t correlation = 0) {
  for (size_t i = 0; i < l.slices.size(); ++i)
    if (m.names[l.slices[i].name] == name && (correlation == 0 || l.slices[i].correlation == correlation)) return i;
  FAIL("no slice " << name << " on " << l.name);
  return 0;
}

// Slices in time order, and none overlaps another at its depth.
void check_nested(const Lane& l) {
  INFO("lane " << l.name);
  std::map<uint16_t, double> last_end;
  for (size_t i = 0; i < l.slices.size(); ++i) {
    const Slice& s = l.slices[i];
    if (i > 0) REQUIRE(l.slices[i - 1].start_us <= s.start_us);
    REQUIRE(s.depth <= l.max_depth);
    if (const auto it = last_end.find(s.depth); it != last_end.end()) REQUIRE(it->second <= s.start_us + 1e-4);
    last_end[s.depth] = s.end_us;
  }
}

}  // namespace

TEST_CASE("kineto: a real GPU trace (V100, PyTorch 2021): streams, threads, flows, steps", "[viewer]") {
  const TraceModel m = load_traces({(kData / "kineto_v100_2021_excerpt.json").string()});
  REQUIRE(m.ranks.size() == 1);
  const Rank& r = m.ranks[0];
  CHECK(m.skipped == 0);
  CHECK(m.events == 49);  // of the 65 events: 47 complete, 2 instants (and 6 metadata, 10 flow ends)
  for (const Lane& l : r.lanes) check_nested(l);

  // Kernels and the memcpy on their stream: one device lane, after every CPU lane.
  const Lane& stream = lane_named(r, "stream 7");
  CHECK(stream.device);
  CHECK(stream.pid == 0);
  CHECK(stream.tid == 7);  // "tid": "stream 7"
  CHECK(stream.process == "python");
  CHECK(&stream == &r.lanes.back());
  REQUIRE(stream.slices.size() == 5);
  CHECK(m.names[stream.slices[0].name] == "Memcpy HtoD (Pageable -> Device)");
  CHECK(stream.slices[0].category == Category::memcpy);
  for (size_t i = 1; i < 5; ++i) CHECK(stream.slices[i].category == Category::compute);
  CHECK(m.names[stream.slices[3].name] == "volta_sgemm_128x32_nt");
  for (const Slice& s : stream.slices) {
    CHECK(s.depth == 0);
    CHECK(s.correlation != 0);
    CHECK(nlohmann::json::parse(m.args_json[s.args])["stream"] == 7);
  }

  // CPU ops on their threads ("tid": "24572" and 24610 are one thread each), nested.
  const Lane& main = lane_named(r, "thread 24572 (python)");
  const Lane& autograd = lane_named(r, "thread 24610 (python)");
  for (const Lane* l : {&main, &autograd}) {
    CHECK(!l->device);
    CHECK(l->pid == 24572);
    CHECK(l->process == "python");
  }
  CHECK(main.tid == 24572);
  CHECK(autograd.tid == 24610);
  CHECK(main.slices.size() == 20);
  CHECK(autograd.slices.size() == 21);
  const size_t step = find_slice(m, main, "ProfilerStep#2");
  CHECK(main.slices[step].depth == 0);
  CHECK(path_of(m, main, find_slice(m, main, "cudaLaunchKernel", 333)) ==
        "ProfilerStep#2/aten::linear/aten::matmul/aten::mm/cudaLaunchKernel");
  CHECK(path_of(m, main, find_slice(m, main, "aten::as_strided")) ==
        "ProfilerStep#2/aten::linear/aten::t/aten::transpose/aten::as_strided");
  CHECK(path_of(m, main, find_slice(m, main, "cudaMemcpyAsync")) == "ProfilerStep#2/aten::to/aten::copy_/cudaMemcpyAsync");
  CHECK(path_of(m, autograd, find_slice(m, autograd, "cudaLaunchKernel", 492)) == "MmBackward/aten::mm/cudaLaunchKernel");
  CHECK(main.slices[find_slice(m, main, "aten::mm")].category == Category::cpu_op);
  CHECK(main.slices[find_slice(m, main, "cudaLaunchKernel")].category == Category::runtime);
  CHECK(main.max_depth == 4);
  CHECK(autograd.max_depth == 3);

  // Every launch's flow reaches its kernel (or copy): the runtime call and the GPU work share
  // the flow's id as their correlation.
  REQUIRE(r.flows.size() == 5);
  std::map<uint64_t, std::string> launched;
  for (const Flow& f : r.flows) {
    INFO("flow " << f.id);
    const Lane& from = r.lanes[static_cast<size_t>(f.from_lane)];
    const Lane& to = r.lanes[static_cast<size_t>(f.to_lane)];
    CHECK(!from.device);
    CHECK(&to == &stream);
    REQUIRE(f.from_slice >= 0);
    REQUIRE(f.to_slice >= 0);
    const Slice& call = from.slices[static_cast<size_t>(f.from_slice)];
    const Slice& work = to.slices[static_cast<size_t>(f.to_slice)];
    CHECK(call.category == Category::runtime);
    CHECK(call.correlation == f.id);
    CHECK(work.correlation == f.id);
    CHECK(work.start_us == f.to_us);
    CHECK(call.start_us <= work.start_us);
    launched[f.id] = m.names[call.name];
  }
  CHECK(launched == std::map<uint64_t, std::string>{{311, "cudaMemcpyAsync"},
                                                    {333, "cudaLaunchKernel"},
                                                    {338, "cudaLaunchKernel"},
                                                    {482, "cudaLaunchKernel"},
                                                    {492, "cudaLaunchKernel"}});

  // ProfilerStep#2 is the step; the metrics see the kernels and the copy in it.
  REQUIRE(r.timeline.steps.size() == 1);
  CHECK(r.timeline.steps[0].step == 2);
  CHECK(r.timeline.steps[0].start_us == 1621401187223358.0);
  CHECK(r.timeline.steps[0].end_us == 1621401187223358.0 + 13410);
  REQUIRE(r.timeline.slices.size() == 5);
  for (const DeviceSlice& s : r.timeline.slices) CHECK(s.stream == 7);
  const auto steps = step_metrics(r.timeline);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].compute_us == Approx(3 + 2 + 3 + 2));
  CHECK(steps[0].memcpy_us == Approx(1));
  CHECK(steps[0].comm_us == 0);
}

TEST_CASE("kineto: a real CPU trace (PyTorch 2.15): ops, annotations, steps, flows", "[viewer]") {
  const TraceModel m = load_traces({(kData / "kineto_cpu_torch2.15.pt.trace.json.gz").string()});
  REQUIRE(m.ranks.size() == 1);
  const Rank& r = m.ranks[0];
  CHECK(m.skipped == 0);
  for (const Lane& l : r.lanes) {
    CHECK(!l.device);
    check_nested(l);
  }

  // One Python thread holds the ops; the profiler's own span sits on the "Spans" lane.
  const Lane* thread = nullptr;
  for (const Lane& l : r.lanes)
    if (l.name.starts_with("thread ") && l.name.ends_with(" (python)")) thread = &l;
  REQUIRE(thread != nullptr);
  CHECK(thread->process == "python");
  CHECK(thread->slices.size() > 600);
  CHECK(lane_named(r, "PyTorch Profiler").process == "Spans");

  // Steps 2 to 4, each a ProfilerStep#N annotation enclosing forward, backward and optimizer.
  REQUIRE(r.timeline.steps.size() == 3);
  std::map<std::string, int> annotations;
  for (int k = 0; k < 3; ++k) {
    const StepWindow& w = r.timeline.steps[static_cast<size_t>(k)];
    CHECK(w.step == k + 2);
    const Slice& s = thread->slices[find_slice(m, *thread, "ProfilerStep#" + std::to_string(w.step))];
    CHECK(s.depth == 0);
    CHECK(s.category == Category::annotation);
    CHECK(s.start_us == w.start_us);
    CHECK(s.end_us == w.end_us);
  }
  for (size_t i = 0; i < thread->slices.size(); ++i)
    if (thread->slices[i].category == Category::annotation) ++annotations[path_of(m, *thread, i)];
  CHECK(annotations["ProfilerStep#2/forward"] == 1);
  CHECK(annotations["ProfilerStep#3/backward"] == 1);
  CHECK(annotations["ProfilerStep#4/optimizer"] == 1);
  CHECK(annotations["ProfilerStep#4/optimizer/Optimizer.step#AdamW.step"] == 1);

  // Ops nest under their annotations: nn.Linear's op and the matmul inside it.
  size_t linears = 0;
  for (size_t i = 0; i < thread->slices.size(); ++i) {
    if (m.names[thread->slices[i].name] != "aten::addmm") continue;
    const std::string path = path_of(m, *thread, i);
    INFO(path);
    CHECK(path.ends_with("/forward/aten::linear/aten::addmm"));
    CHECK(thread->slices[i].category == Category::cpu_op);
    ++linears;
  }
  CHECK(linears == 6);  // two layers, three steps
  const Slice& linear = thread->slices[find_slice(m, *thread, "aten::linear")];
  CHECK(nlohmann::json::parse(m.args_json[linear.args])["Input Dims"] == nlohmann::json::parse("[[32, 64], [128, 64], [128]]"));

  // fwdbwd flows: from an op in forward to the op that runs its backward.
  REQUIRE(r.flows.size() == 21);
  for (const Flow& f : r.flows) {
    REQUIRE(f.from_slice >= 0);
    REQUIRE(f.to_slice >= 0);
    const std::string from = path_of(m, r.lanes[static_cast<size_t>(f.from_lane)], static_cast<size_t>(f.from_slice));
    const std::string to = path_of(m, r.lanes[static_cast<size_t>(f.to_lane)], static_cast<size_t>(f.to_slice));
    INFO(from << " -> " << to);
    CHECK(from.find("/forward/") != std::string::npos);
    CHECK(to.find("/backward/") != std::string::npos);
  }

  // Host memory ([memory] with "Device Type": 0) is not GPU memory: a counter of its own, no
  // memory samples for the metrics.
  REQUIRE(r.counters.size() == 1);
  CHECK(r.counters[0].name == "CPU memory allocated");
  CHECK(r.timeline.memory.empty());
  CHECK(r.timeline.slices.empty());
}

TEST_CASE("kineto: Kineto 2.x GPU spellings (synthetic): NCCL kernels, launches, record_param_comms, "
          "gpu_user_annotation, [memory], Python frames", "[viewer]") {
  const TraceModel m = load_traces({(kData / "kineto_gpu_synthetic").string()});
  REQUIRE(m.ranks.size() == 2);
  CHECK(m.not_opened.empty());
  CHECK(m.skipped == 0);
  for (const Rank& r : m.ranks) {
    INFO("rank " << r.rank);
    CHECK(r.rank_from == RankSource::distributed_info);
    CHECK(fs::path(r.file).filename().string().ends_with(".1700000000123.pt.trace.json"));
    for (const Lane& l : r.lanes) check_nested(l);
    const Lane& host = r.lanes.at(0);
    const Lane& compute = lane_named(r, "stream 7");
    const Lane& comm = lane_named(r, "stream 20");
    CHECK(compute.device);
    CHECK(comm.device);

    // Python frames (python_function) hold the ops they called; a launch sits in its op.
    const size_t addmm_launch = find_slice(m, host, "cudaLaunchKernel", 101);
    CHECK(path_of(m, host, addmm_launch) ==
          "ProfilerStep#1/train.py(40): train_step/nn.Module: Linear_0/aten::linear/aten::addmm/cudaLaunchKernel");
    CHECK(host.slices[find_slice(m, host, "nn.Module: Linear_0")].category == Category::cpu_op);
    CHECK(host.slices[addmm_launch].category == Category::runtime);
    const size_t exc = find_slice(m, host, "cudaLaunchKernelExC", 103);
    CHECK(path_of(m, host, exc) == "ProfilerStep#1/train.py(40): train_step/record_param_comms/nccl:all_reduce/cudaLaunchKernelExC");
    CHECK(host.slices[exc].category == Category::runtime);
    CHECK(host.slices[find_slice(m, host, "cudaDeviceSynchronize")].category == Category::runtime);

    // record_param_comms is a CPU op (with the collective's args), not communication time.
    const Slice& rpc = host.slices[find_slice(m, host, "record_param_comms")];
    CHECK(rpc.category == Category::cpu_op);
    CHECK(nlohmann::json::parse(m.args_json[rpc.args])["Collective name"] == "allreduce");

    // Both NCCL kernel spellings are communication, each with its collective record.
    const Slice& ar = comm.slices[find_slice(m, comm, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)")];
    const Slice& ag = comm.slices[find_slice(m, comm, "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)")];
    CHECK(ar.category == Category::comm);
    CHECK(ag.category == Category::comm);
    REQUIRE(r.timeline.collectives.size() == 2);
    const CollectiveRecord& allreduce = r.timeline.collectives[0];
    const CollectiveRecord& allgather = r.timeline.collectives[1];
    CHECK(allreduce.name == "allreduce");
    CHECK(collective_bytes(allreduce) == 65536 * 4);  // Float
    CHECK(allreduce.seq == 1);
    CHECK(allreduce.group == "0");
    CHECK(allgather.name == "allgather");
    CHECK(allgather.dtype_bytes == 2);  // BFloat16
    CHECK(allgather.seq == 2);
    CHECK(allreduce.start_us == ar.start_us);

    // Launch -> kernel flows (ac2g), cudaLaunchKernelExC included.
    REQUIRE(r.flows.size() == 5);
    for (const Flow& f : r.flows) {
      REQUIRE(f.from_slice >= 0);
      REQUIRE(f.to_slice >= 0);
      const Slice& from = r.lanes[static_cast<size_t>(f.from_lane)].slices[static_cast<size_t>(f.from_slice)];
      const Slice& to = r.lanes[static_cast<size_t>(f.to_lane)].slices[static_cast<size_t>(f.to_slice)];
      CHECK(from.correlation == f.id);
      CHECK(to.correlation == f.id);
      CHECK(from.category == Category::runtime);
    }

    // gpu_user_annotation: an annotation on the stream, enclosing its kernels; the step is the
    // CPU's ProfilerStep#1 alone.
    CHECK(compute.slices[0].category == Category::annotation);
    CHECK(m.names[compute.slices[0].name] == "ProfilerStep#1");
    CHECK(compute.max_depth == 1);
    REQUIRE(r.timeline.steps.size() == 1);
    CHECK(r.timeline.steps[0].start_us == host.slices[0].start_us);

    // [memory]: the GPU's as memory samples and counters, the host's as a counter of its own.
    REQUIRE(r.timeline.memory.size() == 2);
    CHECK(r.timeline.memory[1].allocated == 16777216);
    CHECK(r.timeline.memory[1].reserved == 20971520);
    std::map<std::string, size_t> counters;
    for (const Counter& c : r.counters) counters[c.name] = c.samples.size();
    CHECK(counters == std::map<std::string, size_t>{
                          {"CPU memory allocated", 1}, {"GPU memory allocated", 2}, {"GPU memory reserved", 2}});

    // The step's figures: two compute kernels, a copy, two collectives (rank 1 arrives late: shorter).
    const auto steps = step_metrics(r.timeline);
    REQUIRE(steps.size() == 1);
    CHECK(steps[0].compute_us == Approx(350));
    CHECK(steps[0].memcpy_us == Approx(4));
    CHECK(steps[0].comm_us == Approx(r.rank == 0 ? 250 : 210));
    CHECK(steps[0].peak_allocated == 16777216);
  }
}

TEST_CASE("kineto: real multi-rank runs (PyTorch 2.15, gloo): DDP and FSDP on 2 and 4 ranks open one rank per file",
          "[viewer]") {
  for (const auto& [run, world] : {std::pair{"ddp_2ranks", 2}, {"fsdp_2ranks", 2}, {"ddp_4ranks", 4}, {"fsdp_4ranks", 4}}) {
    INFO(run);
    const bool fsdp = std::string(run).starts_with("fsdp");
    const TraceModel m = load_traces({(kData / "torch_gloo" / run).string()});
    REQUIRE(m.ranks.size() == static_cast<size_t>(world));
    CHECK(m.not_opened.empty());
    CHECK(m.skipped == 0);
    for (int k = 0; k < world; ++k) {
      const Rank& r = m.ranks[static_cast<size_t>(k)];
      INFO("rank " << k << " " << r.file);
      CHECK(r.rank == k);
      CHECK(r.rank_from == RankSource::distributed_info);  // the names hold a pid and a time, not the rank
      CHECK(fs::path(r.file).filename().string().ends_with(".pt.trace.json.gz"));
      REQUIRE(r.timeline.steps.size() == 3);
      CHECK(r.timeline.steps[0].step == 2);
      std::map<std::string, int> ops;
      bool gloo_thread = false;
      for (const Lane& l : r.lanes) {
        check_nested(l);
        gloo_thread = gloo_thread || l.name.ends_with("(pt_gloo_runloop)");
        for (const Slice& s : l.slices) ++ops[m.names[s.name]];
      }
      CHECK(gloo_thread);
      if (fsdp) {
        CHECK(ops["c10d::_allgather_base_"] > 0);
        CHECK(ops["c10d::_reduce_scatter_base_"] > 0);
        CHECK(ops["gloo:all_gather"] > 0);
        CHECK(ops["c10d::allreduce_"] == 0);
      } else {
        CHECK(ops["c10d::allreduce_"] > 0);
        CHECK(ops["gloo:all_reduce"] > 0);
        CHECK(ops["c10d::_allgather_base_"] == 0);
      }
      REQUIRE(r.counters.size() == 1);  // host memory
      CHECK(r.counters[0].name == "CPU memory allocated");
    }
  }
}
