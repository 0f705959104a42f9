#include "run/failure.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "run/harness.h"
#include "run/job.h"
#include "run/run_directory.h"

namespace shardlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// How long the failure wrap-up waits for the other ranks' reports, and they for rank 0's word.
constexpr double kWrapUpSeconds = 5;

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

std::string diagnose_hang(const std::map<int, json>& records) {
  struct Stuck {
    std::string text;
    bool holds = false;  // its issuers cannot go on without the others: a step's end, a sendrecv
    std::vector<int> issued, never;
  };
  std::vector<Stuck> found;
  std::map<std::string, std::vector<int>> groups;
  std::map<std::pair<std::string, int>, json> last;  // (group, rank) -> its last collective there
  std::map<std::pair<std::string, int>, json> last_p2p;  // (group, rank) -> its last sendrecv there
  for (const auto& [rank, rec] : records) {
    for (const auto& [name, ranks] : rec["flight"]["groups"].items()) groups[name] = ranks.get<std::vector<int>>();
    for (const json& e : rec["flight"]["entries"])
      (e["op"] == "sendrecv" ? last_p2p : last)[{e["group"].get<std::string>(), rank}] = e;
  }
  const auto last_text = [&](const std::map<std::pair<std::string, int>, json>& lasts, const std::string& group, int r) {
    auto it = lasts.find({group, r});
    return "rank " + std::to_string(r) + "'s last on " + group + ": " +
           (it == lasts.end() ? std::string("none")
                              : it->second["op"].get<std::string>() + " #" + std::to_string(it->second["seq"].get<int64_t>()) +
                                    " (" + it->second["state"].get<std::string>() + ")") +
           "; it was waiting in " + records.at(r).value("waiting_in", std::string("nothing (busy elsewhere)"));
  };
  // Sendrecvs that wait for each other: every rank stuck in one waits for peers that are stuck
  // in sendrecvs of their own, none the match of another's (a pipeline whose send order
  // deadlocks). Each is named with its peers; no rank is behind, so the rule below does not apply.
  std::set<std::string> deadlocked;
  for (const auto& [group, members] : groups) {
    std::map<int, json> stuck;  // rank -> its sendrecv still waiting
    for (int r : members)
      if (auto it = last_p2p.find({group, r}); it != last_p2p.end() && it->second["state"] != "done" &&
                                                it->second.contains("to"))
        stuck[r] = it->second;
    if (stuck.empty()) continue;
    const bool cycle = std::all_of(stuck.begin(), stuck.end(), [&](const std::pair<const int, json>& entry) {
      const json& e = entry.second;
      return (e["to"] < 0 || stuck.count(e["to"].get<int>())) && (e["from"] < 0 || stuck.count(e["from"].get<int>()));
    });
    if (!cycle) continue;
    // Matching pairs (r sends to q, q receives from r) would complete: only a sendrecv whose peer
    // waits in another one makes a deadlock (otherwise the timeout came from elsewhere).
    const bool unmatched = std::any_of(stuck.begin(), stuck.end(), [&](const std::pair<const int, json>& entry) {
      const int r = entry.first;
      const json& e = entry.second;
      return (e["to"] >= 0 && stuck.at(e["to"].get<int>())["from"] != r) ||
             (e["from"] >= 0 && stuck.at(e["from"].get<int>())["to"] != r);
    });
    if (!unmatched) continue;
    deadlocked.insert(group);
    std::string out = "sendrecvs on " + group + " wait for each other: ";
    std::vector<int> waiting;
    for (const auto& [r, e] : stuck) {
      waiting.push_back(r);
      std::string peers;
      if (e["to"] >= 0) peers += "sending to rank " + std::to_string(e["to"].get<int>());
      if (e["from"] >= 0) peers += (peers.empty() ? "" : ", ") + std::string("receiving from rank ") + std::to_string(e["from"].get<int>());
      out += (r == stuck.begin()->first ? "" : "; ") + std::string("rank ") + std::to_string(r) + " in #" +
             std::to_string(e["seq"].get<int64_t>()) + " (" + peers + ")";
    }
    out += ". Each waits for a peer held in a sendrecv of its own that is not the match: the order the ranks issue "
           "their sends and receives deadlocks";
    found.push_back({out + "\n", true, waiting, {}});
  }
  // Send/recv pairs, numbered per rank: in a ring every member issues as many. Ranks waiting in
  // their sendrecv #k while a member has issued fewer than k are waiting for that member.
  for (const auto& [group, members] : groups) {
    if (deadlocked.count(group)) continue;
    int64_t top = 0;
    for (int r : members)
      if (auto it = last_p2p.find({group, r}); it != last_p2p.end() && it->second["state"] != "done")
        top = std::max(top, it->second["seq"].get<int64_t>());
    if (top == 0) continue;
    std::vector<int> waiting, behind;
    for (int r : members) {
      if (!records.count(r)) continue;
      auto it = last_p2p.find({group, r});
      const int64_t seq = it == last_p2p.end() ? 0 : it->second["seq"].get<int64_t>();
      if (seq < top) behind.push_back(r);
      else if (it->second["state"] != "done") waiting.push_back(r);
    }
    if (behind.empty() || waiting.empty()) continue;
    std::string out = "sendrecv #" + std::to_string(top) + " on " + group + " was issued by " + rank_list(waiting) +
                      ", waiting for a peer, and never by " + rank_list(behind);
    for (int r : behind) out += "; " + last_text(last_p2p, group, r);
    found.push_back({out + "\n", true, waiting, behind});
  }
  for (const auto& [group, members] : groups) {
    int64_t top = 0;
    json stuck;
    for (int r : members)
      if (auto it = last.find({group, r}); it != last.end() && it->second["seq"].get<int64_t>() > top)
        top = it->second["seq"].get<int64_t>(), stuck = it->second;
    if (top == 0 || stuck["state"] == "done") continue;
    std::vector<int> issued, never, silent;
    for (int r : members) {
      if (!records.count(r)) silent.push_back(r);
      else if (auto it = last.find({group, r}); it != last.end() && it->second["seq"].get<int64_t>() >= top) issued.push_back(r);
      else never.push_back(r);
    }
    if (never.empty() && silent.empty()) continue;
    std::string out;
    if (stuck["op"] == kStepLossOp)
      out += "the end of step " + std::to_string(top) + " (its loss all-reduce, over every rank)";
    else
      out += stuck["op"].get<std::string>() + " #" + std::to_string(top) + " on " + group + " (" +
             std::to_string(stuck["count"].get<int64_t>()) + " " + stuck["dtype"].get<std::string>() + ")";
    out += " was issued by " + rank_list(issued);
    if (!never.empty()) {
      out += " and never by " + rank_list(never);
      for (int r : never) out += "; " + last_text(last, group, r);
    }
    if (!silent.empty()) out += "; " + rank_list(silent) + " did not report (busy outside a collective, or gone)";
    found.push_back({out + "\n", stuck["op"] == kStepLossOp, issued, never});
  }
  // Ranks held where they wait (at a step's end, in a sendrecv) never issue what comes after:
  // a collective that only the ranks past that point issued is a consequence, not the cause,
  // and is not reported.
  std::string out;
  for (const Stuck& s : found) {
    const bool consequence = !s.holds && !s.never.empty() && std::any_of(found.begin(), found.end(), [&](const Stuck& e) {
      return e.holds && std::all_of(s.never.begin(), s.never.end(), [&](int r) {
               return std::find(e.issued.begin(), e.issued.end(), r) != e.issued.end();
             });
    });
    if (!consequence) out += s.text;
  }
  return out;
}

namespace {

// What a failed run left, from the ranks' reports ("wrote"): "summary.json, the traces (marked
// incomplete) of ranks 0-3, the flight records of ranks 0-3", and what was not, and why.
std::string written_after_failure(const std::string& summary, const std::map<int, json>& reports, int world_size) {
  std::vector<int> traces, records;
  std::string not_written;
  for (const auto& [r, rep] : reports) {
    if (!rep.is_object()) continue;
    for (const json& f : rep.value("wrote", json::array())) {
      if (f == rank_trace_file(r)) traces.push_back(r);
      if (f == flight_record_file(r)) records.push_back(r);
    }
    for (const json& e : rep.value("write_errors", json::array()))
      if (e.is_string()) not_written += (not_written.empty() ? ": rank " : "; rank ") + std::to_string(r) + ": " + e.get<std::string>();
  }
  const auto ranks = [&](const std::vector<int>& of) {
    return of.empty() ? std::string("no rank") : rank_list(of);
  };
  std::string text = "written: " + summary + "the traces (marked incomplete) of " + ranks(traces) +
                     ", the flight records of " + ranks(records);
  if (static_cast<int>(reports.size()) < world_size) text += " (the ranks that never reported may have written theirs)";
  return not_written.empty() ? text : text + "; not written" + not_written;
}

}  // namespace

void Job::fail(const Failure& failure, bool origin) {
  Watchdog& w = Watchdog::get();
  if (origin) {
    // A timeout is told once, by rank 0, with the other ranks' flight records; an error here.
    if (failure.kind != "timeout") print_error("rank " + std::to_string(rank_) + ": error: " + failure.reason);
    w.announce(failure);
  }
  const bool terminating = failure.kind == "terminated";  // mpirun's SIGKILL follows: no wrap-up

  // What this rank has: its flight record and its trace so far, marked incomplete.
  const fs::path dir = run_dir();
  const json seen = failure.to_json();
  json record = {{"rank", rank_}, {"failure", seen}, {"origin", origin}, {"waiting_in", w.last_wait()},
                 {"flight", w.flight().to_json()}};
  // Each write on its own: a flight record that cannot be written does not stop the trace. What
  // was written, and why the rest was not, goes to rank 0 with the report.
  json wrote = json::array(), write_errors = json::array();
  const auto attempt = [&](const std::string& file, const auto& write) {
    try {
      write();
      wrote.push_back(file);
    } catch (const std::exception& e) {
      write_errors.push_back(e.what());
      print_error("rank " + std::to_string(rank_) + ": " + e.what());
    }
  };
  attempt(flight_record_file(rank_), [&] { write_json(dir / flight_record_file(rank_), record); });
  attempt(rank_trace_file(rank_), [&] {
    json other = other_data();
    other["incomplete"] = true;
    other["failure"] = failure.to_json();
    write_rank_trace(other);
  });
  json report = rank_report();
  report["wrote"] = wrote;
  if (!write_errors.empty()) report["write_errors"] = write_errors;
  report["failure"] = seen;
  report["waiting_in"] = w.last_wait();
  report["flight"] = record["flight"];

  if (!is_root()) {
    if (!terminating && w.running()) {
      const std::string text = report.dump();
      MPI_Request send;
      MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, 0, kReportTag, w.control(), &send);
      if (w.wait_for(&send, 1, kWrapUpSeconds * 2)) {
        MPI_Request done;
        MPI_Irecv(nullptr, 0, MPI_CHAR, 0, kExitTag, w.control(), &done);
        w.wait_for(&done, 1, kWrapUpSeconds * 2);
      }
    }
    std::fflush(stdout);
    std::_Exit(1);
  }

  // Rank 0: the others' reports, as many as arrive in time.
  std::map<int, json> reports = {{0, report}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kWrapUpSeconds);
  while (!terminating && w.running() && static_cast<int>(reports.size()) < world_size_ &&
         std::chrono::steady_clock::now() < deadline) {
    if (const auto m = w.receive(kReportTag))
      reports[m->source] = json::parse(m->text, nullptr, false);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  bool timed_out = false;
  for (const auto& [r, rep] : reports) timed_out |= rep.is_object() && rep["failure"].value("kind", "") == "timeout";
  std::string diagnosis;
  if (timed_out) {
    diagnosis = diagnose_hang(reports);
    char limit[64];
    std::snprintf(limit, sizeof limit, "%g", flags_.collective_timeout_s);
    std::string text = info_.id + ": error: collective timeout (--collective-timeout " + limit + " s): " +
                       (diagnosis.empty() ? "no collective was issued by some ranks and not others; the ranks waited in:\n"
                                          : diagnosis);
    if (diagnosis.empty())
      for (const auto& [r, rep] : reports) text += "  rank " + std::to_string(r) + ": " + rep.value("waiting_in", "") + "\n";
    text += "flight records: " + fs::absolute(dir).string() + "/flight_record_rank<R>.json";
    print_error(text);
  }

  json summary = summary_base(other_data());
  summary["incomplete"] = true;
  summary["failure"] = failure.to_json();
  if (!diagnosis.empty()) summary["diagnosis"] = diagnosis;
  std::vector<int> missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!reports.count(r)) {
      missing.push_back(r);
      continue;
    }
    json entry = reports[r];
    entry.erase("flight");  // in flight_record_rank<R>.json
    summary["ranks"].push_back(entry);
  }
  summary["unreported_ranks"] = missing;
  std::string summary_written = "summary.json, ";
  try {
    write_json(dir / kSummaryFile, summary);
  } catch (const std::exception& e) {
    print_error("rank 0: " + std::string(e.what()));
    summary_written.clear();
    reports[0]["write_errors"].push_back(e.what());
  }
  std::cout << "\nthe run failed; in " << fs::absolute(dir).string() << ", "
            << written_after_failure(summary_written, reports, world_size_) << std::endl;
  // Let the others go; those that never reported are ended by mpirun when this rank exits.
  std::vector<MPI_Request> exits;
  for (const auto& [r, rep] : reports) {
    if (r == 0) continue;
    exits.emplace_back();
    MPI_Isend(nullptr, 0, MPI_CHAR, r, kExitTag, w.control(), &exits.back());
  }
  if (!exits.empty()) w.wait_for(exits.data(), static_cast<int>(exits.size()), kWrapUpSeconds);
  std::fflush(stdout);
  std::_Exit(1);
}

}  // namespace shardlab
