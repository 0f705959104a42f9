// watchdog.h: every wait of a rank on the others goes through here, so no failure leaves a job
// hanging in silence and none loses the run's results.
//
// A distributed job fails in two ways that a single process never does. A rank throws, and the
// others wait forever in a collective it will never join. Or a rank skips a collective (a bug,
// a branch taken on one rank only), and every rank waits, each for a different thing. PyTorch's
// answer is a watchdog thread per rank with a timeout on every NCCL collective, and a flight
// recorder: a ring of the last collectives each rank issued, dumped on a timeout so the ranks
// that never issued the stuck collective can be named. shardlab does the same on MPI:
//
//   - Every MPI wait (the collectives, the job's own gathers) polls instead of blocking. While
//     it polls it listens on a control channel (its own copy of MPI_COMM_WORLD) for a notice
//     that another rank failed, and it watches the clock: past --collective-timeout it gives
//     up. Either way it throws JobFailure, which unwinds the lesson like any error, so the
//     harness can write what this rank has (run/failure.cpp). A notice gives the operation under
//     way a second to complete first: the failed rank may have done its part before failing.
//   - The rank that fails announces it on the control channel (announce), so every rank
//     blocked in a wait learns it within milliseconds.
//   - FlightRecorder keeps the last 32 collectives and send/recvs of this rank: sequence
//     number, operation, group, count, dtype, and how far each got (issued, started, done).
//
// Polling costs nothing a blocking call does not: Open MPI's blocking calls spin on a core too.
// After a short spin this one sleeps between polls, so ranks that outnumber the cores leave
// them to the ranks that have work.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shardlab {

// Why a job is ending: which rank failed, how ("error": it threw; "timeout": a wait outlasted
// --collective-timeout; "terminated": a signal, usually mpirun ending the job after a rank
// died), and in its words.
struct Failure {
  int rank = -1;
  std::string kind;
  std::string reason;
  nlohmann::json to_json() const;
};

// Thrown out of a wait. `origin`: this rank found the failure (its timeout, a signal to it);
// otherwise another rank announced it.
class JobFailure : public std::runtime_error {
 public:
  JobFailure(Failure f, bool found_here) : std::runtime_error(f.reason), failure(std::move(f)), origin(found_here) {}
  Failure failure;
  bool origin;
};

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 32;
  enum class State { issued, started, done };
  struct Entry {
    int64_t seq = 0;
    std::string op;     // "allreduce", "reduce_scatter", ..., "sendrecv"
    std::string group;  // the communicator's name ("world", "world.split(0)")
    int64_t count = 0;  // elements
    std::string dtype;
    State state = State::issued;
    double issued_s = 0;  // wall time since the watchdog started
    int to = -1, from = -1;  // a sendrecv's peers, ranks in the job (-1: no send, no receive)
  };

  // Records an operation as issued and returns its id for started() and done().
  int64_t issued(int64_t seq, std::string op, const std::string& group, const std::vector<int>& group_ranks,
                 int64_t count, std::string dtype, int to = -1, int from = -1);
  void started(int64_t id) { set(id, State::started); }
  void done(int64_t id) { set(id, State::done); }
  // {"entries": [oldest .. newest], "groups": {name: [world ranks]}}
  nlohmann::json to_json() const;
  const std::deque<Entry>& entries() const { return entries_; }

 private:
  void set(int64_t id, State s);
  std::deque<Entry> entries_;
  int64_t first_id_ = 0;  // the id of entries_.front()
  std::map<std::string, std::vector<int>> groups_;
};

class Watchdog {
 public:
  // One per process (rank), as PyTorch has one flight recorder per process.
  static Watchdog& get();

  // After MPI_Init: opens the control channel. timeout_s 0 waits forever.
  void start(double timeout_s);
  // Before MPI_Finalize.
  void stop();
  bool running() const { return control_ != MPI_COMM_NULL; }
  double elapsed_s() const;
  int rank() const { return rank_; }
  FlightRecorder& flight() { return flight_; }
  // What the last wait waited for (a wait a failure interrupted is the last); "" before any.
  const std::string& last_wait() const { return last_wait_; }

  // Waits until every request completes. `what` names the wait for the timeout's message
  // ("allreduce #12 on world"). Throws JobFailure when another rank announced a failure, when
  // this wait passes the timeout, or when the process was asked to terminate. `timed` false:
  // no timeout (a rank computing for minutes on purpose); a failure or a signal still ends it.
  void wait(MPI_Request* requests, int n, const std::string& what, bool timed = true);
  void wait(MPI_Request& request, const std::string& what, bool timed = true) { wait(&request, 1, what, timed); }

  // Tells every other rank that this job is failing (once; later calls do nothing).
  void announce(const Failure& f);

  // The control channel, for the harness's failure wrap-up (run/failure.cpp): its own tags, its
  // waits bounded by a deadline and deaf to further notices.
  MPI_Comm control() const { return control_; }
  // Polls until the requests complete or `seconds` pass; true when they completed.
  bool wait_for(MPI_Request* requests, int n, double seconds);
  // A message with `tag` that has arrived on the control channel (from any rank), if one has.
  struct Message {
    int source;
    std::string text;
  };
  std::optional<Message> receive(int tag);

  // A SIGTERM or SIGINT handler sets this; the next wait throws ("terminated").
  static std::atomic<int> signal_received;

 private:
  Watchdog() = default;
  [[noreturn]] void timed_out(const std::string& what, double waited_s);
  void check_signal() const;               // throws once a signal came
  std::optional<Failure> receive_notice();  // another rank's failure notice, if one came
  MPI_Comm control_ = MPI_COMM_NULL;
  double timeout_s_ = 0;
  int rank_ = 0, size_ = 1;
  std::chrono::steady_clock::time_point started_;
  bool announced_ = false;
  // A notice received, and when: it ends the wait under way after kNoticeGrace, and any
  // later wait that does not complete at once.
  std::optional<Failure> pending_;
  std::chrono::steady_clock::time_point noticed_;
  static constexpr std::chrono::seconds kNoticeGrace{1};
  std::string last_wait_;
  std::vector<std::string> notice_buffers_;  // what announce() sent, alive until the process ends
  FlightRecorder flight_;
};

// Control-channel tags.
constexpr int kNoticeTag = 1;  // a failure notice: Failure as JSON
constexpr int kReportTag = 2;  // a rank's report to rank 0 during the wrap-up
constexpr int kExitTag = 3;    // rank 0: the wrap-up is done, exit

}  // namespace shardlab
