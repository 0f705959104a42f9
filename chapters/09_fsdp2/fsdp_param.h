// fsdp_param.h: FSDP2's FSDPParam, one parameter sharded on its first dimension.
//
// Chapter 04 flattened a unit's parameters into one FlatParameter and cut the flat buffer into W
// equal pieces: a parameter could straddle two ranks, so a rank's shard was a run of elements
// that meant nothing on its own, and every parameter of a unit had to share its dtype and its
// requires_grad. FSDP2 (torch.distributed.fsdp.fully_shard; _fully_shard/_fsdp_param.py) keeps
// every parameter whole in its own right and cuts it on dim 0 the way torch.chunk does:
//
//   c = ceil(d0 / W) rows per chunk; rank r holds rows [r c, min((r + 1) c, d0)), so the last
//   ranks may hold a short chunk or nothing (d0 = 5 over 3: 2, 2, 1 rows; d0 = 2 over 4: 1, 1,
//   0, 0; d0 = 6 over 4: 2, 2, 2, 0, not 2, 2, 1, 1).
//
// Every rank stores its chunk padded with zero rows to c rows (_init_sharded_param), so all
// ranks send the same size to the all-gather; the padding sits after every real row in rank
// order, so the whole parameter is the first d0 rows of the gathered buffer. The optimizer
// sees only the real rows: AdamW's moments have the chunk's size, not the padded one.
//
//   cmake --preset default && cmake --build --preset default
//   build/tests/shardlab_ch09_tests     # the geometry and the copies, on one rank
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/ops.h"
#include "run/job.h"

namespace ch09 {

using namespace shardlab;

// torch.chunk on dim 0 of a [rows, ...] parameter (row_numel elements a row) over `world` ranks.
struct Dim0Chunks {
  int64_t rows = 0;
  int64_t row_numel = 1;
  int world = 1;

  int64_t chunk_rows() const {  // c
    // lab: begin 09.dim0-chunks "torch.chunk on dim 0: c rows a chunk, the last ranks short or empty" #every-parameter-cut-on-dim-0 uses()
    return (rows + world - 1) / world;
    // lab: end
  }
  // Rows of the parameter on `rank`: c, fewer on the last one that holds any, then none.
  int64_t rows_of(int rank) const {
    // lab: begin 09.dim0-chunks "torch.chunk on dim 0: c rows a chunk, the last ranks short or empty" #every-parameter-cut-on-dim-0 uses(rank)
    return std::clamp<int64_t>(rows - rank * chunk_rows(), 0, chunk_rows());
    // lab: end
  }
  int64_t numel_of(int rank) const { return rows_of(rank) * row_numel; }
  // What every rank stores and sends: c rows, padded with zeros.
  int64_t padded_numel() const { return chunk_rows() * row_numel; }
  int64_t numel() const { return rows * row_numel; }
};

inline Dim0Chunks dim0_chunks(const Shape& shape, int world) {
  Dim0Chunks g;
  g.rows = shape.ndim == 0 ? 1 : shape.dims[0];
  g.row_numel = g.rows == 0 ? 0 : shape.numel() / g.rows;
  g.world = world;
  return g;
}

// Where a parameter's initial values come from: init(index, out) writes parameter `index` as the
// model holds it (gpt_init_param's; chapter 10's model holds a tensor-parallel slice of each).
using ParamInit = std::function<void(int index, float* out)>;
inline ParamInit seeded_init(const GPTConfig& cfg, uint64_t seed) {
  return [cfg, seed](int index, float* out) { gpt_init_param(cfg, index, seed, out); };
}

class FsdpParam {
 public:
  // Parameter `index` of `model`, sharded over `world` ranks of which this is `rank`; every
  // rank starts from the same initial values (they depend on the seed only) and keeps its rows.
  // A frozen parameter (requires_grad=False) is gathered like any other, but has no gradient
  // and no optimizer state.
  FsdpParam(Job& job, const GPT& model, int index, int rank, int world, const ParamInit& init, bool requires_grad = true)
      : job_(job), index_(index), name_(model.params()[static_cast<size_t>(index)].name),
        shape_(model.params()[static_cast<size_t>(index)].shape), chunks_(dim0_chunks(shape_, world)), rank_(rank),
        requires_grad_(requires_grad) {
    Device& dev = job.device();
    Stream& s = dev.compute_stream();
    sharded_ = dev.empty({chunks_.padded_numel()}, DType::f32, s, name_ + ".sharded");
    ops::fill(dev, s, sharded_, 0.0f);  // the padding rows stay zero
    if (requires_grad_ && local_numel() > 0) {
      m_ = dev.empty({local_numel()}, DType::f32, s, name_ + ".adam.m");
      v_ = dev.empty({local_numel()}, DType::f32, s, name_ + ".adam.v");
      for (const Tensor* t : {&m_, &v_}) ops::fill(dev, s, *t, 0.0f);
    }
    if (dev.computes() && local_numel() > 0) {
      std::vector<float> whole(static_cast<size_t>(chunks_.numel()));
      init(index, whole.data());
      copy_to_device(dev, s, local(), whole.data() + rank * chunks_.padded_numel());
    }
  }
  ~FsdpParam() {
    Device& dev = job_.device();
    for (Tensor* t : {&v_, &m_})
      if (t->defined()) dev.free(*t);
    dev.free(sharded_);
  }
  FsdpParam(const FsdpParam&) = delete;
  FsdpParam& operator=(const FsdpParam&) = delete;

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  const Dim0Chunks& chunks() const { return chunks_; }
  bool requires_grad() const { return requires_grad_; }

  // This rank's padded rows: the all-gather's input.
  const Tensor& sharded() const { return sharded_; }
  // The real rows only, what the optimizer updates (empty on a rank that holds none).
  int64_t local_numel() const { return chunks_.numel_of(rank_); }
  Tensor local() const { return sharded_.view(0, {local_numel()}); }

  // AdamW on this rank's rows, given their gradient (local_numel() elements).
  void optimizer_step(Stream& s, const Tensor& grad, int64_t step, const ops::AdamW& hp) {
    if (m_.defined()) ops::adamw(job_.device(), s, local(), grad, m_, v_, step + 1, hp);
  }
  // This rank's rows of AdamW's first moment (undefined where it holds none, or frozen).
  Tensor first_moment() const { return m_; }

 private:
  Job& job_;
  int index_;
  std::string name_;
  Shape shape_;
  Dim0Chunks chunks_;
  int rank_;
  bool requires_grad_;
  Tensor sharded_;  // [c * row_numel]: the rows, then zero rows
  Tensor m_, v_;    // AdamW's moments of the real rows
};

}  // namespace ch09
