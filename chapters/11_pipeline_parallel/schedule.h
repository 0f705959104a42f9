// schedule.h: which pass of which micro-batch each pipeline rank runs, in what order, and when
// each output crosses to the rank that needs it.
//
// The model's units are cut into S stages, run in turn by the ranks: with V model chunks a rank
// (interleaving), stage k runs on rank k % P as its chunk k / P, so rank s holds stages s, s + P,
// s + 2P, ... A micro-batch's forward crosses the stages first to last, its backward last to
// first. A schedule is, for each rank, the order of its 2 M V passes: F m (forward of micro-batch
// m through one of its chunks) and B m (its backward). Schedules differ in how they interleave
// the two kinds:
//
//   GPipe (Huang et al. 2019): every forward, then every backward. Each rank holds the
//   activations of all M micro-batches at once.
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): rank s runs P - s - 1 forwards to fill the
//   pipeline (warm-up), then alternates one forward and one backward, then drains the
//   backwards. A rank holds at most P - s micro-batches' activations, whatever M.
//   Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline): V chunks a rank,
//   micro-batches taken in groups of P through one chunk, then the same group through the next;
//   a longer warm-up, (P - s - 1) 2 + (V - 1) P passes, then one forward and one backward in
//   turn. Each pass is 1/V of a stage's work, so the fill and the drain shrink V times.
//   ZB-H1 (Qi et al. 2023, zero bubble): 1F1B with each backward cut into B (the input's
//   gradient) and W (the weights'), the W's held back into the ticks 1F1B idles.
//
// All flush: every backward of the step ends before the optimizer, so all compute exactly what
// one rank would on the whole batch. When every pass of a stage takes the same time, the idle
// share of the step (the bubble) is (P - 1) / (M + P - 1) for GPipe and 1F1B, (P - 1) /
// (V M + P - 1) interleaved; ZB-H1 idles (P - 1)(T_F + T_B - T_W) a rank.
//
// The passes' order alone does not say when the data moves. lockstep() plays every rank's order
// on one clock, a pass a tick: a rank runs its next pass once what it needs ran at an earlier
// tick, and idles otherwise (PyTorch's pipeline_order, with None where a rank waits). After each
// tick the outputs of that tick's passes cross, in two exchanges every rank takes part in:
// first the forwards' outputs go to the next stage's rank, then the backwards' input gradients
// to the previous stage's rank. In each exchange a rank sends at most one tensor and receives at
// most one, in one sendrecv, so the exchange is a set of chains and rings that cannot deadlock
// (comm.h); and since every rank runs the ticks in the same order, it never waits for a peer that
// is waiting for it. The clock only orders the messages: on the GPUs each pass takes its own
// time, and a stage waits only for the data it needs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch11 {

// A backward is one pass (B), or under zero bubble two: B, the input's gradient, and W, the
// weights' (GPT::split_backward).
enum class Pass { forward, backward, weight };

struct Pipeline {
  int ranks = 1;          // P
  int chunks = 1;         // V: model chunks (virtual stages) a rank holds
  int micro_batches = 1;  // M
  int stages() const { return ranks * chunks; }
  int stage(int rank, int chunk) const { return chunk * ranks + rank; }
  int rank_of(int stage) const { return stage % ranks; }
  int chunk_of(int stage) const { return stage / ranks; }
};

struct Action {
  Pass pass;
  int micro;
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

// "F3" or "B3", with the chunk where a rank holds more than one: "F3.1".
inline std::string name(const Action& a, const Pipeline& p) {
  std::string out(1, a.pass == Pass::forward ? 'F' : a.pass == Pass::backward ? 'B' : 'W');
  out += std::to_string(a.micro);
  if (p.chunks > 1) out.append(".").append(std::to_string(a.chunk));
  return out;
}

inline std::vector<Action> gpipe(const Pipeline& p, int /*rank*/) {
  std::vector<Action> order;
  for (int m = 0; m < p.micro_batches; ++m) order.push_back({Pass::forward, m});
  for (int m = 0; m < p.micro_batches; ++m) order.push_back({Pass::backward, m});
  return order;
}

inline std::vector<Action> one_f_one_b(const Pipeline& p, int rank) {
  // lab: begin 11.one-f-one-b "1F1B: the warm-up's forwards, one forward and one backward in turn, the backwards left" #the-schedule-on-one-clock uses(p, rank)
  const int M = p.micro_batches, warmup = std::min(p.ranks - rank - 1, M);
  std::vector<Action> order;
  for (int m = 0; m < warmup; ++m) order.push_back({Pass::forward, m});
  for (int i = 0; i < M - warmup; ++i) {
    order.push_back({Pass::forward, warmup + i});
    order.push_back({Pass::backward, i});
  }
  for (int m = M - warmup; m < M; ++m) order.push_back({Pass::backward, m});
  return order;
  // lab: end
}

// Megatron-LM's order (forward_backward_pipelining_with_interleaving): the rank's k-th forward
// is micro-batch (k / (P V)) P + k % P through chunk (k / P) % V; its k-th backward takes the
// same micro-batch through the chunks in reverse. Needs M a multiple of P.
inline std::vector<Action> interleaved_1f1b(const Pipeline& p, int rank) {
  const int P = p.ranks, V = p.chunks, passes = p.micro_batches * V;
  const auto nth = [&](int k, Pass pass) {
    const int chunk = (k / P) % V;
    return Action{pass, (k / (P * V)) * P + k % P, pass == Pass::forward ? chunk : V - 1 - chunk};
  };
  const int warmup = std::min((P - rank - 1) * 2 + (V - 1) * P, passes);
  std::vector<Action> order;
  int forwards = 0, backwards = 0;
  while (forwards < warmup) order.push_back(nth(forwards++, Pass::forward));
  while (forwards < passes) {
    order.push_back(nth(forwards++, Pass::forward));
    order.push_back(nth(backwards++, Pass::backward));
  }
  while (backwards < passes) order.push_back(nth(backwards++, Pass::backward));
  return order;
}

// ZB-H1 (Qi et al. 2023, zero bubble): 1F1B's forwards and backwards, each backward cut into B
// (the input's gradient, which the stage before waits for) and W (the weights' gradients, which
// only the optimizer waits for). W can wait, so the later stages hold theirs back and send
// their B's on sooner: after each B, rank s runs its oldest queued W's until s are left, and
// the rest after its last B. With equal passes the clock idles P - 1 ticks a rank instead of
// 1F1B's 2 (P - 1), and no rank holds more micro-batches from F to W than 1F1B's P.
inline std::vector<Action> zb_h1(const Pipeline& p, int rank) {
  // lab: begin 11.zero-bubble "ZB-H1: 1F1B's forwards and backwards, each backward's W held back while more than s wait" #zero-bubble-the-backward-cut-in-two-zb-h1 uses(p, rank)
  std::vector<Action> order;
  std::vector<int> queued;  // micro-batches whose W waits, oldest first
  for (const Action& a : one_f_one_b(p, rank)) {
    order.push_back(a);
    if (a.pass != Pass::backward) continue;
    queued.push_back(a.micro);
    while (static_cast<int>(queued.size()) > rank) {
      order.push_back({Pass::weight, queued.front()});
      queued.erase(queued.begin());
    }
  }
  for (int m : queued) order.push_back({Pass::weight, m});
  return order;
  // lab: end
}

inline std::vector<Action> order(const std::string& schedule, const Pipeline& p, int rank) {
  if (schedule == "gpipe") return gpipe(p, rank);
  if (schedule == "1f1b") return one_f_one_b(p, rank);
  if (schedule == "interleaved") return interleaved_1f1b(p, rank);
  if (schedule == "zb-h1") return zb_h1(p, rank);
  throw std::invalid_argument("ch11::order: no schedule '" + schedule + "'");
}

// One tick of one rank: the pass it runs (none: it waits), and what arrives after the tick, in
// the two exchanges, named by the pass that will use it.
struct Tick {
  std::optional<Action> run;
  std::optional<Action> forward_input;  // a forward's input, from the previous stage's rank
  std::optional<Action> output_grad;    // a backward's output gradient, from the next stage's rank
};

// The stage an action of `rank` runs on.
inline int stage_of(const Pipeline& p, int rank, const Action& a) { return p.stage(rank, a.chunk); }

// When each pass ran on the clock: ran(pass, micro, stage) is its tick, -1 before it ran.
class Clock {
 public:
  explicit Clock(const Pipeline& p) : stages_(p.stages()), ticks_(3 * static_cast<size_t>(p.micro_batches * p.stages()), -1) {}
  int ran(Pass pass, int micro, int stage) const { return ticks_[index(pass, micro, stage)]; }
  void run(Pass pass, int micro, int stage, int tick) { ticks_[index(pass, micro, stage)] = tick; }

 private:
  size_t index(Pass pass, int micro, int stage) const {
    return static_cast<size_t>((static_cast<int>(pass) * ticks_.size()) / 3) + static_cast<size_t>(micro * stages_ + stage);
  }
  int stages_;
  std::vector<int> ticks_;
};

// Whether pass `a` on stage k (of S) may run at `tick`: what it needs ran at an earlier tick. A
// forward needs the previous stage's forward of its micro-batch (the activation it takes in); a
// backward needs its own stage's forward (the activations it differentiates) and the next
// stage's backward (its output's gradient); a weight pass, its own stage's backward (the
// gradient of its output it keeps). The first stage's forward takes the tokens, the last
// stage's backward starts from the loss.
inline bool can_run(const Clock& clock, const Action& a, int k, int S, int tick) {
  // lab: begin 11.ready "a pass may run once what it needs ran at an earlier tick" #the-schedule-on-one-clock uses(clock, a, k, S, tick)
  const auto before = [&](Pass pass, int stage) {
    const int t = clock.ran(pass, a.micro, stage);
    return t >= 0 && t < tick;
  };
  if (a.pass == Pass::forward) return k == 0 || before(Pass::forward, k - 1);
  if (a.pass == Pass::weight) return before(Pass::backward, k);
  return before(Pass::forward, k) && (k == S - 1 || before(Pass::backward, k + 1));
  // lab: end
}

// Every rank's ticks for the given orders (lockstep above). An order that can never finish (a
// pass waiting for one that waits for it) throws, naming each rank's stuck pass.
inline std::vector<std::vector<Tick>> lockstep(const Pipeline& p, const std::vector<std::vector<Action>>& orders) {
  const int P = p.ranks, S = p.stages();
  Clock clock(p);
  std::vector<std::vector<Tick>> ticks(P);
  std::vector<size_t> next(P, 0);
  for (int tick = 0;; ++tick) {
    bool finished = true, progress = false;
    for (int r = 0; r < P; ++r) ticks[r].push_back({});
    for (int r = 0; r < P; ++r) {
      if (next[r] == orders[r].size()) continue;
      finished = false;
      const Action& a = orders[r][next[r]];
      const int k = stage_of(p, r, a);
      if (!can_run(clock, a, k, S, tick)) continue;
      progress = true;
      ticks[r][tick].run = a;
      clock.run(a.pass, a.micro, k, tick);
      ++next[r];
      // What this pass hands on, and to whom.
      if (a.pass == Pass::forward && k < S - 1)
        ticks[p.rank_of(k + 1)][tick].forward_input = Action{Pass::forward, a.micro, p.chunk_of(k + 1)};
      if (a.pass == Pass::backward && k > 0)
        ticks[p.rank_of(k - 1)][tick].output_grad = Action{Pass::backward, a.micro, p.chunk_of(k - 1)};
    }
    if (finished) {
      for (auto& t : ticks) t.pop_back();
      return ticks;
    }
    if (!progress) {
      std::string stuck;
      for (int r = 0; r < P; ++r)
        if (next[r] < orders[r].size())
          stuck += (stuck.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " at " +
                   name(orders[r][next[r]], p);
      throw std::invalid_argument("pipeline schedule never finishes: at tick " + std::to_string(tick) +
                                  " every rank waits for a pass that has not run (" + stuck + ")");
    }
  }
}

// Every rank's ticks as the papers draw them, a row a rank, a column a tick ("..": it waits):
//   rank 0  F0 F1 F2 F3 .. .. .. B0 F4 B1 ...
inline std::string draw(const std::vector<std::vector<Tick>>& ticks, const Pipeline& p) {
  size_t width = 2;
  for (const auto& row : ticks)
    for (const Tick& t : row)
      if (t.run) width = std::max(width, name(*t.run, p).size());
  std::string out;
  for (size_t r = 0; r < ticks.size(); ++r) {
    out += "rank " + std::to_string(r) + " ";
    for (const Tick& t : ticks[r]) {
      const std::string cell = t.run ? name(*t.run, p) : "..";
      out += " " + cell + std::string(width - cell.size(), ' ');
    }
    while (out.back() == ' ') out.pop_back();
    out += "\n";
  }
  return out;
}

// The most a rank holds at once when each pass changes what it holds by change(action): a
// forward keeps its activations, a backward frees them (under zero bubble, all but what its W
// reads, which the W frees). The schedule's promise about activation memory (GPipe: all M
// micro-batches; 1F1B: P - s).
template <class Change>
int64_t peak_held(const std::vector<Tick>& ticks, Change&& change) {
  int64_t held = 0, most = 0;
  for (const Tick& t : ticks) {
    if (!t.run) continue;
    held += change(*t.run);
    most = std::max(most, held);
  }
  return most;
}

}  // namespace ch11
