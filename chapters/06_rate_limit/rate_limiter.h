// rate_limiter.h: FSDP1's all-gather rate limiter (limit_all_gathers=True).
//
// The problem. The CPU runs ahead of the GPU, so chapter 05's runtime issues the all-gathers of
// units the GPU will not reach for a long time, and each needs a fresh unsharded buffer on the
// unshard stream. The buffers that forward frees were read by the compute stream, so
// record_stream holds each back until the compute stream's work on it has completed, and even
// then only the unshard stream may reuse it (pools are per stream). When the device is full,
// the caching allocator waits for every stream, gives its cached segments back and asks the
// device again: an "alloc retry" (common/device/allocator.h), which stalls the CPU until the GPU
// has caught up with everything it was given.
//
// The answer (torch/distributed/fsdp/_limiter_utils.py, _runtime_utils.py): a queue of the
// events recorded on the compute stream after each reshard that freed memory. Before each
// all-gather, if the queue holds `max_inflight` events (2 in PyTorch), the CPU takes the oldest
// and synchronizes on it: the all-gather of unit k waits until unit k-2's parameters are free
// on the GPU. The queue can hold more than `max_inflight` events, though: only one is taken per
// all-gather, and the end of backward frees two units (the first block and the root) with no
// all-gather after them. So a step starts with extra events queued, and early in forward the
// all-gather of unit k waits for unit k-3's free (README.md, "Is it right?").
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "05_prefetch/fsdp_runtime.h"

namespace ch06 {

using namespace shardlab;

// _FreeEventQueue: a FIFO of free events, dequeued one at a time and only when full.
class FreeEventQueue {
 public:
  explicit FreeEventQueue(int max_inflight) : max_inflight_(static_cast<size_t>(max_inflight)) {}

  void enqueue(Event free_event) {
    queue_.push_back(std::move(free_event));
    most_held_ = std::max(most_held_, queue_.size());
  }

  // The oldest event, if as many are in flight as allowed; nothing otherwise.
  std::optional<Event> dequeue_if_needed() {
    // lab: begin 06.free-event-queue "the free-event queue and the CPU's wait before an all-gather" #why-the-allocator-thrashes uses()
    if (queue_.size() < max_inflight_) return std::nullopt;
    Event oldest = std::move(queue_.front());
    queue_.pop_front();
    return oldest;
    // lab: end
  }

  size_t size() const { return queue_.size(); }
  size_t most_held() const { return most_held_; }

 private:
  size_t max_inflight_;
  std::deque<Event> queue_;
  size_t most_held_ = 0;
};

// Chapter 05's runtime with the limiter in its two extension points. Without a queue length
// (limit_all_gathers=False) there is no queue: PyTorch then records no free event at all.
class RateLimitedRuntime : public ch05::FsdpRuntime {
 public:
  RateLimitedRuntime(Device& dev, Stream& unshard, Stream& post, std::vector<std::unique_ptr<ch04::FlatParam>> units,
                     ch05::FsdpOptions options, std::optional<int> max_inflight)
      : FsdpRuntime(dev, unshard, post, std::move(units), options) {
    if (max_inflight) queue_.emplace(*max_inflight);
  }

  size_t free_events_most_queued() const { return queue_ ? queue_->most_held() : 0; }
  int64_t waits() const { return waits_; }          // rate_limiter synchronizations so far
  int64_t wait_ns() const { return wait_ns_; }      // the CPU time they took

 protected:
  // _unshard: before the all-gather, wait on the CPU for the oldest free if the queue is full.
  void before_unshard() override {
    // lab: begin 06.free-event-queue "the free-event queue and the CPU's wait before an all-gather" #why-the-allocator-thrashes uses()
    if (!queue_) return;
    if (std::optional<Event> oldest = queue_->dequeue_if_needed()) {
      HostScope scope(dev_, "FullyShardedDataParallel.rate_limiter");
      const int64_t t0 = dev_.now_ns();
      dev_.synchronize(*oldest);
      ++waits_;
      wait_ns_ += dev_.now_ns() - t0;
    }
    // lab: end
  }

  // _reshard: the memory was freed on the CPU; the event says when the GPU is done with it.
  void after_free() override {
    // lab: begin 06.free-event-queue "the free-event queue and the CPU's wait before an all-gather" #why-the-allocator-thrashes uses()
    if (queue_) queue_->enqueue(dev_.record(compute_));
    // lab: end
  }

 private:
  std::optional<FreeEventQueue> queue_;
  int64_t waits_ = 0, wait_ns_ = 0;
};

}  // namespace ch06
