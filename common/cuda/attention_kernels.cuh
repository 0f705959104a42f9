// attention_kernels.cuh: attention forward and backward as FlashAttention-2 computes them, in fp32.
//
// Build: included by kernels.cu (which launches them) and by tests/unit/test_attention_kernels.cpp,
// which runs these same kernels on the CPU under a small CUDA emulator (tests/unit/cuda_emulator.h),
// so their indexing, masking and online softmax are checked on machines without a GPU. The file
// therefore uses nothing but threadIdx, blockIdx, __syncthreads, __shfl_xor_sync, atomicAdd and
// the float math functions, and takes its dynamic shared memory from dynamic_shared_floats(), which
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
// rows ty + 16 i and the channels 4 (tx + 16 u) + e (e < 4, u < kCh / 4): four consecutive
// channels, so that one 128-bit shared load brings all four.
//
// Why this shape: shared memory, not arithmetic, limits a tiled product on a GPU. An SM issues
// 128 fp32 multiply-adds a cycle but serves one shared-memory request of 128 bytes a cycle.
// So every product here reads float4s (4 channels of a row, or 4 consecutive scores): a thread
// loads 4 + 4 float4s and does 4 x 4 x 4 = 64 multiply-adds with them, 8 multiply-adds per load
// instruction. The shared rows are padded by 4 floats (to a multiple of 4, plus 4): the 8
// threads of a quarter warp then read 8 different rows' float4s from 8 different bank groups
// when the padded row is an odd number of float4s (head sizes that are multiples of 8). Strided
// rows (ty + 16 i) rather than contiguous ones make that so. A warp holds two row groups (ty
// even and odd); a row's max and sum reduce over its 16 threads with four shuffles.
#pragma once


namespace flash {

constexpr int kTile = 64;                // rows of a tile: queries or keys
constexpr int kSide = 16;                // the thread grid is kSide x kSide
constexpr int kThreads = kSide * kSide;  // 256
constexpr int kPer = kTile / kSide;      // 4: rows (or columns) of a tile per thread
constexpr int kMaxHs = 128;              // largest head size: kCh = 8 channels per thread
constexpr int kVec = 4;                  // floats in a float4
// A shared score tile's row: 80 floats, so that the two row groups of a warp store their 16
// scores each into 32 different banks (rows 80 floats apart start 16 banks apart), and their
// float4 loads of two rows fall in different bank groups.
constexpr int kScoreLd = kTile + 16;

// A head row in shared memory: the channels rounded up to whole float4s (the extra channels are
// zeros), plus one float4 of padding.
__host__ __device__ constexpr int padded_hs(int hs) { return (hs + kVec - 1) / kVec * kVec; }
__host__ __device__ constexpr int row_ld(int hs) { return padded_hs(hs) + kVec; }

// Blocks along one head: one per 64 queries (forward) or keys (backward).
__host__ __device__ constexpr int blocks_of(int rows) { return (rows + kTile - 1) / kTile; }

// Channels per thread for a head size: 4 (one float4) up to 64 (GPT-2's heads), 8 up to 128. A
// template parameter, so the accumulators stay in registers.
__host__ __device__ constexpr int channels_per_thread(int hs) { return hs <= 64 ? 4 : 8; }

// Shared memory, in floats. Forward: the query tile, a key tile's K and V, and its 64 x 64
// probabilities. Backward: the block's keys K and V, a query tile q and dout, the 64 x 64 P and
// dS (both keys by queries), and the query tile's lse and D. At hs = 64: 72,704 and 111,104
// bytes (two backward blocks fit an H100's SM); at hs = 128: 121,856 and 176,640.
__host__ __device__ constexpr int forward_shared_floats(int hs) { return 3 * kTile * row_ld(hs) + kTile * kScoreLd; }
__host__ __device__ constexpr int backward_shared_floats(int hs) {
  return 4 * kTile * row_ld(hs) + 2 * kTile * kScoreLd + 2 * kTile;
}

__device__ inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline void store4(float* p, float4 x) { *reinterpret_cast<float4*>(p) = x; }

// acc += a . b over four channels, one multiply-add each.
__device__ inline void dot4(float& acc, float4 a, float4 b) {
  acc += a.x * b.x;
  acc += a.y * b.y;
  acc += a.z * b.z;
  acc += a.w * b.w;
}

// Copies rows [r0, r0 + 64) of a head ([rows, hs], row-major, in global memory) into a padded
// shared tile: zeros past `rows` and in the channels past hs. Consecutive threads copy
// consecutive float4s of a row when rows are whole aligned float4s (hs a multiple of 4), else
// consecutive floats.
__device__ inline void load_rows(float* tile, const float* head, int r0, int rows, int hs) {
  const int ld = row_ld(hs);
  if (hs % kVec == 0 && reinterpret_cast<unsigned long long>(head) % sizeof(float4) == 0) {
    const int per_row = hs / kVec;
    for (int idx = threadIdx.x; idx < kTile * per_row; idx += kThreads) {
      const int r = idx / per_row, c = (idx - r * per_row) * kVec;
      const float4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
      store4(tile + r * ld + c, r0 + r < rows ? load4(head + static_cast<long long>(r0 + r) * hs + c) : zero);
    }
    return;
  }
  const int hp = padded_hs(hs);
  for (int idx = threadIdx.x; idx < kTile * hp; idx += kThreads) {
    const int r = idx / hp, c = idx - r * hp;
    tile[r * ld + c] = r0 + r < rows && c < hs ? head[static_cast<long long>(r0 + r) * hs + c] : 0.0f;
  }
}

// p[0..3] += x atomically: one vector atomic on Hopper and later (sm_90, CUDA 12), four before.
// p is 16-byte aligned.
__device__ inline void atomic_add4(float* p, float4 x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(p), x);
#else
  atomicAdd(p + 0, x.x);
  atomicAdd(p + 1, x.y);
  atomicAdd(p + 2, x.z);
  atomicAdd(p + 3, x.w);
#endif
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

// dot[i][j] = a_row(ty + 16 i) . b_row(tx + 16 j) over the padded channels of two shared tiles:
// per four channels, 4 + 4 float4 loads feed 64 multiply-adds.
__device__ inline void tile_dots(float dot[kPer][kPer], const float* a, const float* b, int hs, int ty, int tx) {
  const int ld = row_ld(hs);
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int j = 0; j < kPer; ++j) dot[i][j] = 0.0f;
  for (int c = 0; c < padded_hs(hs); c += kVec) {
    float4 av[kPer], bv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) av[i] = load4(a + (ty + kSide * i) * ld + c);
#pragma unroll
    for (int j = 0; j < kPer; ++j) bv[j] = load4(b + (tx + kSide * j) * ld + c);
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int j = 0; j < kPer; ++j) dot4(dot[i][j], av[i], bv[j]);
  }
}

// The first channel of the thread's u-th float4 of a head row: channels 4 (tx + 16 u) + e.
__device__ inline int channel_of(int tx, int u) { return kVec * (tx + kSide * u); }

// acc[i][4u + e] += sum over rows r < n of w[ty + 16 i][r] * x[r][channel_of(tx, u) + e]: rows
// of a shared score tile (row-major, kScoreLd) times n rows of a shared head tile. Per four rows
// r: 4 float4s of w and 4 kCh / 4 of x feed 4 x 4 x kCh multiply-adds. Scores past n are zeros
// (masked) and x's rows past n too (load_rows), so n rounds up to whole float4s.
template <int kCh>
__device__ inline void tile_product(float acc[kPer][kCh], const float* w, const float* x, int n, int hs, int ty,
                                    int tx) {
  const int ld = row_ld(hs);
  for (int r = 0; r < n; r += kVec) {
    float4 wv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) wv[i] = load4(w + (ty + kSide * i) * kScoreLd + r);
#pragma unroll
    for (int u = 0; u < kCh / kVec; ++u) {
      const int c = channel_of(tx, u);
      if (c >= padded_hs(hs)) continue;  // past the head (hs < 64, or hs < 128 at kCh 8)
      const float4 x0 = load4(x + (r + 0) * ld + c), x1 = load4(x + (r + 1) * ld + c);
      const float4 x2 = load4(x + (r + 2) * ld + c), x3 = load4(x + (r + 3) * ld + c);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        dot4(acc[i][kVec * u + 0], wv[i], float4{x0.x, x1.x, x2.x, x3.x});
        dot4(acc[i][kVec * u + 1], wv[i], float4{x0.y, x1.y, x2.y, x3.y});
        dot4(acc[i][kVec * u + 2], wv[i], float4{x0.z, x1.z, x2.z, x3.z});
        dot4(acc[i][kVec * u + 3], wv[i], float4{x0.w, x1.w, x2.w, x3.w});
      }
    }
  }
}

// The same with w transposed: acc[i][4u + e] += sum over r < n of w[r][ty + 16 i] x[r][...].
// Per row r: 4 single loads of w (two addresses a warp) and kCh / 4 float4s of x.
template <int kCh>
__device__ inline void tile_product_transposed(float acc[kPer][kCh], const float* w, const float* x, int n, int hs,
                                               int ty, int tx) {
  const int ld = row_ld(hs);
  for (int r = 0; r < n; ++r) {
    float wv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) wv[i] = w[r * kScoreLd + ty + kSide * i];
#pragma unroll
    for (int u = 0; u < kCh / kVec; ++u) {
      const int c = channel_of(tx, u);
      if (c >= padded_hs(hs)) continue;
      const float4 xv = load4(x + r * ld + c);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        acc[i][kVec * u + 0] += wv[i] * xv.x;
        acc[i][kVec * u + 1] += wv[i] * xv.y;
        acc[i][kVec * u + 2] += wv[i] * xv.z;
        acc[i][kVec * u + 3] += wv[i] * xv.w;
      }
    }
  }
}

// Forward. Grid: heads x query blocks, the block for head bh = blockIdx.x % heads; it owns 64
// queries of that head. Under the causal mask the last query blocks see the most keys, so they
// come first (blockIdx.x / heads counts the query blocks from the last): the grid's tail then
// holds the short blocks. The block walks the key tiles a row of the block can see (with the
// causal mask, none past the block's last query: the tiles above the diagonal are skipped, not
// computed and masked) and keeps, per query row, the running max m, the running sum l and the
// unnormalized output in registers: the online softmax. Per tile:
//   S = scale q k^T (masked to -inf), m' = max(m, rowmax S), P = exp(S - m'),
//   l = l e^(m - m') + rowsum P, acc = acc e^(m - m') + P v.
// At the end out = acc / l and lse = m + log l; a row that saw no key (Tk == 0) gets lse -inf
// and output 0.
// Pointers start at the block's first row of each head (the row offsets chapter 08's ring
// steps need); heads are ldq (ldk) rows apart.
template <int kCh>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v, int Tq, int Tk,
                         long long ldq, long long ldk, int hs, bool causal, float scale, int heads) {
  float* qs = dynamic_shared_floats();
  float* ks = qs + kTile * row_ld(hs);
  float* vs = ks + kTile * row_ld(hs);
  float* ps = vs + kTile * row_ld(hs);  // the tile's probabilities, [64 queries][kScoreLd]
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const long long bh = blockIdx.x % heads;
  const int i0 = (blocks_of(Tq) - 1 - static_cast<int>(blockIdx.x / heads)) * kTile;
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
    __syncthreads();  // every thread is done with the last tile's K, V and P (and qs is stored)
    load_rows(ks, kh, j0, Tk, hs);
    load_rows(vs, vh, j0, Tk, hs);
    __syncthreads();
    float s[kPer][kPer];
    tile_dots(s, qs, ks, hs, ty, tx);
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
    __syncthreads();  // P is complete
    tile_product<kCh>(acc, ps, vs, min(kTile, Tk - j0), hs, ty, tx);
  }

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int a = i0 + ty + kSide * i;
    if (a >= Tq) continue;
    const long long row = bh * ldq + a;
    if (tx == 0) lse[row] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
#pragma unroll
    for (int u = 0; u < kCh; ++u) {
      const int c = channel_of(tx, u / kVec) + u % kVec;
      if (c < hs) out[row * hs + c] = l[i] > 0.0f ? acc[i][u] / l[i] : 0.0f;
    }
  }
}

// Backward, one kernel. Grid: heads x key blocks, the block for head bh = blockIdx.x % heads;
// it owns 64 keys of that head, the first key blocks first (under the causal mask they are seen
// by the most queries). It keeps their K and V in shared memory and their dk and dv in registers
// (thread (ty, tx): keys ty + 16 i), and walks the query tiles that can see its keys (with the
// causal mask, from its own first key on). Per query tile, with keys as rows and queries as
// columns (thread (ty, tx): key ty + 16 i, query tx + 16 j), so that dv and dk, the products
// every tile adds to, read rows of the score tile:
//   recompute S^T = scale k q^T and P^T = exp(S^T - lse) from the forward's lse (nothing of
//   size T x T was stored), dP^T = v dout^T, D = rowsum(dout * out) per query,
//   dS^T = P^T (dP^T - D); dv += P^T dout, dk += scale dS^T q, and dq += scale dS k for the
//   tile's queries.
// dq is a sum over key blocks that run in different blocks, so each adds its share with
// atomicAdd, as FlashAttention-2 does: the order of those additions, and so dq's last bits, may
// differ from run to run.
template <int kCh>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, int Tq, int Tk, long long ldq,
                          long long ldk, int hs, bool causal, float scale, int heads) {
  const int ld = row_ld(hs);
  float* ks = dynamic_shared_floats();
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld;
  float* dos = qs + kTile * ld;
  float* ps = dos + kTile * ld;          // P^T: [64 keys][kScoreLd]
  float* dss = ps + kTile * kScoreLd;    // scale dS^T, the same
  float* lse_s = dss + kTile * kScoreLd;  // the query tile's lse
  float* d_s = lse_s + kTile;             // and D
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const long long bh = blockIdx.x % heads;
  const int j0 = static_cast<int>(blockIdx.x / heads) * kTile;
  const long long q_head = bh * ldq, k_head = bh * ldk;  // each head's first row
  // dq's rows are whole aligned float4s: its shares go in by vector atomics.
  const bool whole_float4s = hs % kVec == 0 && reinterpret_cast<unsigned long long>(dq) % sizeof(float4) == 0;
  load_rows(ks, k + k_head * hs, j0, Tk, hs);
  load_rows(vs, v + k_head * hs, j0, Tk, hs);

  float dk_acc[kPer][kCh], dv_acc[kPer][kCh];
#pragma unroll
  for (int i = 0; i < kPer; ++i)
#pragma unroll
    for (int u = 0; u < kCh; ++u) dk_acc[i][u] = dv_acc[i][u] = 0.0f;

  // Three barriers a query tile: before it overwrites the last one's tiles, once its tiles, lse
  // and D are stored, and once P^T and dS^T are.
  for (int i0 = causal ? j0 : 0; i0 < Tq; i0 += kTile) {
    __syncthreads();  // every thread is done with the last query tile (and K, V are stored)
    load_rows(qs, q + q_head * hs, i0, Tq, hs);
    load_rows(dos, dout + q_head * hs, i0, Tq, hs);
    // The tile's lse and D = dout . out per query, row group ty taking queries ty + 16 i, both
    // read from global memory (out only here), so they need no barrier of their own.
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int r = ty + kSide * i, a = i0 + r;
      float d = 0.0f;
      if (a < Tq)
        for (int c = tx; c < hs; c += kSide) d += dout[(q_head + a) * hs + c] * out[(q_head + a) * hs + c];
      d = row_group_sum(d);
      if (tx == 0) {
        d_s[r] = d;
        lse_s[r] = a < Tq ? lse[q_head + a] : -INFINITY;
      }
    }
    __syncthreads();

    float p[kPer][kPer], ds[kPer][kPer];
    tile_dots(p, ks, qs, hs, ty, tx);    // k . q
    tile_dots(ds, vs, dos, hs, ty, tx);  // dP^T = v . dout
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int a = i0 + tx + kSide * j;  // the query
      const float row_lse = lse_s[tx + kSide * j], D = d_s[tx + kSide * j];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int b = j0 + ty + kSide * i;  // the key
        // A row with lse -inf saw no key in the forward; none is visible here either.
        const bool seen = a < Tq && b < Tk && (!causal || b <= a) && row_lse != -INFINITY;
        const float pij = seen ? expf(scale * p[i][j] - row_lse) : 0.0f;
        ps[(ty + kSide * i) * kScoreLd + tx + kSide * j] = pij;
        dss[(ty + kSide * i) * kScoreLd + tx + kSide * j] = scale * pij * (ds[i][j] - D);
      }
    }
    const int queries = min(kTile, Tq - i0), keys = min(kTile, Tk - j0);
    __syncthreads();  // P^T and scale dS^T are complete
    tile_product<kCh>(dv_acc, ps, dos, queries, hs, ty, tx);  // dv += P^T dout
    tile_product<kCh>(dk_acc, dss, qs, queries, hs, ty, tx);  // dk += scale dS^T q

    // dq += scale dS k, for queries ty + 16 i: this block's share, added atomically.
    float dq_part[kPer][kCh];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
#pragma unroll
      for (int u = 0; u < kCh; ++u) dq_part[i][u] = 0.0f;
    tile_product_transposed<kCh>(dq_part, dss, ks, keys, hs, ty, tx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int a = i0 + ty + kSide * i;
      if (a >= Tq) continue;
      float* dq_row = dq + (q_head + a) * hs;
#pragma unroll
      for (int u = 0; u < kCh / kVec; ++u) {
        const int c = channel_of(tx, u);
        const float* part = dq_part[i] + kVec * u;
        if (whole_float4s && c < hs) {
          atomic_add4(dq_row + c, float4{part[0], part[1], part[2], part[3]});
          continue;
        }
        for (int e = 0; e < kVec; ++e)
          if (c + e < hs) atomicAdd(dq_row + c + e, part[e]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int b = j0 + ty + kSide * i;
    if (b >= Tk) continue;
#pragma unroll
    for (int u = 0; u < kCh; ++u) {
      const int c = channel_of(tx, u / kVec) + u % kVec;
      if (c < hs) {
        dk[(k_head + b) * hs + c] += dk_acc[i][u];
        dv[(k_head + b) * hs + c] += dv_acc[i][u];
      }
    }
  }
}

}  // namespace flash
