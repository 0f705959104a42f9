// ring_allreduce.h: all-reduce by hand, the way NCCL's ring does it, on Comm::sendrecv alone.
//
// N ranks stand in a ring; each sends only to its right neighbour and receives only from its
// left one, so every link carries traffic at once and none carries more than its share.
// The buffer is cut into N chunks (uneven by at most one element when N does not divide it).
//
//   reduce-scatter, N-1 steps: at step k rank r sends chunk (r - k) and receives chunk
//     (r - k - 1), which it adds into its own copy. A chunk picks up one rank's values per hop;
//     after N-1 hops rank r holds the complete sum of chunk (r + 1).
//   all-gather, N-1 steps: at step k rank r sends chunk (r + 1 - k), complete, and receives
//     chunk (r - k), complete, straight into the buffer.
//
// Each rank sends 2(N-1) chunks of S/N bytes: 2(N-1)/N x S in all, whatever N is. That is the
// bus-bandwidth factor of nccl-tests (busbw = algbw x 2(N-1)/N): at large sizes the ring runs
// every link at full speed, so busbw approaches the link's bandwidth.
//
// The naive all-reduce below, for contrast, funnels everything through rank 0: rank 0 receives
// N-1 full buffers and then sends N-1 full buffers, so its time grows linearly with N.
#pragma once

#include <cstdint>

#include "comm/comm.h"
#include "model/ops.h"

namespace ch01 {

using shardlab::Comm;
using shardlab::Device;
using shardlab::Stream;
using shardlab::Tensor;

// Chunk i of a buffer of `count` elements cut into n: [begin(i), begin(i + 1)). The first
// count % n chunks are one element longer, so any count works, 0 included.
struct Chunks {
  int64_t count;
  int n;
  int64_t begin(int i) const { return i * (count / n) + (i < count % n ? i : count % n); }
  int64_t size(int i) const { return count / n + (i < count % n ? 1 : 0); }
  int64_t largest() const { return size(0); }
};

inline int wrap(int i, int n) { return ((i % n) + n) % n; }

// In-place sum over `comm`, issued on stream s. `scratch` receives incoming chunks before they
// are added: at least Chunks{buf.numel(), comm.size()}.largest() elements.
inline void ring_allreduce(Comm& comm, const Tensor& buf, const Tensor& scratch, Stream& s) {
  Device& dev = comm.device();
  const int n = comm.size(), r = comm.rank();
  if (n == 1) return;  // a ring of one: the buffer already is the sum
  const Chunks chunk{buf.numel(), n};
  const int right = wrap(r + 1, n), left = wrap(r - 1, n);
  auto piece = [&](int i) { return buf.view(chunk.begin(i), {chunk.size(i)}); };

  // Reduce-scatter. The receive lands in scratch; the add runs on the same stream, so it is
  // ordered after the receive and before the next step's receive reuses scratch.
  // lab: begin 01.reduce-scatter "the ring's reduce-scatter steps" #the-algorithm uses(comm, dev, scratch, s, n, r, chunk, right, left, piece)
  for (int k = 0; k < n - 1; ++k) {
    const int send = wrap(r - k, n), recv = wrap(r - k - 1, n);
    const Tensor incoming = scratch.view(0, {chunk.size(recv)});
    comm.sendrecv(piece(send), right, incoming, left, s);
    shardlab::ops::add_(dev, s, piece(recv), incoming);
  }
  // lab: end
  // All-gather: complete chunks travel on around the ring, received in place.
  // lab: begin 01.all-gather "the ring's all-gather steps" #the-algorithm uses(comm, s, n, r, right, left, piece)
  for (int k = 0; k < n - 1; ++k) {
    const int send = wrap(r + 1 - k, n), recv = wrap(r - k, n);
    comm.sendrecv(piece(send), right, piece(recv), left, s);
  }
  // lab: end
}

// The naive all-reduce: reduce everything to rank 0, then send the sum back out, one rank at a
// time. `scratch` holds at least one whole buffer on rank 0 (unused elsewhere).
inline void naive_allreduce(Comm& comm, const Tensor& buf, const Tensor& scratch, Stream& s) {
  Device& dev = comm.device();
  const int n = comm.size(), r = comm.rank();
  const Tensor none;
  if (r == 0) {
    const Tensor incoming = scratch.view(0, {buf.numel()});
    for (int peer = 1; peer < n; ++peer) {
      comm.sendrecv(none, -1, incoming, peer, s);  // receive rank `peer`'s buffer ...
      shardlab::ops::add_(dev, s, buf, incoming);  // ... and add it
    }
    for (int peer = 1; peer < n; ++peer) comm.sendrecv(buf, peer, none, -1, s);
  } else {
    comm.sendrecv(buf, 0, none, -1, s);  // my contribution
    comm.sendrecv(none, -1, buf, 0, s);  // the sum
  }
}

}  // namespace ch01
