#include "comm/watchdog.h"

#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

namespace shardlab {

nlohmann::json Failure::to_json() const { return {{"rank", rank}, {"kind", kind}, {"reason", reason}}; }

using json = nlohmann::json;

// --- FlightRecorder

int64_t FlightRecorder::issued(int64_t seq, std::string op, const std::string& group,
                               const std::vector<int>& group_ranks, int64_t count, std::string dtype, int to, int from) {
  if (entries_.size() == kCapacity) entries_.pop_front(), ++first_id_;
  groups_.emplace(group, group_ranks);
  entries_.push_back(
      {seq, std::move(op), group, count, std::move(dtype), State::issued, Watchdog::get().elapsed_s(), to, from});
  return first_id_ + static_cast<int64_t>(entries_.size()) - 1;
}

void FlightRecorder::set(int64_t id, State s) {
  if (id >= first_id_ && id < first_id_ + static_cast<int64_t>(entries_.size()))
    entries_[static_cast<size_t>(id - first_id_)].state = s;
}

json FlightRecorder::to_json() const {
  static const char* names[] = {"issued", "started", "done"};
  json entries = json::array();
  for (const Entry& e : entries_) {
    entries.push_back({{"seq", e.seq},
                       {"op", e.op},
                       {"group", e.group},
                       {"count", e.count},
                       {"dtype", e.dtype},
                       {"state", names[static_cast<int>(e.state)]},
                       {"issued_s", e.issued_s}});
    if (e.to >= 0 || e.from >= 0) entries.back()["to"] = e.to, entries.back()["from"] = e.from;
  }
  json groups = json::object();
  for (const auto& [name, ranks] : groups_) groups[name] = ranks;
  return {{"entries", entries}, {"groups", groups}};
}

// --- Watchdog

std::atomic<int> Watchdog::signal_received{0};

Watchdog& Watchdog::get() {
  static Watchdog w;
  return w;
}

void Watchdog::start(double timeout_s) {
  timeout_s_ = timeout_s;
  started_ = std::chrono::steady_clock::now();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm_dup(MPI_COMM_WORLD, &control_);  // its own tags' space: no message of the job meets them
}

void Watchdog::stop() {
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

double Watchdog::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

void Watchdog::wait(MPI_Request* requests, int n, const std::string& what, bool timed) {
  const auto begin = std::chrono::steady_clock::now();
  last_wait_ = what;
  auto nap = std::chrono::microseconds(20);
  for (int polls = 0;; ++polls) {
    int done = 0;
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (!running()) continue;  // before start() (unit tests of a communicator): a plain wait
    check_signal();
    // A failure notice ends this wait, but not at once: the operation under way may still
    // complete (the failed rank may have done its part of it before failing), and a step
    // that completes is a step the trace keeps. So it gets kNoticeGrace; a later wait gets
    // one test, since the failed rank takes part in nothing after.
    if (!pending_ && (pending_ = receive_notice())) noticed_ = std::chrono::steady_clock::now();
    if (pending_ && (noticed_ < begin || std::chrono::steady_clock::now() - noticed_ > kNoticeGrace))
      throw JobFailure(*pending_, false);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (timed && timeout_s_ > 0 && waited > timeout_s_) timed_out(what, waited);
    // Most waits end within microseconds: spin first, then sleep, longer each time up to 1 ms.
    if (polls < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

void Watchdog::check_signal() const {
  if (const int sig = signal_received.load())
    throw JobFailure({rank_, "terminated", "terminated by signal " + std::to_string(sig) +
                                               " (mpirun ends every rank when one of them dies)"},
                     true);
}

std::optional<Watchdog::Message> Watchdog::receive(int tag) {
  int arrived = 0;
  MPI_Status status;
  MPI_Iprobe(MPI_ANY_SOURCE, tag, control_, &arrived, &status);
  if (!arrived) return std::nullopt;
  int len = 0;
  MPI_Get_count(&status, MPI_CHAR, &len);
  Message m{status.MPI_SOURCE, std::string(static_cast<size_t>(len), '\0')};
  MPI_Recv(m.text.data(), len, MPI_CHAR, m.source, tag, control_, MPI_STATUS_IGNORE);
  return m;
}

std::optional<Failure> Watchdog::receive_notice() {
  const std::optional<Message> m = receive(kNoticeTag);
  if (!m) return std::nullopt;
  const json j = json::parse(m->text, nullptr, false);
  if (!j.is_object()) return Failure{m->source, "error", m->text};
  return Failure{j.value("rank", m->source), j.value("kind", "error"), j.value("reason", "")};
}

void Watchdog::timed_out(const std::string& what, double waited_s) {
  char text[512];
  std::snprintf(text, sizeof text, "collective timeout: waited %.1f s (--collective-timeout %g) in %s", waited_s,
                timeout_s_, what.c_str());
  throw JobFailure({rank_, "timeout", text}, true);
}

void Watchdog::announce(const Failure& f) {
  if (!running() || announced_) return;
  announced_ = true;
  notice_buffers_.reserve(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    // Small and eager: each send completes locally, so it is freed, never waited for (a rank
    // that is gone would make the wait hang). The buffers live as long as the process.
    notice_buffers_.push_back(f.to_json().dump());
    const std::string& text = notice_buffers_.back();
    MPI_Request request;
    MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, r, kNoticeTag, control_, &request);
    MPI_Request_free(&request);
  }
}

bool Watchdog::wait_for(MPI_Request* requests, int n, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int done = 0;
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace shardlab
