// The chunked KDA prefill (kda_chunk_cuda, glm5_next.hpp): the chunkwise form of the gated delta rule
// that kernels/cpu/kda_chunk.cpp spells out, on the device. Three kernels:
//   inputs  per (token, head): causal conv + SiLU (reading earlier tokens' u directly, the state's
//           conv history before the sequence's first token), q and k l2-normalised, the log-decay
//           g, into scratch; parallel over tokens, where the token kernel walks them;
//   chunk   per (sequence, head, slice of value columns): chunk by chunk, the cumulative decays G,
//           the chunk x chunk products M (key-key) and P (query-key) with every exponent G_t - G_s
//           <= 0, the state's contribution, the forward substitution for U, the outputs and the
//           state carried to the next chunk in fp32. Value columns are independent in the delta
//           rule (M and P do not depend on them), so slices of 32 columns run in separate blocks:
//           a long prompt of one sequence still fills the GPU (64 heads of 128 -> 256 blocks);
//   norm    per (token, head): the gated RMSNorm of the outputs.
// First version: fp32 on the CUDA cores (no tensor cores yet), the operands in shared memory.
#include <cuda_runtime.h>

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

// Shared memory of the chunk kernel, in floats.
struct ChunkSmem {
  int ld, C, q, k, g, m, p, w, u, st, glast, beta, total;
  __host__ __device__ ChunkSmem(int hd, int chunk) : ld(hd + 1), C(chunk) {
    q = 0;
    k = q + C * ld;
    g = k + C * ld;                 // G, later k_s e^{G_last - G_s}
    m = g + C * ld;                 // M [C][C + 1]
    p = m + C * (C + 1);            // P
    w = p + C * (C + 1);            // v, then v - S_0^T (e^G k) [C][kSlice + 1]
    u = w + C * (kSlice + 1);       // U
    st = u + C * (kSlice + 1);      // the state's slice [hd][kSlice]
    glast = st + hd * kSlice;       // G of the chunk's last token [hd]
    beta = glast + hd;              // [C]
    total = beta + C;
  }
};

// long-function: one block walks one sequence's chunks for one head and value slice; the steps
// share the shared-memory operands and are numbered as in the header comment of kda_chunk.cpp.
__global__ void __launch_bounds__(kThreads) kda_chunk_kernel(KdaShape s, KdaIo io, int chunk, const std::int32_t* seq_begin,
                                                             const std::int32_t* slot, const std::int32_t* reset, float* state,
                                                             long state_stride, long layer_at, const float* mixed,
                                                             const float* glog) {
  extern __shared__ float sm[];
  const int seq = blockIdx.x, h = blockIdx.y, hd = s.head_dim, K = s.conv_kernel;
  const int qk = s.heads * hd, channels = 3 * qk;
  const int j0 = blockIdx.z * kSlice, nv = min(kSlice, hd - j0);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = kThreads / 32;
  const ChunkSmem L(hd, chunk);
  const int ld = L.ld, lc = chunk + 1, lv = kSlice + 1;
  float *Q = sm + L.q, *Kk = sm + L.k, *G = sm + L.g, *M = sm + L.m, *P = sm + L.p, *W = sm + L.w, *U = sm + L.u;
  float *St = sm + L.st, *Glast = sm + L.glast, *Beta = sm + L.beta;
  const int begin = seq_begin[seq], end = seq_begin[seq + 1];
  float* base = state + static_cast<long>(slot[seq]) * state_stride + layer_at;
  float* S = base + static_cast<long>(K - 1) * channels + static_cast<long>(h) * hd * hd;  // [hd][hd]
  const bool zero = reset[seq] != 0;
  for (int x = tid; x < hd * kSlice; x += kThreads) {
    const int i = x / kSlice, j = x % kSlice;
    St[x] = zero || j >= nv ? 0.f : S[static_cast<long>(i) * hd + j0 + j];
  }
  const float* qrow = mixed + h * hd;
  const float* krow = mixed + qk + h * hd;
  const float* vrow = mixed + 2 * qk + h * hd + j0;
  for (int t0 = begin; t0 < end; t0 += chunk) {
    const int n = min(chunk, end - t0);
    // 1. The chunk's q, k, v slice, cumulative decays and beta.
    for (int x = tid; x < n * hd; x += kThreads) {
      const int t = x / hd, i = x % hd;
      Q[t * ld + i] = qrow[static_cast<long>(t0 + t) * channels + i];
      Kk[t * ld + i] = krow[static_cast<long>(t0 + t) * channels + i];
    }
    for (int x = tid; x < n * kSlice; x += kThreads) {
      const int t = x / kSlice, j = x % kSlice;
      W[t * lv + j] = j < nv ? vrow[static_cast<long>(t0 + t) * channels + j] : 0.f;
    }
    for (int i = tid; i < hd; i += kThreads) {
      double acc = 0;  // in fp64: G_t - G_s cancels, so G's rounding is what the decays' error is
      for (int t = 0; t < n; ++t) G[t * ld + i] = static_cast<float>(acc += glog[static_cast<long>(t0 + t) * qk + h * hd + i]);
      Glast[i] = static_cast<float>(acc);
    }
    for (int t = tid; t < n; t += kThreads) Beta[t] = sigmoid_(io.beta_raw[static_cast<long>(t0 + t) * io.ld_beta + h]);
    __syncthreads();
    // 2. M_ts = sum_i k_ti k_si e^{G_ti - G_si} (s < t), P_ts = sum_i q_ti k_si e^{G_ti - G_si} (s <= t).
    // The lower triangle only, pair x = t (t + 1) / 2 + r; (rows past t are never read).
    for (int x = tid; x < n * (n + 1) / 2; x += kThreads) {
      int t = static_cast<int>((sqrtf(8.f * static_cast<float>(x) + 1.f) - 1.f) * 0.5f);
      while (t * (t + 1) / 2 > x) --t;  // the float root may land one off either way
      while ((t + 1) * (t + 2) / 2 <= x) ++t;
      const int r = x - t * (t + 1) / 2;
      float mm = 0.f, pp = 0.f;
      for (int i = 0; i < hd; ++i) {
        const float e = expf(G[t * ld + i] - G[r * ld + i]) * Kk[r * ld + i];
        mm += Kk[t * ld + i] * e;
        pp += Q[t * ld + i] * e;
      }
      M[t * lc + r] = mm;  // M's diagonal is not used (s < t)
      P[t * lc + r] = pp;
    }
    __syncthreads();
    // 3. In place: q e^{G_t}, k e^{G_t}, and (into G) k e^{G_last - G_t}: every exponent <= 0.
    for (int x = tid; x < n * hd; x += kThreads) {
      const int t = x / hd, i = x % hd;
      const float g = G[t * ld + i], e = expf(g), kv = Kk[t * ld + i];
      Q[t * ld + i] *= e;
      Kk[t * ld + i] = kv * e;
      G[t * ld + i] = kv * expf(Glast[i] - g);
    }
    __syncthreads();
    // 4. W = v - S_0^T (e^G k) and the outputs' state part S_0^T (e^G q); thread (t, lane).
    float o[kMaxChunkRows];
#pragma unroll
    for (int r = 0; r < kMaxChunkRows; ++r) {
      const int t = warp + r * warps;
      o[r] = 0.f;
      if (t >= n) continue;
      float wk = 0.f, wq = 0.f;
      for (int i = 0; i < hd; ++i) {
        const float sv = St[i * kSlice + lane];
        wk += Kk[t * ld + i] * sv;
        wq += Q[t * ld + i] * sv;
      }
      W[t * lv + lane] -= wk;
      o[r] = wq;
    }
    __syncthreads();
    // 5. Forward substitution U_t = beta_t (W_t - sum_{s<t} M_ts U_s): warp per value column, its
    // lanes splitting the sum.
    for (int j = warp; j < nv; j += warps) {
      for (int t = 0; t < n; ++t) {
        float acc = 0.f;
        for (int r = lane; r < t; r += 32) acc += M[t * lc + r] * U[r * lv + j];
        acc = cuda::warp_sum(acc);
        if (lane == 0) U[t * lv + j] = Beta[t] * (W[t * lv + j] - acc);
        __syncwarp();
      }
    }
    __syncthreads();
    // 6. o_t += sum_{s<=t} P_ts U_s; raw outputs (the norm kernel follows).
#pragma unroll
    for (int r = 0; r < kMaxChunkRows; ++r) {
      const int t = warp + r * warps;
      if (t >= n || lane >= nv) continue;
      float acc = o[r];
      for (int x = 0; x <= t; ++x) acc += P[t * lc + x] * U[x * lv + lane];
      io.o[static_cast<long>(t0 + t) * io.ld_o + h * hd + j0 + lane] = acc;
    }
    // 7. S = diag(e^{G_last}) S_0 + sum_s (k_s e^{G_last - G_s}) U_s^T.
    for (int x = tid; x < hd * kSlice; x += kThreads) {
      const int i = x / kSlice, j = x % kSlice;
      if (j >= nv) continue;  // past the head's last column: stays 0 (U has no such column)
      float acc = expf(Glast[i]) * St[x];
      for (int t = 0; t < n; ++t) acc += G[t * ld + i] * U[t * lv + j];
      St[x] = acc;
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
    const int ch = (c / hd) * qk + h * hd + c % hd;
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
  if (s.head_dim < 1 || s.head_dim > 1024) return Error{"kda_chunk_cuda: linear_head_dim must be in [1, 1024]"};
  if (s.conv_kernel < 1) return Error{"kda_chunk_cuda: linear_conv_kernel_dim must be at least 1"};
  if (chunk < 1 || chunk > kKdaMaxChunk)
    return Error{"kda_chunk_cuda: chunk must be in [1, " + std::to_string(kKdaMaxChunk) + "], got " + std::to_string(chunk)};
  if (sequences == 0) return {};
  int device = 0, optin = 0;
  if (auto e = TANDEM_CUDA_STATUS(cudaGetDevice(&device), "kda_chunk_cuda"); !e) return e;
  if (auto e = TANDEM_CUDA_STATUS(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "kda_chunk_cuda"); !e)
    return e;
  // Shorter chunks where the block's shared memory does not hold the requested one (head_dim 128
  // at chunk 64 takes 166 KB: sm_90 gives 227 KB, sm_80 and consumer Blackwell less).
  const auto smem = [&](int c) { return static_cast<long>(ChunkSmem(s.head_dim, c).total) * 4; };
  while (chunk > 1 && smem(chunk) > optin) --chunk;
  const long bytes = smem(chunk);
  if (bytes > optin)
    return Error{"kda_chunk_cuda: head_dim " + std::to_string(s.head_dim) + " needs " + std::to_string(bytes) +
                 " bytes of shared memory even at chunk 1; the device gives a block " + std::to_string(optin)};
  if (auto e = TANDEM_CUDA_STATUS(cudaFuncSetAttribute(kda_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(bytes)),
                                  "kda_chunk_cuda");
      !e)
    return e;
  const int threads = (s.head_dim + 31) / 32 * 32;
  float* mixed = scratch;
  float* glog = scratch + static_cast<long>(tokens) * 3 * s.heads * s.head_dim;
  if (tokens > 0) {
    kda_chunk_inputs_kernel<<<dim3(tokens, s.heads), threads, 0, stream>>>(s, w, io, sequences, seq_begin, slot, reset, state,
                                                                          state_stride, layer_at, mixed, glog);
    if (auto e = TANDEM_CUDA_LAUNCHED("kda_chunk_inputs_kernel"); !e) return e;
  }
  const dim3 grid(sequences, s.heads, (s.head_dim + kSlice - 1) / kSlice);
  kda_chunk_kernel<<<grid, kThreads, bytes, stream>>>(s, io, chunk, seq_begin, slot, reset, state, state_stride, layer_at, mixed,
                                                      glog);
  if (auto e = TANDEM_CUDA_LAUNCHED("kda_chunk_kernel"); !e) return e;
  if (tokens == 0) return {};
  kda_chunk_norm_kernel<<<dim3(tokens, s.heads), threads, 0, stream>>>(s, w, io);
  return TANDEM_CUDA_LAUNCHED("kda_chunk_norm_kernel");
}

}  // namespace tandem::kernels
