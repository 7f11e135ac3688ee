// Sampling, one block of 1024 threads per row of logits.
//
// Greedy is a block-wide argmax (first maximum). Otherwise the kept set is built in place in
// keep[]: top-k and top-p each find their cut as a 32-bit order key (an fp32 logit mapped so that
// unsigned order is float order) by fixing one bit at a time, largest key first, with a block-wide
// count (top-k) or probability mass (top-p) of the entries at or above the trial key; entries tied
// at the cut are taken lowest id first until the count or mass is reached, as the CPU's sorted
// order does. Sums are fp64. The draw walks the kept tokens in id order: thread t owns a
// contiguous chunk, an exclusive scan gives each chunk's starting mass.
#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/kernels/launch.hpp"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 1024;

struct Scratch {
  double d[32];
  float f[32];
  int i[32];
  int pick;
};

__device__ __forceinline__ std::uint32_t order_key(float x) {
  const std::uint32_t u = __float_as_uint(x == 0.f ? 0.f : x);  // -0 and +0 are one value, as for ==
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(std::uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Exclusive prefix sum over the block in thread order.
template <class T>
__device__ T block_exclusive_scan(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T incl = v;
  for (int o = 1; o < 32; o *= 2) {
    const T up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  T before = 0;
  for (int w = 0; w < warp; ++w) before += scratch[w];
  return before + incl - v;
}

// First index of the largest value (torch.argmax on finite logits).
__device__ int block_argmax(const float* l, int V, Scratch& s) {
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (l[i] > bv || bi == 0x7fffffff) bv = l[i], bi = i;  // strided ascending: this thread's first max
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.f[threadIdx.x / 32] = bv, s.i[threadIdx.x / 32] = bi;
  __syncthreads();
  if (threadIdx.x < 32) {
    bv = s.f[threadIdx.x], bi = s.i[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (threadIdx.x == 0) s.pick = bi;
  }
  __syncthreads();
  return s.pick;
}

// Keeps, among the kept entries, those whose key is above `cut` and the first `ties` (in id order)
// of those at `cut`; drops the rest.
__device__ void keep_through(const float* l, std::uint8_t* keep, int V, std::uint32_t cut, long ties, Scratch& s) {
  const int chunk = (V + kThreads - 1) / kThreads;
  const int begin = min(V, static_cast<int>(threadIdx.x) * chunk), end = min(V, begin + chunk);
  __syncthreads();  // keep[] was last written in the strided pattern
  int mine = 0;
  for (int i = begin; i < end; ++i) mine += keep[i] && order_key(l[i]) == cut;
  long rank = block_exclusive_scan(mine, s.i);
  for (int i = begin; i < end; ++i) {
    if (!keep[i]) continue;
    const std::uint32_t k = order_key(l[i]);
    if (k == cut) keep[i] = rank++ < ties;
    else keep[i] = k > cut;
  }
  __syncthreads();
}

// long-function: a row's passes (log-softmax, temperature, top-k/p, min-p, draw) share a block's Scratch and barriers.
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int V, const SamplingParams* params, const double* uniform,
                              Sampled* out, std::uint8_t* keep_all) {
  __shared__ Scratch s;
  const float* l = logits + static_cast<long>(blockIdx.x) * V;
  std::uint8_t* keep = keep_all + static_cast<long>(blockIdx.x) * V;
  const SamplingParams p = params[blockIdx.x];

  // Raw log-softmax terms for the reported logprob.
  float raw_max = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) raw_max = fmaxf(raw_max, l[i]);
  raw_max = cuda::block_max(raw_max, s.f);
  double raw_sum = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) raw_sum += exp(static_cast<double>(l[i]) - raw_max);
  raw_sum = cuda::block_sum(raw_sum, s.d);
  auto logprob = [&](int tok) {
    return static_cast<float>(static_cast<double>(l[tok]) - raw_max - log(raw_sum));
  };

  if (p.temperature == 0.f) {
    const int best = block_argmax(l, V, s);
    for (int i = threadIdx.x; i < V; i += kThreads) keep[i] = i == best;
    if (threadIdx.x == 0) out[blockIdx.x] = {best, logprob(best)};
    return;
  }

  for (int i = threadIdx.x; i < V; i += kThreads) keep[i] = 1;
  if (p.top_k > 0 && p.top_k < V) {
    std::uint32_t cut = 0;  // the key of the k-th largest logit
    for (int bit = 31; bit >= 0; --bit) {
      const std::uint32_t trial = cut | (1u << bit);
      int n = 0;
      for (int i = threadIdx.x; i < V; i += kThreads) n += order_key(l[i]) >= trial;
      if (cuda::block_sum(n, s.i) >= p.top_k) cut = trial;
    }
    int above = 0;
    for (int i = threadIdx.x; i < V; i += kThreads) above += order_key(l[i]) > cut;
    above = cuda::block_sum(above, s.i);
    keep_through(l, keep, V, cut, p.top_k - above, s);
  }

  // Softmax of logits / temperature over the kept entries.
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  float kept_max = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (keep[i]) kept_max = fmaxf(kept_max, l[i]);
  const double mx = static_cast<double>(cuda::block_max(kept_max, s.f)) * inv_t;
  double sum = 0;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (keep[i]) sum += exp(static_cast<double>(l[i]) * inv_t - mx);
  sum = cuda::block_sum(sum, s.d);
  auto prob = [&](float logit) { return exp(static_cast<double>(logit) * inv_t - mx) / sum; };

  if (p.top_p < 1.f) {
    const double top_p = p.top_p;
    auto mass_from = [&](std::uint32_t key) {  // kept mass at or above key
      double m = 0;
      for (int i = threadIdx.x; i < V; i += kThreads)
        if (keep[i] && order_key(l[i]) >= key) m += prob(l[i]);
      return cuda::block_sum(m, s.d);
    };
    std::uint32_t cut = 0;  // the largest key whose mass at or above reaches top_p
    for (int bit = 31; bit >= 0; --bit) {
      const std::uint32_t trial = cut | (1u << bit);
      if (mass_from(trial) >= top_p) cut = trial;
    }
    long ties = 1L << 40;  // no key reached top_p (rounding): keep all
    if (mass_from(cut) >= top_p) {
      double m = cut == 0xffffffffu ? 0.0 : mass_from(cut + 1);
      const double tie = prob(key_value(cut));
      for (ties = 0; m < top_p && ties < V; ++ties) m += tie;  // tied entries, lowest id first, until top_p
    }
    keep_through(l, keep, V, cut, ties, s);
  }

  // min-p against the most likely survivor (probability 1/sum); exp underflow drops a token too.
  const double floor = static_cast<double>(p.min_p) * (1.0 / sum);
  double total = 0;
  for (int i = threadIdx.x; i < V; i += kThreads)
    if (keep[i]) {
      const double q = prob(l[i]);
      if (q == 0.0 || q < floor) keep[i] = 0;
      else total += q;
    }
  total = cuda::block_sum(total, s.d);  // (its barriers also publish keep[])

  // Draw: the first kept token, in id order, whose running mass passes u * total.
  const double target = uniform[blockIdx.x] * total;
  const int chunk = (V + kThreads - 1) / kThreads;
  const int begin = min(V, static_cast<int>(threadIdx.x) * chunk), end = min(V, begin + chunk);
  double mine = 0;
  int last = -1;
  for (int i = begin; i < end; ++i)
    if (keep[i]) mine += prob(l[i]), last = i;
  double acc = block_exclusive_scan(mine, s.d);
  if (threadIdx.x == 0) s.pick = 0x7fffffff;
  __syncthreads();
  if (acc <= target && target < acc + mine)
    for (int i = begin; i < end; ++i)
      if (keep[i] && (acc += prob(l[i])) > target) {
        atomicMin(&s.pick, i);
        break;
      }
  int last_kept = last;  // fallback when rounding leaves target at or past the total
  for (int o = 16; o > 0; o /= 2) last_kept = max(last_kept, __shfl_xor_sync(0xffffffffu, last_kept, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) s.i[threadIdx.x / 32] = last_kept;
  __syncthreads();
  if (threadIdx.x == 0) {
    int tok = s.pick;
    if (tok == 0x7fffffff)
      for (int w = 0; w < kThreads / 32; ++w) tok = w == 0 ? s.i[0] : max(tok, s.i[w]);
    out[blockIdx.x] = {tok, logprob(tok)};
  }
}

// Greedy without the logprob: blocks share a row; each warp keeps its best (value, first index) as
// one 64-bit key (order key of the value above, the index's complement below, so the larger key is
// the larger value, then the lower index) and folds it into keys[row] with one atomicMax.
__global__ void argmax_kernel(const float* logits, int V, unsigned long long* keys) {
  const float* l = logits + static_cast<long>(blockIdx.y) * V;
  unsigned long long best = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < V; i += gridDim.x * blockDim.x) {
    const unsigned long long k = (static_cast<unsigned long long>(order_key(l[i])) << 32) | (0xffffffffu - static_cast<unsigned>(i));
    best = k > best ? k : best;
  }
  for (int o = 16; o > 0; o /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  if (threadIdx.x % 32 == 0) atomicMax(keys + blockIdx.y, best);
}

// A row small enough for one block (the grid above would give it one): the block's warps fold their
// keys in shared memory and one thread stores the row's key, so the keys need no clearing first
// (a launch less per step) and the kernel may start behind the logits' product (programmatic launch).
__global__ void argmax_one_block_kernel(const float* logits, int V, unsigned long long* keys) {
  cuda::pdl_begin();
  __shared__ unsigned long long part[32];
  const float* l = logits + static_cast<long>(blockIdx.x) * V;
  unsigned long long best = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const unsigned long long k = (static_cast<unsigned long long>(order_key(l[i])) << 32) | (0xffffffffu - static_cast<unsigned>(i));
    best = k > best ? k : best;
  }
  for (int o = 16; o > 0; o /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) best = part[w] > best ? part[w] : best;
  keys[blockIdx.x] = best;
}

}  // namespace

Status argmax_rows_cuda(const float* logits, int rows, int vocab, unsigned long long* keys, Stream stream) {
  if (rows < 0 || vocab <= 0) return Error{"argmax_rows: rows must be >= 0 and vocab > 0"};
  if (rows == 0) return {};
  const int threads = 256, per_thread = 16;
  const int blocks = std::min(128, (vocab + threads * per_thread - 1) / (threads * per_thread));
  if (blocks == 1)
    return TANDEM_CUDA_STATUS(cuda::launch_pdl(argmax_one_block_kernel, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream,
                                               logits, vocab, keys),
                              "launch argmax_one_block_kernel");
  if (auto e = TANDEM_CUDA_STATUS(cudaMemsetAsync(keys, 0, sizeof(unsigned long long) * static_cast<size_t>(rows), stream),
                              "argmax_rows: clearing the keys");
      !e)
    return e;
  argmax_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(rows)), threads, 0, stream>>>(logits, vocab, keys);
  return TANDEM_CUDA_LAUNCHED("argmax_kernel");
}

Status sample_cuda(const float* logits, int rows, int vocab, const SamplingParams* params, const double* uniform,
                        Sampled* out, std::uint8_t* keep, Stream stream) {
  if (rows < 0 || vocab <= 0) return Error{"sample: rows must be >= 0 and vocab > 0"};
  if (rows == 0) return {};
  sample_kernel<<<rows, kThreads, 0, stream>>>(logits, vocab, params, uniform, out, keep);
  return TANDEM_CUDA_LAUNCHED("sample_kernel");
}

}  // namespace tandem::kernels
