// ring_attention.h: context-parallel attention over a ring of ranks (TransformerEngine's P2P
// ring, AttnFuncWithCPAndKVP2P; zhuzilin/ring-flash-attention).
//
// The model hands each block's attention to this core (model.h, AttentionCore): q, k, v of
// this rank's tokens in, out and lse out. The rank's queries need the keys and values of the
// whole sequence, which lie on the N ranks of its group. So the KV chunks travel: at ring step
// s every rank sends the chunk it holds to rank + 1 and receives rank - 1's, and computes its
// queries against the chunk it holds, which started on rank (r - s) mod N (layout.h says which
// rows). Each step gives a partial output with its log-sum-exp; attention_merge folds it into
// the running (out, lse) exactly, as FlashAttention folds key tiles (attention.h).
//
// Streams. Attention runs on its own stream ("attention") and the transfers on another
// ("ring"), both fed by the block's compute stream and returning to it. Double buffering: the
// receive of step s + 1's chunk is posted before step s's attention, into the other buffer, so
// the transfer runs under the kernel. Two events per step keep it correct: the ring waits for
// the attention stream (the chunk to send is in place, and the buffer it receives into is no
// longer read), and the attention stream waits for the ring before the next step (its chunk
// has arrived). The buffers are held, not record_stream'ed: they are freed on the attention
// stream after it has waited for the last transfer that touched them.
//
// Backward (ring-flash-attention's scheme). The chunks travel the same ring again, and the
// gradient of each chunk's keys and values is summed on the way: at step s a rank computes its
// queries' share of dK, dV for the chunk it holds, adds the partial sum the previous rank sent
// for that same chunk, and sends the result on. After N steps each partial sum has visited
// every rank and arrives, complete, at the chunk's owner. The dKV ring runs one step behind the
// KV ring; the add waits for it, the kernels do not. TransformerEngine instead sends the dKV
// partial in one message with the next KV chunk (the README compares the two).
#pragma once

#include <cstdint>
#include <string>

#include "08_context_parallel/layout.h"
#include "comm/comm.h"
#include "model/model.h"
#include "model/ops.h"

namespace ch08 {

using namespace shardlab;

class RingAttention : public AttentionCore {
 public:
  RingAttention(Device& dev, Comm& group, SequenceLayout layout, Stream& attention, Stream& ring)
      : dev_(dev), group_(group), layout_(std::move(layout)), attention_(attention), ring_(ring) {}

  // The unmasked score entries this rank's attention computed in one layer's forward, per
  // sequence and head (every layer and every step computes the same).
  int64_t score_entries() const { return score_entries_; }

  void forward(Stream& s, int layer, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
               const Tensor& v) override {
    HostScope scope(dev_, "ring attention forward");
    const int N = group_.size();
    dev_.wait(attention_, dev_.record(s));  // q, k, v are ready on the block's stream
    if (N == 1) {  // no ring: the whole sequence is here
      ops::attention_forward(dev_, attention_, out, lse, q, k, v, layout_.block(0).mask);
      if (layer == 0) score_entries_ = layout_.score_entries(layout_.block(0));
      dev_.wait(s, dev_.record(attention_));
      return;
    }
    Tensor kv[2] = {packed(k, v, "kv (ring buffer 0)"), kv_buffer("kv (ring buffer 1)")};
    // One step's partial result, merged into (out, lse).
    Tensor part_out = dev_.empty(out.shape, DType::f32, attention_, "attention.out (step)");
    Tensor part_lse = dev_.empty(lse.shape, DType::f32, attention_, "attention.lse (step)");
    // lab: begin 08.ring-forward "the ring's forward steps: pass the chunk on, attend to it, merge by log-sum-exp" #the-ring uses(layer, out, lse, q, k, v, N, kv, part_out, part_lse)
    int64_t entries = 0;
    for (int step = 0; step < N; ++step) {
      const Tensor& chunk = kv[step % 2];
      Event arrived;
      if (step + 1 < N) arrived = pass_on(chunk, kv[(step + 1) % 2]);  // the next chunk travels meanwhile
      const SequenceLayout::Block b = layout_.block(step);
      entries += layout_.score_entries(b);
      if (step == 0) {  // this rank's own chunk (under the causal mask): the first partial result
        ops::attention_forward(dev_, attention_, out, lse, q, keys(chunk, k), values(chunk, k), b.mask);
      } else if (b.any) {
        ops::attention_forward(dev_, attention_, part_out, part_lse, q, keys(chunk, k), values(chunk, k), b.mask,
                               b.q_rows, b.kv_rows);
        ops::attention_merge(dev_, attention_, out, lse, part_out, part_lse, b.q_rows);
      }
      if (step + 1 < N) dev_.wait(attention_, arrived);  // the next step's chunk is here
    }
    if (layer == 0) score_entries_ = entries;
    // lab: end
    for (Tensor* t : {&part_lse, &part_out, &kv[1], &kv[0]}) dev_.free(*t);
    dev_.wait(s, dev_.record(attention_));  // the block goes on with out and lse
  }

  void backward(Stream& s, int, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) override {
    HostScope scope(dev_, "ring attention backward");
    const int N = group_.size();
    dev_.wait(attention_, dev_.record(s));
    if (N == 1) {  // no ring: the whole sequence is here
      ops::attention_backward(dev_, attention_, dq, dk, dv, dout, q, k, v, out, lse, layout_.block(0).mask);
      dev_.wait(s, dev_.record(attention_));
      return;
    }
    Tensor kv[2] = {packed(k, v, "kv (ring buffer 0)"), kv_buffer("kv (ring buffer 1)")};
    // dK, dV of the chunk this rank holds at a step (two, as the one sent at step s is still
    // travelling while step s + 1 fills the other), and the partial sum arriving from rank - 1.
    Tensor dkv[2] = {kv_buffer("dkv (step, 0)"), kv_buffer("dkv (step, 1)")};
    Tensor dkv_in = kv_buffer("dkv (arrived)");
    Event dkv_arrived;
    for (int step = 0; step < N; ++step) {
      const Tensor& chunk = kv[step % 2];
      const Tensor& mine = dkv[step % 2];
      Event kv_arrived;
      if (step + 1 < N) kv_arrived = pass_on(chunk, kv[(step + 1) % 2]);
      const SequenceLayout::Block b = layout_.block(step);
      ops::fill(dev_, attention_, mine, 0.0f);
      if (b.any)  // dq accumulates in place; this chunk's dK, dV into `mine`
        ops::attention_backward(dev_, attention_, dq, keys(mine, k), values(mine, k), dout, q, keys(chunk, k),
                                values(chunk, k), out, lse, b.mask, b.q_rows, b.kv_rows);
      if (step > 0) {  // the ranks before this one have added their shares for this chunk
        dev_.wait(attention_, dkv_arrived);
        ops::add_(dev_, attention_, mine, dkv_in);
      }
      if (step + 1 < N) dev_.wait(attention_, kv_arrived);
      dkv_arrived = pass_on(mine, dkv_in);  // on toward the chunk's owner
    }
    // The last transfer brought this rank's own chunk's dK, dV, summed over every rank.
    dev_.wait(attention_, dkv_arrived);
    ops::add_(dev_, attention_, dk, keys(dkv_in, k));
    ops::add_(dev_, attention_, dv, values(dkv_in, k));
    for (Tensor* t : {&dkv_in, &dkv[1], &dkv[0], &kv[1], &kv[0]}) dev_.free(*t);
    dev_.wait(s, dev_.record(attention_));
  }

 private:
  // A KV chunk travels as one buffer, k then v, so each step is one send and one receive.
  Tensor kv_buffer(const char* name) { return dev_.empty({2 * k_numel_}, DType::f32, attention_, name); }
  Tensor packed(const Tensor& k, const Tensor& v, const char* name) {
    k_numel_ = k.numel();
    Tensor kv = dev_.empty({2 * k_numel_}, DType::f32, attention_, name);
    ops::copy(dev_, attention_, keys(kv, k), k);
    ops::copy(dev_, attention_, values(kv, k), v);
    return kv;
  }
  static Tensor keys(const Tensor& kv, const Tensor& like) { return kv.view(0, like.shape); }
  static Tensor values(const Tensor& kv, const Tensor& like) { return kv.view(like.numel(), like.shape); }

  // Sends `send` to rank + 1 and receives rank - 1's into `recv`, on the ring stream, once the
  // attention stream has written the one and finished reading the other. Returns the event of
  // its completion.
  Event pass_on(const Tensor& send, const Tensor& recv) {
    const int N = group_.size(), r = group_.rank();
    dev_.wait(ring_, dev_.record(attention_));
    group_.sendrecv(send, (r + 1) % N, recv, (r - 1 + N) % N, ring_);
    return dev_.record(ring_);
  }

  Device& dev_;
  Comm& group_;
  SequenceLayout layout_;
  Stream& attention_;
  Stream& ring_;
  int64_t k_numel_ = 0;
  int64_t score_entries_ = 0;
};

}  // namespace ch08
