// sim_device.h: the simulated GPU.
//
// The same chapter code runs on it as on CUDA. Ops do their real math on the CPU at launch
// (or none under --compute skip), and time is virtual and deterministic (README.md, "The
// simulated GPU"):
//   - one CPU clock cpu_t per rank; every runtime call costs CPU time (a launch: launch_us);
//   - per stream a ready time; an op on stream s starts at max(cpu_t, s.ready, every event s
//     was told to wait for) and ends start + cost (cost_model.h); s.ready = end;
//   - record(s) gives an event at s.ready; wait(s, e) holds s's next op until e's time;
//     synchronize(e) sets cpu_t = max(cpu_t, e's time); stream and device sync likewise;
//   - the race check (race_check.h) watches every access.
// Because ops run eagerly in launch order, results are right even when a wait is missing; the
// race check is what tells you the program would be wrong on a real GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/race_check.h"

namespace shardlab {

class SimDevice final : public Device, private AllocatorBackend {
 public:
  SimDevice(Profile profile, ComputeMode compute, int rank, int world_size);
  ~SimDevice() override;

  std::string_view kind() const override { return "sim"; }
  Stream& create_stream(std::string name) override;
  void launch(Stream& s, const Kernel& k, const HostBody& host, const CudaBody& cuda = {}) override;
  void memcpy(Stream& s, const Tensor& dst, const Tensor& src) override;
  Event record(Stream& s) override;
  void wait(Stream& s, const Event& e) override;
  void synchronize(const Event& e) override;
  void synchronize(Stream& s) override;
  void synchronize() override;
  bool query(const Event& e) override;
  double elapsed_us(const Event& start, const Event& end) override;
  int64_t now_ns() override { return cpu_ns_; }
  void host_work(std::string_view name, int64_t ns) override;
  const std::vector<std::string>& race_reports() const override { return race_.reports(); }
  // Refused: the sim's collectives go through comm_issue and comm_complete below.
  CollectiveMark begin_collective(Stream& s) override;
  void end_collective(Stream& s, const CollectiveMark& m, std::string_view api, const CollectiveArgs& c) override;

  // --- For communicators (MpiComm): how a collective enters this device's timeline.
  struct CommIssue {
    int64_t ready_ns;      // when this member could start: max(cpu_t, stream ready, waits, comm_last_end)
    uint64_t correlation;  // of the launch on the host lane
  };
  // Charges the launch on the CPU (a runtime call named `api`, e.g. "ncclAllReduce"), and says
  // when stream s could begin a collective on a communicator whose last operation ends at
  // comm_last_end_ns.
  CommIssue comm_issue(Stream& s, std::string_view api, int64_t comm_last_end_ns);
  // Records the collective on stream s: waiting [ready, start), moving data [start, end); the
  // stream is busy until end. `accesses` go through the race check as one op.
  void comm_complete(Stream& s, const CollectiveArgs& c, const CommIssue& issue, int64_t start_ns, int64_t end_ns,
                     const std::vector<Access>& accesses);
  // The CPU waits until t (a barrier's last arrival): a cpu_op named `name` covers the wait.
  void host_wait_until(int64_t t_ns, std::string_view name);

  int64_t stream_ready_ns(const Stream& s) const;

 private:
  struct SimStream;
  struct SimEvent;
  SimStream& sim(Stream& s);
  const SimStream& sim(const Stream& s) const;
  // Charge the CPU for one runtime call; returns its start.
  int64_t charge_cpu(int64_t ns);
  // Start time of the next op on s, folding in pending waits and the CPU's launch time.
  int64_t op_start(SimStream& s) const;
  void occupy(SimStream& s, int64_t end_ns);

  // AllocatorBackend
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr, size_t bytes) override;
  Event record_event(Stream& stream) override;
  bool event_done(const Event& event) override;
  void synchronize_device() override;
  void memory_changed(size_t allocated, size_t reserved) override;
  void allocator_event(const AllocatorNote& note) override { trace_allocator_note(note); }

  int64_t cpu_ns_ = 0;
  RaceCheck race_;
};

}  // namespace shardlab
