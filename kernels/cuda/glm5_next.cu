// glm5_next's CUDA kernels (tandem/kernels/glm5_next.hpp) but the DSA attention's (glm5_next_dsa.cu):
// glue, hyper-connections, the KDA recurrence, the fp32-input products and the MoE's. fp32
// throughout, written to follow the CPU reference line by line; the hyper-connection collapse and
// the MoE combine spread one token over many blocks, so that a one-token step is not bound to one SM.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common.cuh"
#include "tandem/kernels/glm5_next.hpp"

namespace tandem::kernels {
namespace {

using cuda::bf16;
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
    // The row and column of each entry this lane holds (an entry past the last: the last one's, unused).
    int row[2], col[2];
    for (int q = 0; q < 2; ++q) {
      const int e = lane + 32 * q;
      row[q] = min(e, hh - 1) / hc, col[q] = min(e, hh - 1) % hc;
      v[q] = e < hh ? mix(2 * hc + e) * scale[2] + base[2 * hc + e] : 0.0;
    }
    // Row i's softmax: the row's max and its sum over its entries in index order.
    double top[2] = {-1e300, -1e300}, sum[2] = {0, 0};
    for (int k = 0; k < hc; ++k)
      for (int q = 0; q < 2; ++q) top[q] = fmax(top[q], at(row[q] * hc + k));
    for (int q = 0; q < 2; ++q) v[q] = exp(v[q] - top[q]);
    for (int k = 0; k < hc; ++k)
      for (int q = 0; q < 2; ++q) sum[q] += at(row[q] * hc + k);
    for (int q = 0; q < 2; ++q) v[q] = v[q] / sum[q] + eps;
    for (int it = 0; it < (s.sinkhorn_iters > 1 ? s.sinkhorn_iters : 1); ++it) {
      for (int pass = it > 0 ? 0 : 1; pass < 2; ++pass) {  // 0: rows (from the second iteration), 1: columns
        double total[2] = {0, 0};
        for (int k = 0; k < hc; ++k)
          for (int q = 0; q < 2; ++q) total[q] += at(pass == 0 ? row[q] * hc + k : k * hc + col[q]);
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

Status clamped_silu_and_mul_cuda(const void* gate_up, void* y, int rows, int d, float limit, Stream stream) {
  if (rows == 0) return {};
  clamped_silu_and_mul_kernel<<<rows, 256, 0, stream>>>(static_cast<const bf16*>(gate_up), static_cast<bf16*>(y), d, limit);
  return TANDEM_CUDA_LAUNCHED("clamped_silu_and_mul_kernel");
}

}  // namespace tandem::kernels
