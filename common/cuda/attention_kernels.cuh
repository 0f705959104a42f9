// attention_kernels.cuh: attention forward and backward as FlashAttention-2 computes them, in fp32.
//
// Build: included by kernels.cu (which launches them) and by tests/test_attention_kernels.cpp,
// which runs these same kernels on the CPU under a small CUDA emulator (tests/cuda_emulator.h),
// so their indexing, masking and online softmax are checked on machines without a GPU. The file
// therefore uses nothing but threadIdx, blockIdx, __syncthreads, __shfl_xor_sync, atomicAdd and
// the float math functions, and takes its dynamic shared memory from attention_shared(), which
// the includer defines.
//
// The math (attention.h): per (batch, head), S = scale q k^T with the mask, P = softmax rows of
// S, out = P v, lse = log sum exp of each row of S. Backward from the final out and lse:
// P = exp(S - lse), D = rowsum(dout * out), dS = P * (dout v^T - D),
// dv += P^T dout, dq += scale dS k, dk += scale dS^T q.
//
// The idea (Dao, "FlashAttention-2", 2023, algorithms 1 and 2): never store S or P in global
// memory. A block keeps a 64-row tile of one operand in shared memory and streams 64-row tiles
// of the other past it; each tile of S lives in registers, 16 values per thread, and is used at
// once. Global memory traffic is O(T hs) per block instead of O(T^2), and the memory needed
// grows with T, not T^2.
//
// Threads and tiles. A block is 256 threads as a 16 x 16 grid, ty = threadIdx.x / 16 (rows) and
// tx = threadIdx.x % 16 (columns). In a 64 x 64 tile of S, thread (ty, tx) owns the 4 x 4 values
// at rows ty + 16 i and columns tx + 16 j (i, j < 4); in a 64 x hs tile of an output it owns
// rows ty + 16 i and channels tx + 16 u (u < kCh). Strided rather than contiguous ownership
// makes the 16 threads of a row group read 16 consecutive floats of a shared row, and the
// shared tiles' rows are padded to hs + 1 floats so that reading one column (a channel of 16
// different rows) also hits 16 different banks. A warp holds two row groups (ty even and odd);
// a row's max and sum reduce over its 16 threads with four shuffles.
#pragma once

namespace flash {

constexpr int kTile = 64;                // rows of a tile: queries or keys
constexpr int kSide = 16;                // the thread grid is kSide x kSide
constexpr int kThreads = kSide * kSide;  // 256
constexpr int kPer = kTile / kSide;      // 4: rows (or columns) of a tile per thread
constexpr int kMaxHs = 128;              // largest head size: kCh = 8 channels per thread
constexpr int kScoreLd = kTile + 1;      // padded row of a shared 64 x 64 score tile

__host__ __device__ constexpr int row_ld(int hs) { return hs + 1; }

// Blocks along one head: one per 64 queries (forward) or keys (backward).
__host__ __device__ constexpr int blocks_of(int rows) { return (rows + kTile - 1) / kTile; }

// Channels per thread for a head size: 4 up to 64 (GPT-2's heads), 8 up to 128. A template
// parameter, so the accumulators stay in registers.
__host__ __device__ constexpr int channels_per_thread(int hs) { return hs <= 64 ? 4 : 8; }

// Shared memory, in floats. Forward: the query tile, one key tile (K, then V in the same place)
// and the 64 x 64 probabilities. Backward: the block's keys K and V, a query tile q and dout,
// and the 64 x 64 scores (P, then dS). At hs = 64: 50,176 and 83,456 bytes.
__host__ __device__ constexpr int forward_shared_floats(int hs) { return 2 * kTile * row_ld(hs) + kTile * kScoreLd; }
__host__ __device__ constexpr int backward_shared_floats(int hs) { return 4 * kTile * row_ld(hs) + kTile * kScoreLd; }

// Copies rows [r0, r0 + 64) of a head ([rows, hs], row-major, in global memory) into a padded
// shared tile, zeros past `rows`. Consecutive threads copy consecutive floats of a row.
__device__ inline void load_rows(float* tile, const float* head, int r0, int rows, int hs) {
  for (int idx = threadIdx.x; idx < kTile * hs; idx += kThreads) {
    const int r = idx / hs, c = idx - r * hs;
    tile[r * row_ld(hs) + c] = r0 + r < rows ? head[static_cast<long long>(r0 + r) * hs + c] : 0.0f;
  }
}

// Over the 16 threads of a row group (lanes 0-15 or 16-31 of a warp); all 32 lanes take part.
__device__ inline float row_group_max(float x) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset));
  return x;
}
__device__ inline float row_group_sum(float x) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffff, x, offset);
  return x;
}

// dot[i][j] = a_row(ty + 16 i) . b_row(tx + 16 j) over hs channels, both padded shared tiles:
// per channel 4 + 4 shared loads feed 16 multiply-adds.
__device__ inline void tile_dots(float dot[kPer][kPer], const float* a, const float* b, int hs, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) dot[i][j] = 0.0f;
  for (int c = 0; c < hs; ++c) {
    float av[kPer], bv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) av[i] = a[(ty + kSide * i) * row_ld(hs) + c];
#pragma unroll
    for (int j = 0; j < kPer; ++j) bv[j] = b[(tx + kSide * j) * row_ld(hs) + c];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) dot[i][j] += av[i] * bv[j];
  }
}

// acc[i][u] += sum over n rows r of w(r, i) * x[r][tx + 16 u]: the thread's rows of a 64 x hs
// product tile, w read from the shared score tile `w` as w[r * kScoreLd + ty + 16 i] when
// `w_by_column` (w^T x: dv and dk) or w[(ty + 16 i) * kScoreLd + r] otherwise (w x: out, dq).
template <int kCh>
__device__ inline void tile_product(float acc[kPer][kCh], const float* w, bool w_by_column, const float* x, int n,
                                    int hs, int ty, int tx) {
  for (int r = 0; r < n; ++r) {
    float wv[kPer], xv[kCh];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      wv[i] = w_by_column ? w[r * kScoreLd + ty + kSide * i] : w[(ty + kSide * i) * kScoreLd + r];
#pragma unroll
    for (int u = 0; u < kCh; ++u) {
      const int c = tx + kSide * u;
      xv[u] = c < hs ? x[r * row_ld(hs) + c] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int u = 0; u < kCh; ++u) acc[i][u] += wv[i] * xv[u];
  }
}

// Forward. Grid: blockIdx.x = bh * q_blocks + qb, for head bh in [0, B NH) and query block qb;
// the block owns queries [64 qb, 64 qb + 64) of that head. It walks the key tiles a row of the
// block can see (with the causal mask, none past the block's last query: the tiles above the
// diagonal are skipped, not computed and masked) and keeps, per query row, the running max m,
// the running sum l and the unnormalized output in registers: the online softmax. Per tile:
//   S = scale q k^T (masked to -inf), m' = max(m, rowmax S), P = exp(S - m'),
//   l = l e^(m - m') + rowsum P, acc = acc e^(m - m') + P v.
// At the end out = acc / l and lse = m + log l; a row that saw no key (Tk == 0) gets lse -inf
// and output 0.
// Pointers start at the block's first row of each head (the row offsets chapter 08's ring
// steps need); heads are ldq (ldk) rows apart.
template <int kCh>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, int Tq, int Tk,
                         long long ldq, long long ldk, int hs, bool causal, float scale, int q_blocks) {
  float* qs = attention_shared();
  float* kvs = qs + kTile * row_ld(hs);  // the key tile's K, then its V
  float* ps = kvs + kTile * row_ld(hs);  // the tile's probabilities, [64][kScoreLd]
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const long long bh = blockIdx.x / q_blocks;
  const int i0 = (blockIdx.x % q_blocks) * kTile;
  const float* kh = k + bh * ldk * hs;
  const float* vh = v + bh * ldk * hs;
  load_rows(qs, q + bh * ldq * hs, i0, Tq, hs);

  float m[kPer], l[kPer], acc[kPer][kCh];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int u = 0; u < kCh; ++u) acc[i][u] = 0.0f;
  }
  const int key_end = causal ? min(Tk, i0 + kTile) : Tk;  // keys any query of the block sees
  for (int j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();  // every thread is done with the last tile's V and P (and qs is stored)
    load_rows(kvs, kh, j0, Tk, hs);
    __syncthreads();
    float s[kPer][kPer];
    tile_dots(s, qs, kvs, hs, ty, tx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int a = i0 + ty + kSide * i;  // the query row
      float row_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int b = j0 + tx + kSide * j;  // the key
        const bool seen = a < Tq && b < Tk && (!causal || b <= a);
        s[i][j] = seen ? scale * s[i][j] : -INFINITY;
        row_max = fmaxf(row_max, s[i][j]);
      }
      const float m_new = fmaxf(m[i], row_group_max(row_max));
      // Until a row has seen a key its max stays -inf: it adds nothing, and e^(-inf - -inf)
      // (NaN) is never formed.
      const bool none = m_new == -INFINITY;
      const float correction = none ? 1.0f : expf(m[i] - m_new);  // 0 on the row's first keys
      float row_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const float p = none ? 0.0f : expf(s[i][j] - m_new);
        ps[(ty + kSide * i) * kScoreLd + tx + kSide * j] = p;
        row_sum += p;
      }
      l[i] = l[i] * correction + row_group_sum(row_sum);
      m[i] = m_new;
#pragma unroll
      for (int u = 0; u < kCh; ++u) acc[i][u] *= correction;
    }
    __syncthreads();  // P is complete, and nobody reads K any more
    load_rows(kvs, vh, j0, Tk, hs);
    __syncthreads();
    tile_product<kCh>(acc, ps, false, kvs, min(kTile, Tk - j0), hs, ty, tx);
  }

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int a = i0 + ty + kSide * i;
    if (a >= Tq) continue;
    const long long row = bh * ldq + a;
    if (tx == 0) lse[row] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
#pragma unroll
    for (int u = 0; u < kCh; ++u) {
      const int c = tx + kSide * u;
      if (c < hs) out[row * hs + c] = l[i] > 0.0f ? acc[i][u] / l[i] : 0.0f;
    }
  }
}

// Backward, one kernel. Grid: blockIdx.x = bh * k_blocks + kb; the block owns keys
// [64 kb, 64 kb + 64) of head bh and keeps their K and V in shared memory and their dk and dv
// in registers (thread (ty, tx): keys ty + 16 i, channels tx + 16 u). It walks the query tiles
// that can see its keys (with the causal mask, from its own first key on). Per query tile:
//   recompute S = scale q k^T and P = exp(S - lse) from the forward's lse (nothing of size
//   T x T was stored), dP = dout v^T, D = rowsum(dout * out), dS = P (dP - D);
//   dv += P^T dout, dk += scale dS^T q, and dq += scale dS k for the tile's queries.
// dq is a sum over key blocks that run in different blocks, so each adds its share with
// atomicAdd, as FlashAttention-2 does: the order of those additions, and so dq's last bits, may
// differ from run to run.
template <int kCh>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, int Tq, int Tk, long long ldq,
                          long long ldk, int hs, bool causal, float scale, int k_blocks) {
  float* ks = attention_shared();
  float* vs = ks + kTile * row_ld(hs);
  float* qs = vs + kTile * row_ld(hs);
  float* dos = qs + kTile * row_ld(hs);
  float* ss = dos + kTile * row_ld(hs);  // the tile's P, then its scale dS: [64 queries][kScoreLd]
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const long long bh = blockIdx.x / k_blocks;
  const int j0 = (blockIdx.x % k_blocks) * kTile;
  const long long q_head = bh * ldq, k_head = bh * ldk;  // each head's first row
  load_rows(ks, k + k_head * hs, j0, Tk, hs);
  load_rows(vs, v + k_head * hs, j0, Tk, hs);

  float dk_acc[kPer][kCh], dv_acc[kPer][kCh];
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int u = 0; u < kCh; ++u) dk_acc[i][u] = dv_acc[i][u] = 0.0f;

  for (int i0 = causal ? j0 : 0; i0 < Tq; i0 += kTile) {
    __syncthreads();  // every thread is done with the last query tile (and K, V are stored)
    load_rows(qs, q + q_head * hs, i0, Tq, hs);
    load_rows(dos, dout + q_head * hs, i0, Tq, hs);
    __syncthreads();

    // Each of the thread's query rows: its lse, and D = dout . out (out read once, here).
    float row_lse[kPer], D[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int a = i0 + ty + kSide * i;
      float d = 0.0f;
      if (a < Tq)
#pragma unroll
        for (int u = 0; u < kCh; ++u) {
          const int c = tx + kSide * u;
          if (c < hs) d += dos[(ty + kSide * i) * row_ld(hs) + c] * out[(q_head + a) * hs + c];
        }
      D[i] = row_group_sum(d);
      row_lse[i] = a < Tq ? lse[q_head + a] : -INFINITY;
    }

    float p[kPer][kPer], ds[kPer][kPer];
    tile_dots(p, qs, ks, hs, ty, tx);    // q . k
    tile_dots(ds, dos, vs, hs, ty, tx);  // dP = dout . v
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int a = i0 + ty + kSide * i;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int b = j0 + tx + kSide * j;
        // A row with lse -inf saw no key in the forward; none is visible here either.
        const bool seen = a < Tq && b < Tk && (!causal || b <= a) && row_lse[i] != -INFINITY;
        p[i][j] = seen ? expf(scale * p[i][j] - row_lse[i]) : 0.0f;
        ds[i][j] = scale * p[i][j] * (ds[i][j] - D[i]);
        ss[(ty + kSide * i) * kScoreLd + tx + kSide * j] = p[i][j];
      }
    }
    const int queries = min(kTile, Tq - i0), keys = min(kTile, Tk - j0);
    __syncthreads();  // P is complete
    tile_product<kCh>(dv_acc, ss, true, dos, queries, hs, ty, tx);  // dv += P^T dout
    __syncthreads();  // everyone is done reading P
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) ss[(ty + kSide * i) * kScoreLd + tx + kSide * j] = ds[i][j];
    __syncthreads();  // scale dS is complete
    tile_product<kCh>(dk_acc, ss, true, qs, queries, hs, ty, tx);  // dk += scale dS^T q

    // dq += scale dS k, for the thread's query rows: this block's share, added atomically.
    float dq_part[kPer][kCh];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int u = 0; u < kCh; ++u) dq_part[i][u] = 0.0f;
    tile_product<kCh>(dq_part, ss, false, ks, keys, hs, ty, tx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int a = i0 + ty + kSide * i;
      if (a >= Tq) continue;
#pragma unroll
      for (int u = 0; u < kCh; ++u) {
        const int c = tx + kSide * u;
        if (c < hs) atomicAdd(&dq[(q_head + a) * hs + c], dq_part[i][u]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int b = j0 + ty + kSide * i;
    if (b >= Tk) continue;
#pragma unroll
    for (int u = 0; u < kCh; ++u) {
      const int c = tx + kSide * u;
      if (c < hs) {
        dk[(k_head + b) * hs + c] += dk_acc[i][u];
        dv[(k_head + b) * hs + c] += dv_acc[i][u];
      }
    }
  }
}

}  // namespace flash
