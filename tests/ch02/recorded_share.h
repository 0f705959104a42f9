// recorded_share.h: a batch share (chapter 02's BatchShare or a subclass) that keeps what it
// bound to the model at its last load(): the tokens and targets tensors read back, and each
// token's loss gradient. For the tests of chapters 02 and 08.
#pragma once

#include <cstdint>
#include <vector>

#include "02_naive_ddp/data_parallel.h"

inline std::vector<int32_t> on_host(shardlab::Device& dev, const shardlab::Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  copy_to_host(dev, dev.compute_stream(), out.data(), t);
  return out;
}

// What a share bound to the model, read back: the tokens and targets tensors after load().
template <class Share>
class Recorded : public Share {
 public:
  using Share::Share;
  std::vector<int32_t> tokens, targets;
  float dloss = 0;

 protected:
  void bind(shardlab::GPT& model, float d) override {
    tokens = on_host(this->job_.device(), this->tokens_);
    targets = on_host(this->job_.device(), this->targets_);
    dloss = d;
    Share::bind(model, d);
  }
};

