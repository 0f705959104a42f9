// Chapter 06's FreeEventQueue against PyTorch's _FreeEventQueue (torch/distributed/fsdp/
// _limiter_utils.py): a FIFO of the events recorded after each reshard that freed memory,
// from which the CPU takes the oldest, one per all-gather, and only once max_inflight of them are
// queued (`len(queue) >= max_num_inflight_all_gathers`). The chapter's runs show its effect (no
// alloc retries on gpt-15b) but not the rule itself: waiting one free too early or too late, or on
// the newest free instead of the oldest, changes timings and still trains. Each event here is
// told apart by the stream id it carries; the queue never looks inside one.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <vector>

#include "06_rate_limit/rate_limiter.h"

using ch06::FreeEventQueue;
using shardlab::Event;
using shardlab::EventState;

namespace {

// The free event of "unit" `id`: an event whose stream id names it.
Event free_event(int id) { return Event{std::make_shared<EventState>(), id}; }

// What one all-gather's dequeue_if_needed hands the CPU: the unit whose free it waits for, or -1.
int wait_for(FreeEventQueue& q) {
  const std::optional<Event> e = q.dequeue_if_needed();
  if (!e) return -1;
  REQUIRE(e->state != nullptr);  // a real event, never a default-made one
  return e->stream_id;
}

}  // namespace

TEST_CASE("ch06: FreeEventQueue: nothing is taken until max_inflight frees are queued", "[rate-limit]") {
  FreeEventQueue q(2);
  CHECK(wait_for(q) == -1);  // empty: the first all-gathers of a run never wait
  q.enqueue(free_event(0));
  CHECK(wait_for(q) == -1);  // one in flight, fewer than 2
  CHECK(q.size() == 1);
  q.enqueue(free_event(1));
  CHECK(wait_for(q) == 0);  // two: the oldest is taken
  CHECK(q.size() == 1);
  CHECK(wait_for(q) == -1);  // and one is left, fewer than 2 again
}

TEST_CASE("ch06: FreeEventQueue: frees are taken oldest first, one per all-gather", "[rate-limit]") {
  FreeEventQueue q(2);
  // Forward over 5 units: each reshard queues its free, each all-gather takes at most one.
  std::vector<int> waited;
  for (int unit = 0; unit < 5; ++unit) {
    waited.push_back(wait_for(q));  // the all-gather of `unit`...
    q.enqueue(free_event(unit));    // ...and its reshard after forward
  }
  // The all-gather of unit k waits for unit k - 2's free: max_inflight frees in flight.
  CHECK(waited == std::vector<int>{-1, -1, 0, 1, 2});
  CHECK(q.size() == 2);
}

TEST_CASE("ch06: FreeEventQueue: a queue holding more than max_inflight gives one per call and keeps the rest", "[rate-limit]") {
  // The end of backward frees two units with no all-gather between: a step starts with more
  // queued than max_inflight, and the early all-gathers wait for older frees (README, "Where it
  // changes nothing").
  FreeEventQueue q(2);
  for (int unit = 0; unit < 4; ++unit) q.enqueue(free_event(unit));
  CHECK(q.most_held() == 4);
  CHECK(wait_for(q) == 0);
  CHECK(q.size() == 3);
  CHECK(wait_for(q) == 1);
  CHECK(wait_for(q) == 2);
  CHECK(q.size() == 1);
  CHECK(wait_for(q) == -1);
  CHECK(q.size() == 1);
  CHECK(q.most_held() == 4);  // the most ever held, not the size now
}

TEST_CASE("ch06: FreeEventQueue: max_inflight 1 waits for every free, 3 lets three be in flight", "[rate-limit]") {
  FreeEventQueue one(1), three(3);
  std::vector<int> waited_one, waited_three;
  for (int unit = 0; unit < 5; ++unit) {
    waited_one.push_back(wait_for(one));
    waited_three.push_back(wait_for(three));
    one.enqueue(free_event(unit));
    three.enqueue(free_event(unit));
  }
  CHECK(waited_one == std::vector<int>{-1, 0, 1, 2, 3});
  CHECK(waited_three == std::vector<int>{-1, -1, -1, 0, 1});
  CHECK(one.most_held() == 1);
  CHECK(three.most_held() == 3);
}
