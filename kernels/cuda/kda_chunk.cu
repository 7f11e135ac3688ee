// The chunked KDA prefill (kda_chunk_cuda, glm5_next.hpp): the chunkwise form of the gated delta rule
// that kernels/cpu/kda_chunk.cpp spells out, on the device. Four kernels:
//   inputs  per (token, head): causal conv + SiLU (reading earlier tokens' u directly, the state's
//           conv history before the sequence's first token), q and k l2-normalised, the log-decay
//           g, into scratch; parallel over tokens, where the token kernel walks them;
//   prep    per (chunk, head), every chunk at once: what does not depend on the state -- the
//           cumulative decays, the chunk x chunk products M and P with every exponent G_t - G_s
//           <= 0, and the triangular solve applied to v and to the decayed keys;
//   scan    per (sequence, head, 32 value columns), chunk after chunk: the state's part, products
//           of the chunk's rows with the state slice, and the state carried to the next chunk in
//           fp32. Value columns are independent given prep's operands, so a long prompt of one
//           sequence still fills the GPU (64 heads of 128 -> 256 blocks);
//   norm    per (token, head): the gated RMSNorm of the outputs.
// fp32 throughout; the scan's products on the tensor cores in 3xTF32 (fp32's accuracy), the rest on
// the CUDA cores; the operands in shared memory.
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <string>

#include "common.cuh"
#include "tandem/kernels/glm5_next.hpp"

namespace tandem::kernels {
namespace {

using cuda::block_sum;

constexpr int kThreads = 256;
constexpr int kSlice = 32;  // value columns per block: one per lane
constexpr int kMaxChunkRows = kKdaMaxChunk / (kThreads / 32);  // chunk rows per warp

__device__ __forceinline__ float sigmoid_(float x) { return 1.f / (1.f + expf(-x)); }

// The sequence owning token t: the last one whose range begins at or before t (empty sequences
// share their begin with the next one, which is the one that owns t).
__device__ int owner(const std::int32_t* seq_begin, int sequences, int t) {
  int lo = 0, hi = sequences - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seq_begin[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Block (token, head), thread j: channel j of the head's q, k and v. Same arithmetic as the token
// kernel (glm5_next.cu), so both paths start the delta rule from the same inputs.
__global__ void kda_chunk_inputs_kernel(KdaShape s, KdaWeights w, KdaIo io, int sequences, const std::int32_t* seq_begin,
                                        const std::int32_t* slot, const std::int32_t* reset, const float* state,
                                        long state_stride, long layer_at, float* mixed, float* glog) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, h = blockIdx.y, hd = s.head_dim, K = s.conv_kernel, j = threadIdx.x;
  const int qk = s.heads * hd, channels = 3 * qk;
  const bool mine = j < hd;
  const int q = owner(seq_begin, sequences, t), b = seq_begin[q];
  const float* history = state + static_cast<long>(slot[q]) * state_stride + layer_at;
  const bool zero = reset[q] != 0;
  float m[3] = {0.f, 0.f, 0.f};
  if (mine) {
    for (int c = 0; c < 3; ++c) {
      const int ch = c * qk + h * hd + j;
      const float* tap = w.conv + static_cast<long>(ch) * K;
      float acc = tap[K - 1] * io.u[static_cast<long>(t) * io.ld_u + ch];
      for (int i = 0; i < K - 1; ++i) {  // tap i: the input K - 1 - i tokens back
        const int at = t - (K - 1 - i);
        const float x = at >= b      ? io.u[static_cast<long>(at) * io.ld_u + ch]
                        : zero        ? 0.f
                                      : history[static_cast<long>(K - 1 - (b - at)) * channels + ch];
        acc += tap[i] * x;
      }
      m[c] = acc / (1.f + expf(-acc));
    }
  }
  const float qq = block_sum(mine ? m[0] * m[0] : 0.f, scratch);
  const float kk = block_sum(mine ? m[1] * m[1] : 0.f, scratch);
  if (!mine) return;
  float* row = mixed + static_cast<long>(t) * channels + h * hd + j;
  row[0] = m[0] * rsqrtf(qq + 1e-6f) * rsqrtf(static_cast<float>(hd));
  row[qk] = m[1] * rsqrtf(kk + 1e-6f);
  row[2 * qk] = m[2];
  const float rate = expf(w.a_log[h]);
  const float gi = io.g_raw[static_cast<long>(t) * io.ld_g + h * hd + j] + w.dt_bias[h * hd + j];
  const float softplus = gi > 20.f ? gi : log1pf(expf(gi));
  glog[static_cast<long>(t) * qk + h * hd + j] = s.lower_bound_set ? s.lower_bound * sigmoid_(rate * gi) : -rate * softplus;
}

// The scratch (kda_chunk_scratch_floats): per token rows of [q | k | v] (3 qk), the log-decays
// (qk), P's rows (heads * kKdaMaxChunk) and, at a chunk's first token, e^{G_last} (qk). The prep
// kernel overwrites q, k, v and g in place with what the scan needs (see there).
struct Scratch {
  float *mixed, *g, *p, *egl;
  long qk, ld_p;
  Scratch(float* base, int tokens, int heads, int hd)
      : qk(static_cast<long>(heads) * hd), ld_p(static_cast<long>(heads) * kKdaMaxChunk) {
    mixed = base;
    g = mixed + tokens * 3 * qk;
    p = g + tokens * qk;
    egl = p + tokens * ld_p;
  }
};

// c += a b in 3xTF32: a = a_hi + a_lo with a_hi = tf32(a), a_lo = tf32(a - a_hi), likewise b, and
// c += a_lo b_hi + a_hi b_lo + a_hi b_hi: fp32's accuracy from tf32 tensor cores (plain TF32's
// 10-bit mantissa would leave about 1e-3, ten times the bar).
namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragAc = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;
template <class F>
__device__ __forceinline__ void split(const F& x, F& hi, F& lo, float sign = 1.f) {
#pragma unroll
  for (int e = 0; e < x.num_elements; ++e) {
    const float v = sign * x.x[e];
    hi.x[e] = wmma::__float_to_tf32(v);
    lo.x[e] = wmma::__float_to_tf32(v - hi.x[e]);
  }
}
template <class A, class B>
__device__ __forceinline__ void mma3(FragC& c, const A& ahi, const A& alo, const B& bhi, const B& blo) {
  wmma::mma_sync(c, alo, bhi, c);
  wmma::mma_sync(c, ahi, blo, c);
  wmma::mma_sync(c, ahi, bhi, c);
}

// Shared memory of the two chunk kernels, in floats; ld = hd + 1 and C + 1 against bank conflicts.
struct PrepSmem {
  int ld, lx, C, blocks, q, k, g, m, p, x, glast, beta, total;
  __host__ __device__ PrepSmem(int hd, int chunk) : ld(hd + 1), lx(2 * hd + 1), C(chunk), blocks((chunk + 15) / 16) {
    q = 0;
    k = q + C * ld;
    g = k + C * ld;           // G, later k e^{G_last - G}
    m = g + C * ld;           // beta_t M_ts [C][C + 1]
    p = m + C * (C + 1);      // P_ts
    // [beta v | beta e^G k], solved in place [C][2 hd + 1]; before that the factors of the
    // products between 16-token blocks (prep kernel), 32-byte aligned for wmma.
    x = (p + C * (C + 1) + 7) / 8 * 8;
    const int factors = blocks > 1 ? (32 + 16 * (blocks - 1)) * hd + (kThreads / 32) * 256 : 0;
    glast = x + (C * lx > factors ? C * lx : factors);  // [hd]
    beta = glast + hd;        // [C]
    total = beta + C;
  }
};
// The scan's operands, each starting on 32 bytes (wmma's loads); rows padded to Cp, a multiple of
// 16 (the tiles' height), with zeros. Qe's space takes the outputs' state part once Qe is used,
// and Wk's takes KL, so that two blocks fit an SM (107 KB each at head_dim 128, chunk 64).
__host__ __device__ constexpr int round8(int x) { return (x + 7) / 8 * 8; }
struct ScanSmem {
  int Cp, qe, wk, p, u, st, egl, total;
  __host__ __device__ ScanSmem(int hd, int chunk) : Cp((chunk + 15) / 16 * 16) {
    qe = 0;                             // Qe [Cp][hd], then the outputs' state part [Cp][kSlice]
    wk = qe + Cp * (hd > kSlice ? hd : kSlice);  // Wk [Cp][hd], then KL
    p = wk + Cp * hd;                   // P [chunk][chunk + 1]
    u = p + round8(chunk * (chunk + 1));  // Uv, then U [Cp][kSlice]
    st = u + Cp * kSlice;               // the state's slice [hd][kSlice]
    egl = st + hd * kSlice;             // [hd]
    total = egl + round8(hd);
  }
};

// The chunk `c` of all the sequences' chunks (each sequence cut into `chunk`-token pieces from its
// first token): its sequence's begin and its first token; false past the last chunk.
__device__ bool find_chunk(const std::int32_t* seq_begin, int sequences, int chunk, int c, int& t0, int& n) {
  for (int q = 0; q < sequences; ++q) {
    const int b = seq_begin[q], e = seq_begin[q + 1], count = (e - b + chunk - 1) / chunk;
    if (c < count) {
      t0 = b + c * chunk;
      n = min(chunk, e - t0);
      return true;
    }
    c -= count;
  }
  return false;
}

// The state-independent part of one chunk of one head, numbered as in
// kda_chunk.cpp's header: G, M and P with pairwise decays (every exponent <= 0), then the forward
// substitution applied to [beta v | beta e^G k] at once, so that for the state S_0 before the chunk
//   U = Uv - Wk S_0,  o = Qe S_0 + P U,  S_C = diag(e^{G_last}) S_0 + KL^T U
// with Uv = A^-1 (beta v), Wk = A^-1 (beta e^G k), Qe = e^G q, KL = e^{G_last - G} k, A = I + beta M.
// Written over the chunk's rows: q <- Qe, k <- Wk, v <- Uv, g <- KL; P's rows and e^{G_last}.
// Chunks are independent here: the grid covers every chunk of every sequence at once.
// long-function: its phases share the chunk's tiles in shared memory, one after the other.
__global__ void __launch_bounds__(kThreads) kda_chunk_prep_kernel(KdaShape s, KdaIo io, int chunk, int sequences,
                                                                  const std::int32_t* seq_begin, Scratch sc) {
  extern __shared__ __align__(128) float prep_sm[];  // wmma wants 32-byte aligned tiles
  float* sm = prep_sm;
  int t0 = 0, n = 0;
  if (!find_chunk(seq_begin, sequences, chunk, blockIdx.x, t0, n)) return;
  const int h = blockIdx.y, hd = s.head_dim, tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = kThreads / 32;
  const long qk = sc.qk, channels = 3 * qk;
  const PrepSmem L(hd, chunk);
  const int ld = L.ld, lx = L.lx, lc = chunk + 1;
  float *Q = sm + L.q, *Kk = sm + L.k, *G = sm + L.g, *M = sm + L.m, *P = sm + L.p, *X = sm + L.x;
  float *Glast = sm + L.glast, *Beta = sm + L.beta;
  float* qrow = sc.mixed + t0 * channels + h * hd;  // row t at t * channels; k at + qk, v at + 2 qk
  float* grow = sc.g + t0 * qk + h * hd;
  for (int t = tid; t < n; t += kThreads) Beta[t] = sigmoid_(io.beta_raw[static_cast<long>(t0 + t) * io.ld_beta + h]);
  for (int x = tid; x < n * hd; x += kThreads) {
    const int t = x / hd, i = x % hd;
    Q[t * ld + i] = qrow[t * channels + i];
    Kk[t * ld + i] = qrow[t * channels + qk + i];
  }
  for (int i = tid; i < hd; i += kThreads) {
    double acc = 0;  // in fp64: G_t - G_s cancels, so G's rounding is what the decays' error is
    for (int t = 0; t < n; ++t) G[t * ld + i] = static_cast<float>(acc += grow[t * qk + i]);
    Glast[i] = static_cast<float>(acc);
  }
  __syncthreads();
  // M_ts (s < t, times beta_t) and P_ts (s <= t) in 16-token blocks. Within a block: pairwise,
  // pair y = tl (tl + 1) / 2 + rl of block b.
  for (int x = tid; x < L.blocks * 136; x += kThreads) {
    const int b = x / 136, y = x % 136;
    int tl = static_cast<int>((sqrtf(8.f * static_cast<float>(y) + 1.f) - 1.f) * 0.5f);
    while (tl * (tl + 1) / 2 > y) --tl;  // the float root may land one off either way
    while ((tl + 1) * (tl + 2) / 2 <= y) ++tl;
    const int t = 16 * b + tl, r = 16 * b + y - tl * (tl + 1) / 2;
    if (t >= n) continue;
    float mm = 0.f, pp = 0.f;
    for (int i = 0; i < hd; ++i) {
      // __expf: the exponent's own rounding (G is fp32) is already larger than its error
      const float e = __expf(G[t * ld + i] - G[r * ld + i]) * Kk[r * ld + i];
      mm += Kk[t * ld + i] * e;
      pp += Q[t * ld + i] * e;
    }
    M[t * lc + r] = Beta[t] * mm;  // the diagonal is not used
    P[t * lc + r] = pp;
  }
  // Block bt against the blocks before it, through the last token before bt (ref): e^{G_t - G_s}
  // = e^{G_t - G_ref} e^{G_ref - G_s}, both exponents <= 0 (a factor that underflows belongs to a
  // product that does too), so M = Al Br^T and P = Aq Br^T: tensor-core tiles, 3xTF32. Only the
  // blocks that hold tokens of a short last chunk (16 bt < n): Br's rows and G_ref are written there.
  float* Al = X;                      // [16][hd] k_t e^{G_t - G_ref}
  float* Aq = X + 16 * hd;            // [16][hd] q_t e^{G_t - G_ref}
  float* Br = X + 32 * hd;            // [16 bt][hd] k_s e^{G_ref - G_s}
  for (int bt = 1; bt < L.blocks && 16 * bt < n; ++bt) {  // n is the block's own: the barriers inside agree
    const int ref = 16 * bt - 1;
    float* tmp = Br + 16 * bt * hd + warp * 256;  // a tile's 16 x 16 before it is spread into M or P
    __syncthreads();  // the previous block's tiles are read
    for (int x = tid; x < 16 * hd; x += kThreads) {
      const int t = 16 * bt + x / hd, i = x % hd;
      const float e = t < n ? __expf(G[t * ld + i] - G[ref * ld + i]) : 0.f;
      Al[x] = t < n ? Kk[t * ld + i] * e : 0.f;
      Aq[x] = t < n ? Q[t * ld + i] * e : 0.f;
    }
    for (int x = tid; x < 16 * bt * hd; x += kThreads) {
      const int r = x / hd, i = x % hd;
      Br[x] = Kk[r * ld + i] * __expf(G[ref * ld + i] - G[r * ld + i]);
    }
    __syncthreads();
    for (int tile = warp; tile < 2 * bt; tile += warps) {
      const bool is_p = tile >= bt;
      const int bs = tile % bt;
      FragC c;
      wmma::fill_fragment(c, 0.f);
      for (int k0 = 0; k0 < hd; k0 += 8) {
        FragA a, ahi, alo;
        FragBc b, bhi, blo;
        wmma::load_matrix_sync(a, (is_p ? Aq : Al) + k0, hd);
        split(a, ahi, alo);
        wmma::load_matrix_sync(b, Br + 16 * bs * hd + k0, hd);  // Br^T: column-major Br
        split(b, bhi, blo);
        mma3(c, ahi, alo, bhi, blo);
      }
      wmma::store_matrix_sync(tmp, c, 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int t = 16 * bt + e / 16, r = 16 * bs + e % 16;
        if (t >= n) continue;
        if (is_p) P[t * lc + r] = tmp[e];
        else M[t * lc + r] = Beta[t] * tmp[e];
      }
      __syncwarp();  // the next tile's store reuses tmp
    }
  }
  __syncthreads();  // the products above read q and G, rewritten below
  // Qe, KL and the right-hand sides [beta v | beta e^G k].
  for (int x = tid; x < n * hd; x += kThreads) {
    const int t = x / hd, i = x % hd;
    const float g = G[t * ld + i], e = expf(g), kv = Kk[t * ld + i];
    Q[t * ld + i] *= e;
    X[t * lx + hd + i] = Beta[t] * kv * e;
    X[t * lx + i] = Beta[t] * qrow[t * channels + 2 * qk + i];
    G[t * ld + i] = kv * expf(Glast[i] - g);
  }
  __syncthreads();
  // Forward substitution, a column per thread: X_t -= sum_{s<t} beta_t M_ts X_s.
  for (int c = tid; c < 2 * hd; c += kThreads)
    for (int t = 1; t < n; ++t) {
      float acc = X[t * lx + c];
      for (int r = 0; r < t; ++r) acc -= M[t * lc + r] * X[r * lx + c];
      X[t * lx + c] = acc;
    }
  __syncthreads();
  for (int x = tid; x < n * hd; x += kThreads) {
    const int t = x / hd, i = x % hd;
    qrow[t * channels + i] = Q[t * ld + i];
    qrow[t * channels + qk + i] = X[t * lx + hd + i];
    qrow[t * channels + 2 * qk + i] = X[t * lx + i];
    grow[t * qk + i] = G[t * ld + i];
  }
  float* prow = sc.p + t0 * sc.ld_p + static_cast<long>(h) * kKdaMaxChunk;
  for (int x = tid; x < n * n; x += kThreads) {
    const int t = x / n, r = x % n;
    prow[t * sc.ld_p + r] = r <= t ? P[t * lc + r] : 0.f;
  }
  for (int i = tid; i < hd; i += kThreads) sc.egl[t0 * qk + h * hd + i] = expf(Glast[i]);
}

// long-function: one block walks one sequence's chunks for one head and 32 value columns (the
// columns are independent given the prep kernel's operands, so a long prompt of one sequence
// still fills the GPU: 64 heads of 128 -> 256 blocks), carrying its slice of the state in fp32.
// The products with the state on the tensor cores (3xTF32, 16 x 16 tiles): head_dim % 16 == 0.
__global__ void __launch_bounds__(kThreads, 2) kda_chunk_scan_kernel(KdaShape s, KdaIo io, int chunk, const std::int32_t* seq_begin,
                                                                     const std::int32_t* slot, const std::int32_t* reset, float* state,
                                                                     long state_stride, long layer_at, Scratch sc) {
  extern __shared__ __align__(128) float scan_sm[];  // wmma wants 32-byte aligned tiles
  float* sm = scan_sm;
  const int seq = blockIdx.x, h = blockIdx.y, hd = s.head_dim, K = s.conv_kernel;
  const long qk = sc.qk, channels = 3 * qk;
  const int j0 = blockIdx.z * kSlice, nv = min(kSlice, hd - j0);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = kThreads / 32;
  static_assert(kKdaMaxChunk / 16 * 2 <= kThreads / 32, "one output tile per warp (the stores wait for a barrier)");
  const ScanSmem L(hd, chunk);
  const int Cp = L.Cp, lc = chunk + 1;
  float *Qe = sm + L.qe, *Ob = sm + L.qe, *Wk = sm + L.wk, *KL = sm + L.wk, *P = sm + L.p, *U = sm + L.u, *St = sm + L.st;
  float* Egl = sm + L.egl;
  const int begin = seq_begin[seq], end = seq_begin[seq + 1];
  float* base = state + static_cast<long>(slot[seq]) * state_stride + layer_at;
  float* S = base + (K - 1) * channels + static_cast<long>(h) * hd * hd;  // [hd][hd]
  const bool zero = reset[seq] != 0;
  for (int x = tid; x < hd * kSlice; x += kThreads) {
    const int i = x / kSlice, j = x % kSlice;
    St[x] = zero || j >= nv ? 0.f : S[static_cast<long>(i) * hd + j0 + j];
  }
  for (int t0 = begin; t0 < end; t0 += chunk) {
    const int n = min(chunk, end - t0);
    const float* row = sc.mixed + t0 * channels + h * hd;
    for (int x = tid; x < Cp * hd; x += kThreads) {
      const int t = x / hd, i = x % hd;
      Qe[x] = t < n ? row[t * channels + i] : 0.f;
      Wk[x] = t < n ? row[t * channels + qk + i] : 0.f;
    }
    for (int x = tid; x < Cp * kSlice; x += kThreads) {
      const int t = x / kSlice, j = x % kSlice;
      U[x] = t < n && j < nv ? row[t * channels + 2 * qk + j0 + j] : 0.f;
    }
    const float* prow = sc.p + t0 * sc.ld_p + static_cast<long>(h) * kKdaMaxChunk;
    for (int x = tid; x < n * n; x += kThreads) P[(x / n) * lc + x % n] = prow[(x / n) * sc.ld_p + x % n];
    for (int i = tid; i < hd; i += kThreads) Egl[i] = sc.egl[t0 * qk + h * hd + i];
    __syncthreads();
    // U = Uv - Wk S_0 (accumulated onto Uv with -Wk) and the outputs' state part Qe S_0: warp w
    // takes rows 16 (w / 2).. and columns 16 (w % 2)..
    FragC cu, co;
    for (int tile = warp; tile < Cp / 16 * 2; tile += warps) {
      const int m0 = tile / 2 * 16, n0 = tile % 2 * 16;
      wmma::load_matrix_sync(cu, U + m0 * kSlice + n0, kSlice, wmma::mem_row_major);
      wmma::fill_fragment(co, 0.f);
      for (int k0 = 0; k0 < hd; k0 += 8) {
        FragA a, ahi, alo;
        FragB b, bhi, blo;
        wmma::load_matrix_sync(b, St + k0 * kSlice + n0, kSlice);
        split(b, bhi, blo);
        wmma::load_matrix_sync(a, Wk + m0 * hd + k0, hd);
        split(a, ahi, alo, -1.f);
        mma3(cu, ahi, alo, bhi, blo);
        wmma::load_matrix_sync(a, Qe + m0 * hd + k0, hd);
        split(a, ahi, alo);
        mma3(co, ahi, alo, bhi, blo);
      }
      // Another warp may still read this tile's rows of Qe (other column half): stored after the barrier.
    }
    __syncthreads();
    for (int tile = warp; tile < Cp / 16 * 2; tile += warps) {
      const int m0 = tile / 2 * 16, n0 = tile % 2 * 16;
      wmma::store_matrix_sync(U + m0 * kSlice + n0, cu, kSlice, wmma::mem_row_major);
      wmma::store_matrix_sync(Ob + m0 * kSlice + n0, co, kSlice, wmma::mem_row_major);
    }
    for (int x = tid; x < Cp * hd; x += kThreads) KL[x] = x / hd < n ? sc.g[(t0 + x / hd) * qk + h * hd + x % hd] : 0.f;
    for (int x = tid; x < hd * kSlice; x += kThreads) St[x] *= Egl[x / kSlice];
    __syncthreads();
    // o = Ob + P U; raw outputs (the norm kernel follows).
#pragma unroll
    for (int r = 0; r < kMaxChunkRows; ++r) {
      const int t = warp + r * warps;
      if (t >= n || lane >= nv) continue;
      float acc = Ob[t * kSlice + lane];
      for (int x = 0; x <= t; ++x) acc += P[t * lc + x] * U[x * kSlice + lane];
      io.o[static_cast<long>(t0 + t) * io.ld_o + h * hd + j0 + lane] = acc;
    }
    // S = diag(e^{G_last}) S_0 (done above) + KL^T U: tiles of 16 key rows x 16 value columns.
    for (int tile = warp; tile < hd / 16 * 2; tile += warps) {
      const int i0 = tile / 2 * 16, n0 = tile % 2 * 16;
      FragC cs;
      wmma::load_matrix_sync(cs, St + i0 * kSlice + n0, kSlice, wmma::mem_row_major);
      for (int k0 = 0; k0 < Cp; k0 += 8) {
        FragAc a, ahi, alo;
        FragB b, bhi, blo;
        wmma::load_matrix_sync(a, KL + k0 * hd + i0, hd);  // KL^T: column-major KL
        split(a, ahi, alo);
        wmma::load_matrix_sync(b, U + k0 * kSlice + n0, kSlice);
        split(b, bhi, blo);
        mma3(cs, ahi, alo, bhi, blo);
      }
      wmma::store_matrix_sync(St + i0 * kSlice + n0, cs, kSlice, wmma::mem_row_major);
    }
    __syncthreads();
  }
  for (int x = tid; x < hd * kSlice; x += kThreads) {
    const int i = x / kSlice, j = x % kSlice;
    if (j < nv) S[static_cast<long>(i) * hd + j0 + j] = St[x];
  }
  // The conv history: the sequence's last K - 1 inputs (earlier ones from the old history, read
  // by the inputs kernel before this one ran). Row r takes the input K - 1 - r tokens back from
  // `end`; rows are written oldest first, so the old row a write reads (r + n) is not yet written.
  if (blockIdx.z != 0) return;
  for (int c = tid; c < 3 * hd; c += kThreads) {
    const long ch = (c / hd) * qk + h * hd + c % hd;
    for (int r = 0; r < K - 1; ++r) {
      const int at = end - (K - 1 - r);
      float x = 0.f;
      if (at >= begin) x = io.u[static_cast<long>(at) * io.ld_u + ch];
      else if (!zero) x = base[static_cast<long>(K - 1 - (begin - at)) * channels + ch];
      base[static_cast<long>(r) * channels + ch] = x;
    }
  }
}

// Block (token, head): o = rmsnorm(o) * o_norm * sigmoid(gate), as the token kernel does it.
__global__ void kda_chunk_norm_kernel(KdaShape s, KdaWeights w, KdaIo io) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, h = blockIdx.y, hd = s.head_dim, j = threadIdx.x;
  const bool mine = j < hd;
  float* o = io.o + static_cast<long>(t) * io.ld_o + h * hd;
  const float v = mine ? o[j] : 0.f;
  const float ss = block_sum(v * v, scratch);
  if (!mine) return;
  const float r = rsqrtf(ss / static_cast<float>(hd) + s.rms_eps);
  o[j] = v * r * w.o_norm[j] * sigmoid_(io.gate_raw[static_cast<long>(t) * io.ld_gate + h * hd + j]);
}

}  // namespace

Status kda_chunk_cuda(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int sequences, int tokens,
                      const std::int32_t* seq_begin, const std::int32_t* slot, const std::int32_t* reset, float* state,
                      long state_stride, long layer_at, int chunk, float* scratch, Stream stream) {
  if (s.head_dim < 16 || s.head_dim > 1024) return Error{"kda_chunk_cuda: linear_head_dim must be in [16, 1024]"};
  if (s.conv_kernel < 1) return Error{"kda_chunk_cuda: linear_conv_kernel_dim must be at least 1"};
  if (chunk < 1 || chunk > kKdaMaxChunk)
    return Error{"kda_chunk_cuda: chunk must be in [1, " + std::to_string(kKdaMaxChunk) + "], got " + std::to_string(chunk)};
  if (s.head_dim % 16 != 0)
    return Error{"kda_chunk_cuda: linear_head_dim must be a multiple of 16 (the tensor cores' tiles), got " + std::to_string(s.head_dim)};
  if (sequences == 0) return {};
  int device = 0, optin = 0;
  if (auto e = TANDEM_CUDA_STATUS(cudaGetDevice(&device), "kda_chunk_cuda"); !e) return e;
  if (auto e = TANDEM_CUDA_STATUS(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "kda_chunk_cuda"); !e)
    return e;
  // Shorter chunks where the block's shared memory does not hold the requested one (head_dim 128
  // at chunk 64 takes 199 KB in the prep kernel: sm_90 gives 227 KB, sm_80 and consumer
  // Blackwell less).
  const auto smem = [&](int c) {
    return 4L * std::max(PrepSmem(s.head_dim, c).total, ScanSmem(s.head_dim, c).total);
  };
  while (chunk > 1 && smem(chunk) > optin) --chunk;
  if (smem(chunk) > optin)
    return Error{"kda_chunk_cuda: head_dim " + std::to_string(s.head_dim) + " needs " + std::to_string(smem(chunk)) +
                 " bytes of shared memory even at chunk 1; the device gives a block " + std::to_string(optin)};
  const int prep_bytes = 4 * PrepSmem(s.head_dim, chunk).total, scan_bytes = 4 * ScanSmem(s.head_dim, chunk).total;
  if (auto e = TANDEM_CUDA_STATUS(cudaFuncSetAttribute(kda_chunk_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, prep_bytes),
                                  "kda_chunk_cuda");
      !e)
    return e;
  if (auto e = TANDEM_CUDA_STATUS(cudaFuncSetAttribute(kda_chunk_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, scan_bytes),
                                  "kda_chunk_cuda");
      !e)
    return e;
  const int threads = (s.head_dim + 31) / 32 * 32;
  const Scratch sc(scratch, tokens, s.heads, s.head_dim);
  if (tokens > 0) {
    kda_chunk_inputs_kernel<<<dim3(tokens, s.heads), threads, 0, stream>>>(s, w, io, sequences, seq_begin, slot, reset, state,
                                                                          state_stride, layer_at, sc.mixed, sc.g);
    if (auto e = TANDEM_CUDA_LAUNCHED("kda_chunk_inputs_kernel"); !e) return e;
    // At most tokens / chunk + one partial chunk per sequence; blocks past the last chunk return.
    const dim3 chunks((tokens + chunk - 1) / chunk + sequences, s.heads);
    kda_chunk_prep_kernel<<<chunks, kThreads, prep_bytes, stream>>>(s, io, chunk, sequences, seq_begin, sc);
    if (auto e = TANDEM_CUDA_LAUNCHED("kda_chunk_prep_kernel"); !e) return e;
  }
  const dim3 grid(sequences, s.heads, (s.head_dim + kSlice - 1) / kSlice);
  kda_chunk_scan_kernel<<<grid, kThreads, scan_bytes, stream>>>(s, io, chunk, seq_begin, slot, reset, state, state_stride, layer_at,
                                                                sc);
  if (auto e = TANDEM_CUDA_LAUNCHED("kda_chunk_scan_kernel"); !e) return e;
  if (tokens == 0) return {};
  kda_chunk_norm_kernel<<<dim3(tokens, s.heads), threads, 0, stream>>>(s, w, io);
  return TANDEM_CUDA_LAUNCHED("kda_chunk_norm_kernel");
}

}  // namespace tandem::kernels
