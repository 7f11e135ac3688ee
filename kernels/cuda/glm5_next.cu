// glm5_next's CUDA kernels (tandem/kernels/glm5_next.hpp): naive and fp32 throughout, written to follow
// the CPU reference line by line rather than to be fast.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>

#include "common.cuh"
#include "tandem/kernels/glm5_next.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
using cuda::block_max;
using cuda::block_sum;
using cuda::warp_sum;

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

// ---- glue -------------------------------------------------------------------------------------

__global__ void rms_norm_f32_kernel(const float* x, long ldx, int n, const float* w, float eps, float* yf, long ldy, bf16* yb,
                                    long ldb) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * ldx;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i] * xr[i];
  const float r = rsqrtf(block_sum(s, scratch) / static_cast<float>(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] * r * w[i];
    if (yb) yb[blockIdx.x * ldb + i] = __float2bfloat16_rn(v);
    if (yf) yf[blockIdx.x * ldy + i] = v;
  }
}

__global__ void to_bf16_kernel(const float* x, long ldx, int n, bf16* y, long ldy) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[blockIdx.x * ldy + i] = __float2bfloat16_rn(x[blockIdx.x * ldx + i]);
}
__global__ void to_bf16_split_kernel(const float* x, long ldx, int n, bf16* hi, bf16* lo, long ld) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[blockIdx.x * ldx + i];
    const bf16 h = __float2bfloat16_rn(v);
    hi[blockIdx.x * ld + i] = h;
    lo[blockIdx.x * ld + i] = __float2bfloat16_rn(v - __bfloat162float(h));  // v - h is exact in fp32
  }
}
__global__ void to_f32_kernel(const bf16* x, long ldx, int n, float* y, long ldy) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[blockIdx.x * ldy + i] = __bfloat162float(x[blockIdx.x * ldx + i]);
}

__global__ void hc_embed_kernel(const bf16* table, const std::int32_t* ids, int hc, int hidden, float* streams) {
  const bf16* row = table + static_cast<long>(ids[blockIdx.x]) * hidden;
  float* out = streams + static_cast<long>(blockIdx.x) * hc * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    const float v = __bfloat162float(row[d]);
    for (int i = 0; i < hc; ++i) out[static_cast<long>(i) * hidden + d] = v;
  }
}

__global__ void hc_mean_kernel(const float* streams, int hc, int hidden, float* out) {
  const float* in = streams + static_cast<long>(blockIdx.x) * hc * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float acc = 0.f;
    for (int i = 0; i < hc; ++i) acc += in[static_cast<long>(i) * hidden + d];
    out[static_cast<long>(blockIdx.x) * hidden + d] = acc / static_cast<float>(hc);
  }
}

// ---- hyper-connections ------------------------------------------------------------------------

constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;

// The collapse in two launches, so that a step of few tokens reads fn ([M, n] fp32, M = (2 + hc) *
// hc mix rows of n = hc * hidden: 1.5 MB a layer at the default shape) with many blocks: one block
// per token had read it from one SM at ~11 GB/s (150 us a call at batch 1, 31% of the 5 B model's
// decode step). Block (chunk c, token t) of hc_mix_partial_kernel writes, for its kHcChunk inputs,
// each mix row's partial dot and the partial sum of squares: partial[t][c][0..M] (M: the squares);
// hc_finish_kernel adds the chunks in order (so a token's result never depends on the batch), then
// computes pre / post / comb and the collapsed stream. The mix is inv * (fn . streams), the rms
// applied after the dot.
constexpr int kHcChunk = 512;

__global__ void hc_mix_partial_kernel(HcShape s, const float* streams, const float* fn, float* partial) {
  __shared__ float scratch[32];
  __shared__ float x[kHcChunk];
  const int hc = s.hc, n = hc * s.hidden, M = (2 + hc) * hc, c = blockIdx.x, t = blockIdx.y;
  const int chunks = gridDim.x, at = c * kHcChunk, len = min(kHcChunk, n - at);
  const float* st = streams + static_cast<long>(t) * n + at;
  float ss = 0.f;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    x[i] = st[i];
    ss += st[i] * st[i];
  }
  ss = block_sum(ss, scratch);  // (syncs: x is complete after it)
  float* out = partial + (static_cast<long>(t) * chunks + c) * (M + 1);
  if (threadIdx.x == 0) out[M] = ss;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int r = warp; r < M; r += warps) {
    const float* row = fn + static_cast<long>(r) * n + at;
    float acc = 0.f;
    for (int i = lane; i < len; i += 32) acc += row[i] * x[i];
    acc = warp_sum(acc);
    if (lane == 0) out[r] = acc;
  }
}

// One block per token. A warp per mix row adds its chunks' partials (lanes over chunks, then the
// warp's sum: a fixed order, whatever the batch). Warp 0 runs the Sinkhorn normalisation in double
// (as the CPU reference), a lane an entry of comb (two where hc * hc > 32), reading the others'
// entries by shuffles in index order: no block barrier per iteration.
__global__ void hc_finish_kernel(HcShape s, const float* streams, const float* partial, int chunks, const float* base,
                                 const float* scale, float* collapsed, float* post, float* comb) {
  __shared__ float red[kMaxMix + 1];
  __shared__ float pre[kMaxHc];
  const int hc = s.hc, D = s.hidden, n = hc * D, M = (2 + hc) * hc, t = blockIdx.x, hh = hc * hc;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const double eps = s.hc_eps;
  for (int r = warp; r <= M; r += warps) {
    const float* p = partial + static_cast<long>(t) * chunks * (M + 1) + r;
    float acc = 0.f;
    for (int k = lane; k < chunks; k += 32) acc += p[static_cast<long>(k) * (M + 1)];
    acc = warp_sum(acc);
    if (lane == 0) red[r] = acc;
  }
  __syncthreads();
  const float inv = rsqrtf(red[M] / static_cast<float>(n) + s.rms_eps);
  auto mix = [&](int r) { return static_cast<double>(red[r] * inv); };
  if (warp == 1 && lane < hc) {
    pre[lane] = static_cast<float>(1.0 / (1.0 + exp(-(mix(lane) * scale[0] + base[lane]))) + eps);
    post[static_cast<long>(t) * hc + lane] = static_cast<float>(2.0 / (1.0 + exp(-(mix(hc + lane) * scale[1] + base[hc + lane]))));
  }
  if (warp == 0) {
    double v[2] = {0, 0};
    // Entry idx of comb, wherever it is held (every lane calls it with the same loop bounds).
    auto at = [&](int idx) {
      const double lo = __shfl_sync(0xffffffffu, v[0], idx & 31), hi = __shfl_sync(0xffffffffu, v[1], idx & 31);
      return idx < 32 ? lo : hi;
    };
    // Row i's softmax: each entry's logit, the row's max and sum over its entries in index order.
    for (int q = 0; q < 2; ++q) {
      const int e = lane + 32 * q;
      v[q] = e < hh ? mix(2 * hc + e) * scale[2] + base[2 * hc + e] : 0.0;
    }
    double top[2], sum[2];
    for (int q = 0; q < 2; ++q) top[q] = -1e300, sum[q] = 0;
    for (int k = 0; k < hc; ++k)
      for (int q = 0; q < 2; ++q) {
        const int e = min(lane + 32 * q, hh - 1), i = e / hc;
        top[q] = fmax(top[q], at(i * hc + k));
      }
    for (int q = 0; q < 2; ++q) v[q] = exp(v[q] - top[q]);
    for (int k = 0; k < hc; ++k)
      for (int q = 0; q < 2; ++q) {
        const int e = min(lane + 32 * q, hh - 1), i = e / hc;
        sum[q] += at(i * hc + k);
      }
    for (int q = 0; q < 2; ++q) v[q] = v[q] / sum[q] + eps;
    for (int it = 0; it < (s.sinkhorn_iters > 1 ? s.sinkhorn_iters : 1); ++it) {
      for (int pass = it > 0 ? 0 : 1; pass < 2; ++pass) {  // 0: rows (from the second iteration), 1: columns
        double total[2] = {0, 0};
        for (int k = 0; k < hc; ++k)
          for (int q = 0; q < 2; ++q) {
            const int e = min(lane + 32 * q, hh - 1), i = e / hc, j = e % hc;
            total[q] += at(pass == 0 ? i * hc + k : k * hc + j);
          }
        for (int q = 0; q < 2; ++q) v[q] /= total[q] + eps;
      }
    }
    for (int q = 0; q < 2; ++q)
      if (lane + 32 * q < hh) comb[static_cast<long>(t) * hh + lane + 32 * q] = static_cast<float>(v[q]);
  }
  __syncthreads();
  const float* st = streams + static_cast<long>(t) * n;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < hc; ++k) acc += pre[k] * st[static_cast<long>(k) * D + d];
    collapsed[static_cast<long>(t) * D + d] = acc;
  }
}

__global__ void hc_expand_kernel(HcShape s, float* streams, const float* y, const float* post, const float* comb) {
  const int hc = s.hc, D = s.hidden, t = blockIdx.y;
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float* st = streams + static_cast<long>(t) * hc * D;
  float old[kMaxHc];
  for (int j = 0; j < hc; ++j) old[j] = st[static_cast<long>(j) * D + d];
  const float yd = y[static_cast<long>(t) * D + d];
  const float* c = comb + static_cast<long>(t) * hc * hc;
  for (int i = 0; i < hc; ++i) {
    float acc = post[static_cast<long>(t) * hc + i] * yd;
    for (int j = 0; j < hc; ++j) acc += c[j * hc + i] * old[j];
    st[static_cast<long>(i) * D + d] = acc;
  }
}

// ---- KDA ----------------------------------------------------------------------------------------

// A token's inputs to the recurrence, the same in both KDA kernels below: for the thread that owns
// channel j (`owner`), the short convolution of its q, k and v channels over the history (shifted
// by one) and SiLU; then, with every thread of the block (block sums), the normalised query and
// key entries and the decay exp(g) into shared memory. Returns the owner's value entry.
__device__ __forceinline__ float kda_token_inputs(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int t, int h, int j,
                                                  int channels, float rate, const int (&ch)[3], bool owner, float* history,
                                                  float* scratch, float* sq, float* sk, float* sdecay) {
  const int hd = s.head_dim, K = s.conv_kernel;
  float mixed[3] = {0.f, 0.f, 0.f};
  if (owner) {
    for (int c = 0; c < 3; ++c) {
      const float* tap = w.conv + static_cast<long>(ch[c]) * K;
      const float u = io.u[static_cast<long>(t) * io.ld_u + ch[c]];
      float acc = tap[K - 1] * u;
      for (int i = 0; i < K - 1; ++i) acc += tap[i] * history[static_cast<long>(i) * channels + ch[c]];
      mixed[c] = acc / (1.f + expf(-acc));
      for (int i = 0; i + 1 < K - 1; ++i)
        history[static_cast<long>(i) * channels + ch[c]] = history[static_cast<long>(i + 1) * channels + ch[c]];
      if (K > 1) history[static_cast<long>(K - 2) * channels + ch[c]] = u;
    }
  }
  const float qq = block_sum(owner ? mixed[0] * mixed[0] : 0.f, scratch);
  const float kk = block_sum(owner ? mixed[1] * mixed[1] : 0.f, scratch);
  if (owner) {
    sq[j] = mixed[0] * rsqrtf(qq + 1e-6f) * rsqrtf(static_cast<float>(hd));
    sk[j] = mixed[1] * rsqrtf(kk + 1e-6f);
    const float gi = io.g_raw[static_cast<long>(t) * io.ld_g + h * hd + j] + w.dt_bias[h * hd + j];
    const float softplus = gi > 20.f ? gi : log1pf(expf(gi));
    const float g = s.lower_bound_set ? s.lower_bound * sigmoidf_(rate * gi) : -rate * softplus;
    sdecay[j] = expf(g);
  }
  return mixed[2];
}

// Block (sequence, head); thread j owns key/value channel j of the head (and column j of S).
__global__ void kda_recurrent_kernel(KdaShape s, KdaWeights w, KdaIo io, const std::int32_t* seq_begin,
                                     const std::int32_t* slot, const std::int32_t* reset, float* state, long state_stride,
                                     long layer_at) {
  extern __shared__ float shared[];
  __shared__ float scratch[32];
  const int seq = blockIdx.x, h = blockIdx.y, hd = s.head_dim, K = s.conv_kernel, j = threadIdx.x;
  const int qk = s.heads * hd, channels = 3 * qk;
  const bool mine = j < hd;
  float* sq = shared;           // [hd] normalised query
  float* sk = shared + hd;      // [hd] normalised key
  float* sdecay = sk + hd;      // [hd] exp(g) per key channel
  float* base = state + static_cast<long>(slot[seq]) * state_stride + layer_at;
  float* history = base;                                          // [K - 1][channels]
  float* S = base + static_cast<long>(K - 1) * channels + static_cast<long>(h) * hd * hd;  // [hd][hd]
  const int ch[3] = {h * hd + j, qk + h * hd + j, 2 * qk + h * hd + j};
  if (reset[seq] && mine) {
    for (int i = 0; i < K - 1; ++i)
      for (int c = 0; c < 3; ++c) history[static_cast<long>(i) * channels + ch[c]] = 0.f;
    for (int i = 0; i < hd; ++i) S[static_cast<long>(i) * hd + j] = 0.f;
  }
  const float rate = expf(w.a_log[h]);
  for (int t = seq_begin[seq]; t < seq_begin[seq + 1]; ++t) {
    const float value = kda_token_inputs(s, w, io, t, h, j, channels, rate, ch, mine, history, scratch, sq, sk, sdecay);
    __syncthreads();
    float o = 0.f;
    if (mine) {
      const float beta = sigmoidf_(io.beta_raw[static_cast<long>(t) * io.ld_beta + h]);
      float kv = 0.f;
      for (int i = 0; i < hd; ++i) {
        const float v = S[static_cast<long>(i) * hd + j] * sdecay[i];
        S[static_cast<long>(i) * hd + j] = v;
        kv += v * sk[i];
      }
      const float delta = (value - kv) * beta;
      for (int i = 0; i < hd; ++i) {
        const float v = S[static_cast<long>(i) * hd + j] + sk[i] * delta;
        S[static_cast<long>(i) * hd + j] = v;
        o += v * sq[i];
      }
    }
    // Gated RMSNorm over the head.
    const float ss = block_sum(mine ? o * o : 0.f, scratch);
    if (mine) {
      const float r = rsqrtf(ss / static_cast<float>(hd) + s.rms_eps);
      const float gate = io.gate_raw[static_cast<long>(t) * io.ld_gate + h * hd + j];
      io.o[static_cast<long>(t) * io.ld_o + h * hd + j] = o * r * w.o_norm[j] * sigmoidf_(gate);
    }
    __syncthreads();
  }
}

// The same recurrence with each head's state held in registers for the whole step: thread (j, q)
// of 4 * head_dim keeps rows q * R .. q * R + R - 1 of column j of S (R >= head_dim / 4), loaded
// once and stored once, where the kernel above reads and writes every entry of S twice a token,
// one dependent access after another. The two sums over a column (S^T k and S^T q) are each a
// thread's R rows in order, then the four quarters added by shuffles (lanes 4j .. 4j + 3 of one
// warp); the conv, the norms and the gate are thread (j, 0)'s, as thread j's above.
// long-function: the kernel above's token step (kept line for line beside it, for comparison)
// between the state's one load and one store.
template <int R>
__global__ void __launch_bounds__(4 * 4 * R)
    kda_recurrent_regs_kernel(KdaShape s, KdaWeights w, KdaIo io, const std::int32_t* seq_begin, const std::int32_t* slot,
                              const std::int32_t* reset, float* state, long state_stride, long layer_at) {
  extern __shared__ float shared[];
  __shared__ float scratch[32];
  const int seq = blockIdx.x, h = blockIdx.y, hd = s.head_dim, K = s.conv_kernel;
  const int j = threadIdx.x / 4, q = threadIdx.x % 4;
  const int qk = s.heads * hd, channels = 3 * qk;
  const bool col = j < hd, lead = col && q == 0;  // lead: thread j of the kernel above
  float* sq = shared;         // [hd] normalised query
  float* sk = shared + hd;    // [hd] normalised key
  float* sdecay = sk + hd;    // [hd] exp(g) per key channel
  float* sv = sdecay + hd;    // [hd] the value
  float* base = state + static_cast<long>(slot[seq]) * state_stride + layer_at;
  float* history = base;
  float* S = base + static_cast<long>(K - 1) * channels + static_cast<long>(h) * hd * hd;
  const int ch[3] = {h * hd + j, qk + h * hd + j, 2 * qk + h * hd + j};
  const bool fresh = reset[seq] != 0;
  // A sequence with no tokens (a graph step's padding, on slot 0 beside a real sequence that may
  // own it) must not touch the state: loading and storing it back would race that sequence's block.
  if (!fresh && seq_begin[seq] == seq_begin[seq + 1]) return;
  float reg[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = q * R + r;
    reg[r] = col && i < hd && !fresh ? S[static_cast<long>(i) * hd + j] : 0.f;
  }
  if (fresh && lead)
    for (int i = 0; i < K - 1; ++i)
      for (int c = 0; c < 3; ++c) history[static_cast<long>(i) * channels + ch[c]] = 0.f;
  const float rate = expf(w.a_log[h]);
  for (int t = seq_begin[seq]; t < seq_begin[seq + 1]; ++t) {
    const float value = kda_token_inputs(s, w, io, t, h, j, channels, rate, ch, lead, history, scratch, sq, sk, sdecay);
    if (lead) sv[j] = value;
    __syncthreads();
    float kv = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = q * R + r;
      if (i < hd) {
        reg[r] *= sdecay[i];
        kv += reg[r] * sk[i];
      }
    }
    kv += __shfl_xor_sync(0xffffffffu, kv, 1);
    kv += __shfl_xor_sync(0xffffffffu, kv, 2);
    const float beta = sigmoidf_(io.beta_raw[static_cast<long>(t) * io.ld_beta + h]);
    const float delta = col ? (sv[j] - kv) * beta : 0.f;
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = q * R + r;
      if (i < hd) {
        reg[r] += sk[i] * delta;
        o += reg[r] * sq[i];
      }
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    // Gated RMSNorm over the head.
    const float ss = block_sum(lead ? o * o : 0.f, scratch);
    if (lead) {
      const float r = rsqrtf(ss / static_cast<float>(hd) + s.rms_eps);
      const float gate = io.gate_raw[static_cast<long>(t) * io.ld_gate + h * hd + j];
      io.o[static_cast<long>(t) * io.ld_o + h * hd + j] = o * r * w.o_norm[j] * sigmoidf_(gate);
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = q * R + r;
    if (col && i < hd) S[static_cast<long>(i) * hd + j] = reg[r];
  }
}

// ---- DSA --------------------------------------------------------------------------------------

// The pool's elements (DsaPool::type): T is float, bf16 or __nv_fp8_storage_t (x / scale).
template <class T>
__device__ __forceinline__ T* pool_row(const DsaPool& p, int seq, int pos) {
  const long slot = static_cast<long>(p.tables[static_cast<long>(seq) * p.max_blocks + pos / p.block_size]) * p.block_size +
                    pos % p.block_size;
  return static_cast<T*>(p.rows) + slot * p.width;
}
__device__ __forceinline__ float pool_get(const float* r, int i, float) { return r[i]; }
__device__ __forceinline__ float pool_get(const bf16* r, int i, float) { return __bfloat162float(r[i]); }
__device__ __forceinline__ float pool_get(const __nv_fp8_storage_t* r, int i, float scale) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(r[i], __NV_E4M3))) * scale;
}
__device__ __forceinline__ void pool_put(float* r, int i, float x, float) { r[i] = x; }
__device__ __forceinline__ void pool_put(bf16* r, int i, float x, float) { r[i] = __float2bfloat16_rn(x); }
__device__ __forceinline__ void pool_put(__nv_fp8_storage_t* r, int i, float x, float scale) {
  r[i] = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
}

// Opts a kernel in to `shared` bytes of dynamic shared memory where that is past the 48 KB default.
template <class Kernel>
cudaError_t allow_shared(Kernel kernel, std::size_t shared) {
  return shared > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared))
                            : cudaSuccess;
}

// Launches kernel<T> for the pool's element type.
#define TANDEM_DSA_POOL_DISPATCH(pool, ...)                                          \
  switch ((pool).type) {                                                             \
    case DType::f32: { using T = float; __VA_ARGS__; break; }                        \
    case DType::bf16: { using T = bf16; __VA_ARGS__; break; }                        \
    case DType::fp8_e4m3: { using T = __nv_fp8_storage_t; __VA_ARGS__; break; }      \
  }

// The scale the pool's entries are stored at (a calibrated one from device memory where set).
__device__ __forceinline__ float pool_scale(const DsaPool& p) { return p.scale_at ? *p.scale_at : p.scale; }

// Where a row's entries go: into the pool, or (measuring, `amax` set) into a running max of |x|.
// |x| of a non-negative float orders as its bits do, so atomicMax on the bits is the float max.
template <class T>
struct RowSink {
  T* row;
  float scale;
  float* amax;
  __device__ void operator()(int i, float x) const {
    if (amax) atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(fabsf(x)));
    else pool_put(row, i, x, scale);
  }
};

template <class T>
__global__ void dsa_prepare_kernel(DsaShape s, DsaNorms nw, const float* proj, long ld_proj, const std::int32_t* token_seq,
                                   const std::int32_t* token_pos, DsaPool pool, float* qr, float* iw, float* amax) {
  __shared__ float scratch[32];
  const int t = blockIdx.x;
  const float* p = proj + static_cast<long>(t) * ld_proj;
  const RowSink<T> put{pool_row<T>(pool, token_seq[t], token_pos[t]), pool_scale(pool), amax};
  // q_a norm
  float a = 0.f;
  for (int i = threadIdx.x; i < s.lora_q; i += blockDim.x) a += p[i] * p[i];
  const float rq = rsqrtf(block_sum(a, scratch) / static_cast<float>(s.lora_q) + s.rms_eps);
  for (int i = threadIdx.x; i < s.lora_q; i += blockDim.x)
    qr[static_cast<long>(t) * s.lora_q + i] = p[i] * rq * nw.q_a_norm[i];
  // latent norm and the raw shared key
  const float* c = p + s.lora_q;
  a = 0.f;
  for (int i = threadIdx.x; i < s.lora_kv; i += blockDim.x) a += c[i] * c[i];
  const float rc = rsqrtf(block_sum(a, scratch) / static_cast<float>(s.lora_kv) + s.rms_eps);
  for (int i = threadIdx.x; i < s.lora_kv; i += blockDim.x) put(i, c[i] * rc * nw.kv_a_norm[i]);
  for (int i = threadIdx.x; i < s.rope; i += blockDim.x) put(s.lora_kv + i, c[s.lora_kv + i]);
  const int ik = s.lora_kv + s.rope;
  const int D = s.index_dim;
  if (!s.indexer) {
    for (int i = threadIdx.x; i < 2 * D; i += blockDim.x) put(ik + i, 0.f);
    return;
  }
  const float* k = c + s.lora_kv + s.rope;
  a = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) a += k[i];
  const float mean = block_sum(a, scratch) / static_cast<float>(D);
  a = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) a += (k[i] - mean) * (k[i] - mean);
  const float inv = rsqrtf(block_sum(a, scratch) / static_cast<float>(D) + 1e-6f);
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    put(ik + i, (k[i] - mean) * inv * nw.k_norm[i] + nw.k_norm_bias[i]);
    put(ik + D + i, k[D + i]);
  }
  const float* wp = k + 2 * D;
  const float wscale = rsqrtf(static_cast<float>(s.index_heads));
  for (int h = threadIdx.x; h < s.index_heads; h += blockDim.x) iw[static_cast<long>(t) * s.index_heads + h] = wp[h] * wscale;
}

constexpr int kMaxIndexHeads = 64, kMaxIndexDim = 256;

template <class T>
__global__ void dsa_select_kernel(DsaShape s, DsaPool pool, const float* iq, long ld_iq, const float* iw,
                                  const float* ape, const std::int32_t* token_seq, const std::int32_t* token_pos,
                                  float* scores, std::int32_t* chosen, int max_pools, std::int32_t* sel,
                                  std::int32_t* sel_n, int max_sel) {
  extern __shared__ float q[];  // [index_heads * index_dim]
  const int t = blockIdx.x, seq = token_seq[t], pos = token_pos[t];
  const int kp = s.kpool, D = s.index_dim, IH = s.index_heads;
  const int n_pools = (pos + 1) / kp;
  const int budget = min(n_pools, s.index_topk / kp);
  for (int i = threadIdx.x; i < IH * D; i += blockDim.x) q[i] = iq[static_cast<long>(t) * ld_iq + i];
  __syncthreads();
  float* sc = scores + static_cast<long>(t) * max_pools;
  std::int32_t* ch = chosen + static_cast<long>(t) * max_pools;
  const float scale = rsqrtf(static_cast<float>(D)), ps = pool_scale(pool);
  const int ik_at = s.lora_kv + s.rope, ig_at = ik_at + D;
  // One warp per pool, its lanes over the key's channels (d = lane + 32 k): the pool's kp rows are
  // read coalesced, each channel's softmax over the pool's tokens weighting the indexer keys, then
  // per head the dot with the query, summed over the lanes. (A thread per pool had walked the
  // channels one after another, kp dependent loads each: 0.5 ms a token at 35 pools.)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int p = warp; p < n_pools; p += warps) {
    float key[kMaxIndexDim / 32];
    for (int k = 0; k < kMaxIndexDim / 32; ++k) {
      const int d = lane + 32 * k;
      key[k] = 0.f;
      if (d >= D) continue;
      float top = -FLT_MAX;
      for (int m = 0; m < kp; ++m) top = fmaxf(top, pool_get(pool_row<T>(pool, seq, p * kp + m), ig_at + d, ps) + ape[m * D + d]);
      float sum = 0.f, acc = 0.f;
      for (int m = 0; m < kp; ++m) {
        const T* r = pool_row<T>(pool, seq, p * kp + m);
        const float e = expf(pool_get(r, ig_at + d, ps) + ape[m * D + d] - top);
        sum += e;
        acc += e * pool_get(r, ik_at + d, ps);
      }
      key[k] = acc / sum;
    }
    float score = 0.f;
    for (int h = 0; h < IH; ++h) {
      float dot = 0.f;
      for (int k = 0; k < kMaxIndexDim / 32; ++k)
        if (lane + 32 * k < D) dot += q[h * D + lane + 32 * k] * key[k];
      dot = warp_sum(dot);
      score += iw[static_cast<long>(t) * IH + h] * fmaxf(0.f, dot * scale);
    }
    if (lane == 0) sc[p] = score;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < n_pools; p += blockDim.x) {
    int rank = 0;
    for (int o = 0; o < n_pools; ++o) rank += sc[o] > sc[p] || (sc[o] == sc[p] && o < p);
    ch[p] = rank < budget;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0;
    for (int p = 0; p < n_pools; ++p)
      if (ch[p])
        for (int m = 0; m < kp && n < max_sel; ++m) sel[static_cast<long>(t) * max_sel + n++] = p * kp + m;
    if (s.select_tail && kp > 1)
      for (int j = (pos + 1) - (pos + 1) % kp; j <= pos && n < max_sel; ++j) sel[static_cast<long>(t) * max_sel + n++] = j;
    sel_n[t] = n;
  }
}

// Block (token, head); dynamic shared memory: the query [lora_kv + rope] and the scores [max_sel].
template <class T>
__global__ void dsa_attention_kernel(DsaShape s, DsaPool pool, int heads, const float* q_lat, const float* q_rope, long ld_q,
                                     long head_stride, const std::int32_t* token_seq, const std::int32_t* sel,
                                     const std::int32_t* sel_n, int max_sel, float scale, float* out_lat) {
  // Dynamic shared memory: the selected rows' addresses [max_sel] (looked up once: the key, its
  // block-table entry and the row were three dependent loads in every iteration of both loops),
  // the query [lora_kv + rope], the scores [max_sel].
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ float scratch[32];
  const int t = blockIdx.x, h = blockIdx.y, seq = token_seq[t], L = s.lora_kv, W = s.lora_kv + s.rope;
  const T** rowp = reinterpret_cast<const T**>(shared_bytes);
  float* q = reinterpret_cast<float*>(shared_bytes + static_cast<std::size_t>(max_sel) * sizeof(const T*));
  float* score = q + W;
  const float* ql = q_lat + (static_cast<long>(t) * heads + h) * L;
  const float* qr = q_rope + static_cast<long>(t) * ld_q + static_cast<long>(h) * head_stride;
  for (int i = threadIdx.x; i < W; i += blockDim.x) q[i] = i < L ? ql[i] : qr[i - L];
  const int n = sel_n[t];
  const std::int32_t* keys = sel + static_cast<long>(t) * max_sel;
  for (int j = threadIdx.x; j < n; j += blockDim.x) rowp[j] = pool_row<T>(pool, seq, keys[j]);
  __syncthreads();
  const float ps = pool_scale(pool);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int j = warp; j < n; j += warps) {
    const T* r = rowp[j];
    float acc = 0.f;
    for (int i = lane; i < W; i += 32) acc += q[i] * pool_get(r, i, ps);
    acc = warp_sum(acc);
    if (lane == 0) score[j] = acc * scale;
  }
  __syncthreads();
  float top = -FLT_MAX;
  for (int j = threadIdx.x; j < n; j += blockDim.x) top = fmaxf(top, score[j]);
  top = block_max(top, scratch);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) sum += (score[j] = expf(score[j] - top));
  sum = block_sum(sum, scratch);
  float* out = out_lat + (static_cast<long>(t) * heads + h) * L;
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    float acc = 0.f;
#pragma unroll 4
    for (int j = 0; j < n; ++j) acc += score[j] * pool_get(rowp[j], i, ps);
    out[i] = n > 0 ? acc / sum : 0.f;
  }
}

// ---- MoE ----------------------------------------------------------------------------------------

__global__ void clamped_silu_and_mul_kernel(const bf16* gate_up, bf16* y, int d, float limit) {
  const bf16* row = gate_up + static_cast<long>(blockIdx.x) * 2 * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float g = fminf(__bfloat162float(row[i]), limit);
    const float u = fminf(fmaxf(__bfloat162float(row[d + i]), -limit), limit);
    y[static_cast<long>(blockIdx.x) * d + i] = __float2bfloat16_rn(g / (1.f + expf(-g)) * u);
  }
}

template <class W>
__device__ __forceinline__ float weight_at(const W* w, long i);
template <>
__device__ __forceinline__ float weight_at<float>(const float* w, long i) { return w[i]; }
template <>
__device__ __forceinline__ float weight_at<bf16>(const bf16* w, long i) { return __bfloat162float(w[i]); }

// Block (row, 8 outputs): one warp per output.
template <class W>
__global__ void linear_f32_kernel(const float* x, long ldx, const std::int32_t* gather, int in, const W* w, long ldw,
                                  const std::int32_t* row_expert, long expert_stride, int out, float* y, long ldy) {
  const int r = blockIdx.x, o = blockIdx.y * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (o >= out) return;
  if (row_expert && row_expert[r] < 0) {  // another tensor-parallel rank's expert: a zero row
    if (lane == 0) y[static_cast<long>(r) * ldy + o] = 0.f;
    return;
  }
  const float* xr = x + static_cast<long>(gather ? gather[r] : r) * ldx;
  const W* wr = w + (row_expert ? static_cast<long>(row_expert[r]) * expert_stride : 0L) + static_cast<long>(o) * ldw;
  float acc = 0.f;
  for (int i = lane; i < in; i += 32) acc += xr[i] * weight_at(wr, i);
  acc = warp_sum(acc);
  if (lane == 0) y[static_cast<long>(r) * ldy + o] = acc;
}

// Both absorptions read kv_b's rows 16 bytes (8 bf16) a lane: lane l holds chunks l, l + 32, ... of a
// row's lora_kv entries (lora_kv a multiple of 8, at most 8 * 32 * kAbsorbChunks). One thread a
// latent channel walking the nope rows (and one warp a value channel reading 2 bytes a lane) had
// been bound by the latency of their loads: 17 MB of kv_b a layer took 0.17 ms (0.2 TB/s).
constexpr int kAbsorbChunks = 4;

__device__ __forceinline__ void bf16x8(const bf16* p, float (&w)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const unsigned v[4] = {u.x, u.y, u.z, u.w};
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[k]));
    w[2 * k] = f.x, w[2 * k + 1] = f.y;
  }
}

// Block (token, head), 8 warps: warp w sums the nope rows w, w + 8, ... of its head's key part into
// its partial row (shared), then each latent channel adds the 8 partials in warp order.
__global__ void absorb_query_kernel(const float* q, long ld_q, long head_stride, int heads, int nope, int vd, int lora_kv,
                                    const bf16* kv_b, float* q_lat) {
  extern __shared__ float part[];  // [warps][lora_kv]
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* qh = q + static_cast<long>(t) * ld_q + static_cast<long>(h) * head_stride;
  const bf16* wk = kv_b + static_cast<long>(h) * (nope + vd) * lora_kv;
  const int chunks = lora_kv / 8;
  float acc[kAbsorbChunks][8] = {};
  for (int n = warp; n < nope; n += warps) {
    const float qn = qh[n];
    for (int j = 0; j < kAbsorbChunks; ++j) {
      const int c = lane + 32 * j;
      if (c >= chunks) break;
      float w[8];
      bf16x8(wk + static_cast<long>(n) * lora_kv + 8 * c, w);
      for (int k = 0; k < 8; ++k) acc[j][k] += qn * w[k];
    }
  }
  for (int j = 0; j < kAbsorbChunks; ++j) {
    const int c = lane + 32 * j;
    if (c >= chunks) break;
    for (int k = 0; k < 8; ++k) part[warp * lora_kv + 8 * c + k] = acc[j][k];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < lora_kv; d += blockDim.x) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += part[w * lora_kv + d];
    q_lat[(static_cast<long>(t) * heads + h) * lora_kv + d] = sum;
  }
}

// Block (token, head); one warp per value channel, the attended latent in shared memory.
__global__ void absorb_values_kernel(const float* lat, int heads, int nope, int vd, int lora_kv, const bf16* kv_b, float* out) {
  extern __shared__ float l[];  // [lora_kv]
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float* src = lat + (static_cast<long>(t) * heads + h) * lora_kv;
  for (int d = threadIdx.x; d < lora_kv; d += blockDim.x) l[d] = src[d];
  __syncthreads();
  const int chunks = lora_kv / 8;
  for (int v = threadIdx.x / 32; v < vd; v += warps) {
    const bf16* wv = kv_b + (static_cast<long>(h) * (nope + vd) + nope + v) * lora_kv;
    float acc = 0.f;
    for (int c = lane; c < chunks; c += 32) {
      float w[8];
      bf16x8(wv + 8 * c, w);
      for (int k = 0; k < 8; ++k) acc += l[8 * c + k] * w[k];
    }
    acc = warp_sum(acc);
    if (lane == 0) out[(static_cast<long>(t) * heads + h) * vd + v] = acc;
  }
}

__global__ void clamped_silu_and_mul_f32_kernel(const float* gate_up, float* y, int d, float limit) {
  const float* row = gate_up + static_cast<long>(blockIdx.x) * 2 * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float g = fminf(row[i], limit);
    const float u = fminf(fmaxf(row[d + i], -limit), limit);
    y[static_cast<long>(blockIdx.x) * d + i] = g / (1.f + expf(-g)) * u;
  }
}

__global__ void moe_combine_f32_kernel(const float* pair_out, const std::int32_t* pair_pos, const float* weight, int top_k, int hidden,
                                       const float* add, float* y) {
  // Block (256 channels, token): a token's channels over many blocks (one block a token had taken
  // 18 us a layer at batch 1 on an H100); the same sums in the same order.
  const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= hidden) return;
  float acc = 0.f;
  for (int k = 0; k < top_k; ++k) {
    const long p = static_cast<long>(t) * top_k + k, row = pair_pos ? pair_pos[p] : p;
    if (row >= 0) acc += weight[p] * pair_out[row * hidden + i];
  }
  y[static_cast<long>(t) * hidden + i] = acc + (add ? add[static_cast<long>(t) * hidden + i] : 0.f);
}

__global__ void moe_local_experts_kernel(std::int32_t* expert, int pairs, int first, int count) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int e = expert[p] - first;
  expert[p] = e >= 0 && e < count ? e : -1;
}

}  // namespace

Status moe_local_experts_cuda(std::int32_t* expert, int pairs, int first, int count, Stream stream) {
  if (pairs == 0) return {};
  moe_local_experts_kernel<<<(pairs + 255) / 256, 256, 0, stream>>>(expert, pairs, first, count);
  return TANDEM_CUDA_LAUNCHED("moe_local_experts_kernel");
}

Status linear_f32_cuda(const float* x, long ldx, const std::int32_t* gather, int rows, int in, const void* w,
                            DType w_type, long ldw, const std::int32_t* row_expert, long expert_stride, int out,
                            float* y, long ldy, Stream stream) {
  if (rows == 0 || out == 0) return {};
  const dim3 grid(rows, (out + 7) / 8);
  if (w_type == DType::bf16)
    linear_f32_kernel<bf16><<<grid, 256, 0, stream>>>(x, ldx, gather, in, static_cast<const bf16*>(w), ldw, row_expert,
                                                      expert_stride, out, y, ldy);
  else if (w_type == DType::f32)
    linear_f32_kernel<float><<<grid, 256, 0, stream>>>(x, ldx, gather, in, static_cast<const float*>(w), ldw, row_expert,
                                                       expert_stride, out, y, ldy);
  else
    return Error{"linear_f32_cuda: weights must be bf16 or fp32"};
  return TANDEM_CUDA_LAUNCHED("linear_f32_kernel");
}

Status absorb_query_cuda(const float* q, long ld_q, long head_stride, int tokens, int heads, int nope, int vd,
                              int lora_kv, const void* kv_b, float* q_lat, Stream stream) {
  if (lora_kv % 8 != 0 || lora_kv > 8 * 32 * kAbsorbChunks)
    return Error{"absorb_query_cuda: kv_lora_rank must be a multiple of 8, at most 1024"};
  if (tokens == 0) return {};
  absorb_query_kernel<<<dim3(tokens, heads), 256, 8 * static_cast<std::size_t>(lora_kv) * sizeof(float), stream>>>(
      q, ld_q, head_stride, heads, nope, vd, lora_kv, static_cast<const bf16*>(kv_b), q_lat);
  return TANDEM_CUDA_LAUNCHED("absorb_query_kernel");
}

Status absorb_values_cuda(const float* lat, int tokens, int heads, int nope, int vd, int lora_kv, const void* kv_b,
                               float* out, Stream stream) {
  if (lora_kv % 8 != 0) return Error{"absorb_values_cuda: kv_lora_rank must be a multiple of 8"};
  if (tokens == 0) return {};
  absorb_values_kernel<<<dim3(tokens, heads), 256, static_cast<std::size_t>(lora_kv) * sizeof(float), stream>>>(
      lat, heads, nope, vd, lora_kv, static_cast<const bf16*>(kv_b), out);
  return TANDEM_CUDA_LAUNCHED("absorb_values_kernel");
}

Status clamped_silu_and_mul_f32_cuda(const float* gate_up, float* y, int rows, int d, float limit, Stream stream) {
  if (rows == 0) return {};
  clamped_silu_and_mul_f32_kernel<<<rows, 256, 0, stream>>>(gate_up, y, d, limit);
  return TANDEM_CUDA_LAUNCHED("clamped_silu_and_mul_f32_kernel");
}

Status moe_combine_f32_cuda(const float* pair_out, const std::int32_t* pair_pos, const float* weight, int tokens, int top_k,
                            int hidden, const float* add, float* y, Stream stream) {
  if (tokens == 0) return {};
  moe_combine_f32_kernel<<<dim3((hidden + 255) / 256, tokens), 256, 0, stream>>>(pair_out, pair_pos, weight, top_k, hidden, add, y);
  return TANDEM_CUDA_LAUNCHED("moe_combine_f32_kernel");
}

Status rms_norm_f32(const float* x, long ldx, int rows, int n, const float* w, float eps, float* y_f32, long ldy,
                         void* y_bf16, long ldb, Stream stream) {
  if (rows == 0) return {};
  rms_norm_f32_kernel<<<rows, 256, 0, stream>>>(x, ldx, n, w, eps, y_f32, ldy, static_cast<bf16*>(y_bf16), ldb);
  return TANDEM_CUDA_LAUNCHED("rms_norm_f32_kernel");
}

Status to_bf16(const float* x, long ldx, int rows, int n, void* y, long ldy, Stream stream) {
  if (rows == 0) return {};
  to_bf16_kernel<<<rows, 256, 0, stream>>>(x, ldx, n, static_cast<bf16*>(y), ldy);
  return TANDEM_CUDA_LAUNCHED("to_bf16_kernel");
}

Status to_bf16_split(const float* x, long ldx, int rows, int n, void* hi, void* lo, long ld, Stream stream) {
  if (rows == 0) return {};
  to_bf16_split_kernel<<<rows, 256, 0, stream>>>(x, ldx, n, static_cast<bf16*>(hi), static_cast<bf16*>(lo), ld);
  return TANDEM_CUDA_LAUNCHED("to_bf16_split_kernel");
}

Status to_f32(const void* x, long ldx, int rows, int n, float* y, long ldy, Stream stream) {
  if (rows == 0) return {};
  to_f32_kernel<<<rows, 256, 0, stream>>>(static_cast<const bf16*>(x), ldx, n, y, ldy);
  return TANDEM_CUDA_LAUNCHED("to_f32_kernel");
}

Status hc_embed_cuda(const void* table, const std::int32_t* ids, int tokens, int hc, int hidden, float* streams,
                          Stream stream) {
  if (tokens == 0) return {};
  hc_embed_kernel<<<tokens, 256, 0, stream>>>(static_cast<const bf16*>(table), ids, hc, hidden, streams);
  return TANDEM_CUDA_LAUNCHED("hc_embed_kernel");
}

Status hc_mean_cuda(const float* streams, int tokens, int hc, int hidden, float* out, Stream stream) {
  if (tokens == 0) return {};
  hc_mean_kernel<<<tokens, 256, 0, stream>>>(streams, hc, hidden, out);
  return TANDEM_CUDA_LAUNCHED("hc_mean_kernel");
}

long hc_collapse_scratch_floats(const HcShape& s, int tokens) {
  const long n = static_cast<long>(s.hc) * s.hidden, chunks = (n + kHcChunk - 1) / kHcChunk;
  return static_cast<long>(tokens) * chunks * ((2 + s.hc) * s.hc + 1);
}

Status hc_collapse_cuda(const HcShape& s, const float* streams, int tokens, const float* fn, const float* base,
                             const float* scale, float* collapsed, float* post, float* comb, float* scratch, Stream stream) {
  if (s.hc < 1 || s.hc > kMaxHc) return Error{"hc_collapse_cuda: hc_mult must be in [1, 8]"};
  if (tokens == 0) return {};
  const int chunks = static_cast<int>((static_cast<long>(s.hc) * s.hidden + kHcChunk - 1) / kHcChunk);
  hc_mix_partial_kernel<<<dim3(chunks, tokens), 256, 0, stream>>>(s, streams, fn, scratch);
  if (auto e = TANDEM_CUDA_LAUNCHED("hc_mix_partial_kernel"); !e) return e;
  hc_finish_kernel<<<tokens, 256, 0, stream>>>(s, streams, scratch, chunks, base, scale, collapsed, post, comb);
  return TANDEM_CUDA_LAUNCHED("hc_finish_kernel");
}

Status hc_expand_cuda(const HcShape& s, float* streams, int tokens, const float* y, const float* post,
                           const float* comb, Stream stream) {
  if (s.hc < 1 || s.hc > kMaxHc) return Error{"hc_expand_cuda: hc_mult must be in [1, 8]"};
  if (tokens == 0) return {};
  const dim3 grid((s.hidden + 255) / 256, tokens);
  hc_expand_kernel<<<grid, 256, 0, stream>>>(s, streams, y, post, comb);
  return TANDEM_CUDA_LAUNCHED("hc_expand_kernel");
}

Status kda_recurrent_cuda(const KdaShape& s, const KdaWeights& w, const KdaIo& io, int sequences,
                               const std::int32_t* seq_begin, const std::int32_t* slot, const std::int32_t* reset,
                               float* state, long state_stride, long layer_at, Stream stream) {
  if (s.head_dim < 1 || s.head_dim > 1024) return Error{"kda_recurrent_cuda: linear_head_dim must be in [1, 1024]"};
  if (s.conv_kernel < 1) return Error{"kda_recurrent_cuda: linear_conv_kernel_dim must be at least 1"};
  if (sequences == 0) return {};
  const dim3 grid(sequences, s.heads);
  // Up to 128 channels a head, the state in registers (4 threads a column, R rows each; at 256 the
  // 64 rows a thread spill: the kernel above).
  const auto regs = [&](auto kernel) {
    kernel<<<grid, 4 * ((s.head_dim + 7) / 8 * 8), 4 * s.head_dim * sizeof(float), stream>>>(s, w, io, seq_begin, slot, reset, state,
                                                                                              state_stride, layer_at);
    return TANDEM_CUDA_LAUNCHED("kda_recurrent_regs_kernel");
  };
  if (s.state_in_registers && s.head_dim <= 32) return regs(kda_recurrent_regs_kernel<8>);
  if (s.state_in_registers && s.head_dim <= 128) return regs(kda_recurrent_regs_kernel<32>);
  const int threads = (s.head_dim + 31) / 32 * 32;
  kda_recurrent_kernel<<<grid, threads, 3 * s.head_dim * sizeof(float), stream>>>(s, w, io, seq_begin, slot, reset, state,
                                                                                  state_stride, layer_at);
  return TANDEM_CUDA_LAUNCHED("kda_recurrent_kernel");
}

Status dsa_prepare_cuda(const DsaShape& s, const DsaNorms& n, const float* proj, long ld_proj, int tokens,
                             const std::int32_t* token_seq, const std::int32_t* token_pos, const DsaPool& pool,
                             float* qr, float* iw, Stream stream, float* amax) {
  if (tokens == 0) return {};
  TANDEM_DSA_POOL_DISPATCH(pool, (dsa_prepare_kernel<T><<<tokens, 128, 0, stream>>>(s, n, proj, ld_proj, token_seq,
                                                                                      token_pos, pool, qr, iw, amax)));
  return TANDEM_CUDA_LAUNCHED("dsa_prepare_kernel");
}

__global__ void dsa_scale_from_amax_kernel(const float* amax, float target, float* scale) {
  const float a = *amax;
  *scale = a > 0.f && isfinite(a) ? a / target : 1.f;
}

Status dsa_scale_from_amax_cuda(const float* amax, float target, float* scale, Stream stream) {
  dsa_scale_from_amax_kernel<<<1, 1, 0, stream>>>(amax, target, scale);
  return TANDEM_CUDA_LAUNCHED("dsa_scale_from_amax_kernel");
}

Status dsa_select_cuda(const DsaShape& s, const DsaPool& pool, const float* iq, long ld_iq, const float* iw,
                            const float* kpool_ape, int tokens, const std::int32_t* token_seq,
                            const std::int32_t* token_pos, float* scores, std::int32_t* chosen, int max_pools,
                            std::int32_t* sel, std::int32_t* sel_n, int max_sel, Stream stream) {
  if (s.index_heads < 1 || s.index_heads > kMaxIndexHeads) return Error{"dsa_select_cuda: index_n_heads must be in [1, 64]"};
  if (s.index_dim < 1 || s.index_dim > kMaxIndexDim) return Error{"dsa_select_cuda: index_head_dim must be in [1, 256]"};
  if (s.kpool < 1) return Error{"dsa_select_cuda: index_kpool must be at least 1"};
  if (max_sel < s.index_topk + s.kpool) return Error{"dsa_select_cuda: max_sel below index_topk + index_kpool"};
  if (tokens == 0) return {};
  (void)max_pools;
  const std::size_t shared = static_cast<std::size_t>(s.index_heads) * static_cast<std::size_t>(s.index_dim) * sizeof(float);
  cudaError_t attr = cudaSuccess;
  TANDEM_DSA_POOL_DISPATCH(pool, {
    attr = allow_shared(dsa_select_kernel<T>, shared);
    if (attr == cudaSuccess)
      dsa_select_kernel<T><<<tokens, 256, shared, stream>>>(s, pool, iq, ld_iq, iw, kpool_ape, token_seq, token_pos, scores,
                                                            chosen, max_pools, sel, sel_n, max_sel);
  });
  if (attr != cudaSuccess) return TANDEM_CUDA_LAUNCHED("dsa_select_kernel shared memory");
  return TANDEM_CUDA_LAUNCHED("dsa_select_kernel");
}

Status dsa_attention_cuda(const DsaShape& s, const DsaPool& pool, int heads, const float* q_lat, const float* q_rope,
                               long ld_q, long head_stride, int tokens, const std::int32_t* token_seq,
                               const std::int32_t* sel, const std::int32_t* sel_n, int max_sel, float scale,
                               float* out_lat, Stream stream) {
  if (tokens == 0) return {};
  const std::size_t shared = static_cast<std::size_t>(s.lora_kv + s.rope + max_sel) * sizeof(float) +
                             static_cast<std::size_t>(max_sel) * sizeof(void*);
  const dim3 grid(tokens, heads);
  cudaError_t attr = cudaSuccess;
  TANDEM_DSA_POOL_DISPATCH(pool, {
    attr = allow_shared(dsa_attention_kernel<T>, shared);
    if (attr == cudaSuccess)
      dsa_attention_kernel<T><<<grid, 128, shared, stream>>>(s, pool, heads, q_lat, q_rope, ld_q, head_stride, token_seq, sel,
                                                             sel_n, max_sel, scale, out_lat);
  });
  if (attr != cudaSuccess) return TANDEM_CUDA_LAUNCHED("dsa_attention_kernel shared memory");
  return TANDEM_CUDA_LAUNCHED("dsa_attention_kernel");
}

Status clamped_silu_and_mul_cuda(const void* gate_up, void* y, int rows, int d, float limit, Stream stream) {
  if (rows == 0) return {};
  clamped_silu_and_mul_kernel<<<rows, 256, 0, stream>>>(static_cast<const bf16*>(gate_up), static_cast<bf16*>(y), d, limit);
  return TANDEM_CUDA_LAUNCHED("clamped_silu_and_mul_kernel");
}

}  // namespace tandem::kernels
