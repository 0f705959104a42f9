// bucket.h: DDP's gradient buckets, and the reducer that all-reduces them during backward.
//
// Chapter 02 waits for the whole backward, then all-reduces every gradient: the network idles
// through backward and the GPU idles through communication. But backward produces gradients
// from the last layer to the first, so the last layers' gradients are final long before
// backward ends. DDP (torch/csrc/distributed/c10d/reducer.cpp) exploits that:
//
// - Buckets. Parameters are grouped in reverse order (the order gradients arrive) into buckets
//   of about --bucket-cap-mb (25 MiB); the first bucket is capped at 1 MiB so communication
//   starts early. A bucket closes once its size reaches the cap, including the tensor that
//   crossed it. Few large collectives pay the per-collective latency rarely; many small ones
//   start sooner. The cap trades the two.
// - Gradients live in the buckets (gradient_as_bucket_view): each parameter's gradient is a
//   view into its bucket's slice of one flat buffer, so nothing is copied before the reduce.
// - When a unit's backward finishes, its parameters' gradients are marked ready. A bucket whose
//   gradients are all ready is all-reduced on the communication stream, after that stream waits
//   for the compute stream's event: asynchronous, overlapping the rest of backward. Buckets are
//   launched strictly in bucket order, never in readiness order: every rank must issue the same
//   collectives in the same order, or the results are wrong (or the job hangs).
// - Before the optimizer, the compute stream waits for the communication stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "02_naive_ddp/data_parallel.h"

namespace ch03 {

using namespace shardlab;

// PyTorch DDP's defaults: bucket_cap_mb = 25, and a first bucket of 1 MiB
// (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES) so that the first all-reduce starts early.
constexpr double kDefaultBucketCapMiB = 25;
constexpr double kDefaultFirstBucketMiB = 1;

// Groups parameters (their sizes in bytes, in model order) into buckets: reverse order, the
// first bucket capped at first_cap bytes, the others at cap. Returns parameter indices per
// bucket, each bucket in the order it is filled.
inline std::vector<std::vector<int>> assign_buckets(const std::vector<int64_t>& bytes, int64_t first_cap, int64_t cap) {
  // lab: begin 03.assign-buckets "assigning parameters to buckets" #the-idea uses(bytes, first_cap, cap)
  std::vector<std::vector<int>> buckets(1);
  int64_t filled = 0;
  for (int i = static_cast<int>(bytes.size()) - 1; i >= 0; --i) {
    buckets.back().push_back(i);
    filled += bytes[static_cast<size_t>(i)];
    const int64_t limit = buckets.size() == 1 ? first_cap : cap;
    if (filled >= limit && i > 0) {  // this tensor crossed the cap: the bucket closes with it
      buckets.emplace_back();
      filled = 0;
    }
  }
  return buckets;
  // lab: end
}

// The parameter order of the flat buffers: bucket after bucket, so each bucket is one slice.
inline std::vector<int> bucket_layout(const std::vector<std::vector<int>>& buckets) {
  std::vector<int> layout;
  for (const auto& b : buckets) layout.insert(layout.end(), b.begin(), b.end());
  return layout;
}

class Reducer {
 public:
  Reducer(Job& job, ch02::Replica& replica, std::vector<std::vector<int>> buckets, Stream& comm)
      : job_(job), comm_(comm), buckets_(std::move(buckets)) {
    const auto& params = replica.model().params();
    bucket_of_.resize(params.size());
    int64_t offset = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      int64_t elems = 0;
      for (int i : buckets_[b]) bucket_of_[static_cast<size_t>(i)] = static_cast<int>(b), elems += params[static_cast<size_t>(i)].shape.numel();
      views_.push_back(replica.grads().view(offset, {elems}));  // the bucket's slice of the flat gradient
      offset += elems;
    }
  }

  size_t buckets() const { return buckets_.size(); }
  int64_t bucket_bytes(size_t b) const { return views_[b].numel() * 4; }

  // Before the backward that synchronizes: nothing is ready, nothing launched.
  void prepare() {
    pending_.clear();
    for (const auto& b : buckets_) pending_.push_back(static_cast<int>(b.size()));
    next_ = 0;
  }

  // After unit `unit`'s backward: its parameters' gradients are final.
  void unit_done(const GPT& model, int unit) {
    // lab: begin 03.reducer-hook "the reducer's hook: launching complete buckets" #the-idea uses(model, unit)
    for (int i : model.params_of_unit(unit)) --pending_[static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])];
    Device& dev = job_.device();
    // Launch every bucket that is complete, in bucket order: a complete bucket behind an
    // incomplete one waits its turn.
    while (next_ < buckets_.size() && pending_[next_] == 0) {
      dev.wait(comm_, dev.record(dev.compute_stream()));  // the gradients exist before they travel
      // ncclAvg divides as it sums; PyTorch's reducer divides the bucket by the world size and
      // sums. The same numbers.
      job_.world().all_reduce(views_[next_], ReduceOp::avg, comm_);
      ++next_;
    }
    // lab: end
  }

  // Before the optimizer: every bucket launched, and the compute stream waits for them.
  void finish() {
    if (next_ != buckets_.size())
      throw std::logic_error("reducer: only " + std::to_string(next_) + " of " + std::to_string(buckets_.size()) +
                             " buckets were ready at the end of backward");
    Device& dev = job_.device();
    dev.wait(dev.compute_stream(), dev.record(comm_));
  }

 private:
  Job& job_;
  Stream& comm_;
  std::vector<std::vector<int>> buckets_;
  std::vector<int> bucket_of_;  // parameter -> bucket
  std::vector<Tensor> views_;   // bucket -> its slice of the flat gradient
  std::vector<int> pending_;    // bucket -> gradients not yet ready
  size_t next_ = 0;             // the next bucket to launch
};

}  // namespace ch03
