// diagnose_hang (run/failure.h): the sentence a timed-out job ends with, from the flight records
// the ranks reported. The harness tests (tests/harness/harness.cmake, "a rank that skips ...")
// reach it only through whole 3-rank runs that wait out a 5 s timeout each, and check one line of
// it; here the records are built with the FlightRecorder itself (so their JSON is the shape the
// ranks write) for each way a rank gets left behind, and the whole diagnosis is compared: who
// issued, who never did, what each laggard did last, and that a collective the held ranks never
// reached is left out as a consequence.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/watchdog.h"
#include "run/failure.h"
#include "run/harness.h"  // kStepLossOp: the name Job::Step records its loss all-reduce under

using namespace shardlab;
using nlohmann::json;

namespace {

const std::vector<int> kWorld3 = {0, 1, 2};

// One rank's flight record, filled the way MpiComm and Job::Step fill theirs.
struct Rank {
  FlightRecorder flight;
  std::string waiting_in = "nothing";

  // An operation every member completed.
  Rank& done(int64_t seq, const std::string& op, const std::string& group, const std::vector<int>& ranks,
             int64_t count = 16, const std::string& dtype = "Float") {
    const int64_t id = flight.issued(seq, op, group, ranks, count, dtype);
    flight.started(id);
    flight.done(id);
    return *this;
  }
  // An operation this rank issued and is still waiting in, as the watchdog names the wait.
  Rank& stuck(int64_t seq, const std::string& op, const std::string& group, const std::vector<int>& ranks,
              int64_t count = 16, const std::string& dtype = "Float") {
    flight.issued(seq, op, group, ranks, count, dtype);
    waiting_in = op + " #" + std::to_string(seq) + " on " + group + " (" + std::to_string(count) + " " + dtype + ")";
    return *this;
  }
};

// What Job::fail sends rank 0: the keys diagnose_hang reads, beside the failure it saw.
std::map<int, json> reports(const std::map<int, Rank>& ranks) {
  std::map<int, json> out;
  for (const auto& [r, rank] : ranks)
    out[r] = {{"rank", r},
              {"failure", Failure{r, "timeout", "timed out"}.to_json()},
              {"waiting_in", rank.waiting_in},
              {"flight", rank.flight.to_json()}};
  return out;
}

}  // namespace

TEST_CASE("hang diagnosis: a collective issued by ranks 0 and 2 and never by rank 1 names rank 1 and its last one", "[run]") {
  std::map<int, Rank> ranks;
  for (int r : kWorld3) ranks[r].done(1, "allreduce", "world", kWorld3).done(2, "allreduce", "world", kWorld3);
  ranks[0].stuck(3, "allreduce", "world", kWorld3);
  ranks[2].stuck(3, "allreduce", "world", kWorld3);
  ranks[1].waiting_in = "the end of the run";  // it skipped #3 and went on
  // The sentence tests/harness/harness.cmake expects, and what follows it: rank 1's last.
  CHECK(diagnose_hang(reports(ranks)) ==
        "allreduce #3 on world (16 Float) was issued by ranks 0, 2 and never by rank 1; "
        "rank 1's last on world: allreduce #2 (done); it was waiting in the end of the run\n");
}

TEST_CASE("hang diagnosis: a rank that skips a step's loss all-reduce is named, not the collective the others never reached", "[run]") {
  std::map<int, Rank> ranks;
  for (int r : kWorld3)
    ranks[r].done(1, "allreduce", "world", kWorld3).done(1, kStepLossOp, "job", kWorld3, 1, "Double")
        .done(2, "allreduce", "world", kWorld3);
  ranks[0].stuck(2, kStepLossOp, "job", kWorld3, 1, "Double");
  ranks[2].stuck(2, kStepLossOp, "job", kWorld3, 1, "Double");
  // Rank 1 skipped step 2's loss and issued step 3's all-reduce, which ranks 0 and 2, held at
  // step 2's end, never will: that all-reduce is a consequence and must not be reported.
  ranks[1].stuck(3, "allreduce", "world", kWorld3);
  CHECK(diagnose_hang(reports(ranks)) ==
        "the end of step 2 (its loss all-reduce, over every rank) was issued by ranks 0, 2 and never by rank 1; "
        "rank 1's last on job: step_loss_allreduce #1 (done); it was waiting in allreduce #3 on world (16 Float)\n");
}

TEST_CASE("hang diagnosis: a ring sendrecv rank 1 skipped names rank 1, not the ranks waiting for it", "[run]") {
  std::map<int, Rank> ranks;
  for (int r : kWorld3)
    for (int64_t k = 1; k <= 3; ++k) {
      ranks[r].done(k, "allreduce", "world", kWorld3);
      if (k < 3) ranks[r].done(k, "sendrecv", "world", kWorld3);
    }
  ranks[0].stuck(3, "sendrecv", "world", kWorld3);
  ranks[2].stuck(3, "sendrecv", "world", kWorld3);
  ranks[1].stuck(4, "allreduce", "world", kWorld3);  // the next step's, which 0 and 2 never reach
  CHECK(diagnose_hang(reports(ranks)) ==
        "sendrecv #3 on world was issued by ranks 0, 2, waiting for a peer, and never by rank 1; "
        "rank 1's last on world: sendrecv #2 (done); it was waiting in allreduce #4 on world (16 Float)\n");
}

TEST_CASE("hang diagnosis: sendrecvs that wait for each other are named with their peers as a deadlock", "[run]") {
  // A pipeline of 3 whose rank 1 sends its backward's gradient before it receives the forward's
  // input: rank 0 sends to 1, which sends to 0 and waits for 2, which waits for 1.
  std::map<int, Rank> ranks;
  for (int r : kWorld3) ranks[r].done(1, "sendrecv", "world", kWorld3);
  const auto stuck = [&](int r, int64_t seq, int to, int from) {
    ranks[r].flight.issued(seq, "sendrecv", "world", kWorld3, 6144, "Float", to, from);
    ranks[r].waiting_in = "sendrecv #" + std::to_string(seq) + " on world";
  };
  SECTION("a deadlock") {
    stuck(0, 5, 1, -1);
    stuck(1, 6, 0, 2);
    stuck(2, 4, -1, 1);
    CHECK(diagnose_hang(reports(ranks)) ==
          "sendrecvs on world wait for each other: rank 0 in #5 (sending to rank 1); rank 1 in #6 (sending to rank 0, "
          "receiving from rank 2); rank 2 in #4 (receiving from rank 1). Each waits for a peer held in a sendrecv of "
          "its own that is not the match: the order the ranks issue their sends and receives deadlocks\n");
  }
  SECTION("matching sendrecvs are not a deadlock (the timeout came from elsewhere)") {
    stuck(0, 5, 1, -1);
    stuck(1, 5, 2, 0);
    stuck(2, 5, -1, 1);
    CHECK(diagnose_hang(reports(ranks)).empty());
  }
}

TEST_CASE("hang diagnosis: a rank left behind in one split group is named in that group alone", "[run]") {
  const std::vector<int> world = {0, 1, 2, 3}, left = {0, 1}, right = {2, 3};
  std::map<int, Rank> ranks;
  for (int r : world) {
    ranks[r].done(1, "allgather", "world", world);
    ranks[r].done(1, "reduce_scatter", r < 2 ? "world.split(0)" : "world.split(1)", r < 2 ? left : right, 1024);
  }
  ranks[0].stuck(2, "reduce_scatter", "world.split(0)", left, 1024);
  for (int r : right) ranks[r].done(2, "reduce_scatter", "world.split(1)", right, 1024);
  ranks[1].waiting_in = "nothing (busy elsewhere)";
  CHECK(diagnose_hang(reports(ranks)) ==
        "reduce_scatter #2 on world.split(0) (1024 Float) was issued by rank 0 and never by rank 1; "
        "rank 1's last on world.split(0): reduce_scatter #1 (done); it was waiting in nothing (busy elsewhere)\n");
}

TEST_CASE("hang diagnosis: a rank that never reported is said to be silent, not to have skipped", "[run]") {
  std::map<int, Rank> ranks;
  for (int r : {0, 2}) ranks[r].done(1, "allreduce", "world", kWorld3).stuck(2, "allreduce", "world", kWorld3);
  CHECK(diagnose_hang(reports(ranks)) ==
        "allreduce #2 on world (16 Float) was issued by ranks 0, 2; "
        "rank 1 did not report (busy outside a collective, or gone)\n");
}

TEST_CASE("hang diagnosis: nothing is reported when no rank is behind another", "[run]") {
  std::map<int, Rank> ranks;
  SECTION("every operation completed") {
    for (int r : kWorld3)
      ranks[r].done(1, "allreduce", "world", kWorld3).done(1, "sendrecv", "world", kWorld3).done(1, kStepLossOp, "job", kWorld3);
  }
  SECTION("every rank waits in the same collective (the timeout came from elsewhere)") {
    for (int r : kWorld3) ranks[r].done(1, "allreduce", "world", kWorld3).stuck(2, "allreduce", "world", kWorld3);
  }
  SECTION("every rank waits in the same sendrecv") {
    for (int r : kWorld3) ranks[r].done(1, "sendrecv", "world", kWorld3).stuck(2, "sendrecv", "world", kWorld3);
  }
  SECTION("no rank issued anything") {
    for (int r : kWorld3) ranks[r].waiting_in = "the step's loss";
  }
  CHECK(diagnose_hang(reports(ranks)).empty());
}
