// KDA linear attention of glm5_next (transformers' Glm5NextTextLinearAttention), token by token
// (transformers' recurrent form; its chunked prefill computes the same recurrence in blocks):
//   u      = [q_proj x, k_proj x, v_proj x]
//   q,k,v  = split(silu(causal depthwise conv over the last `kernel` u's))
//   q, k   = per head l2-normalised (x / sqrt(|x|^2 + 1e-6)); q *= 1/sqrt(head_dim)
//   g      = f_b(f_a x) + dt_bias (one per key channel); log-decay
//            lower_bound * sigmoid(exp(A_log[h]) g)    with linear_lower_bound,
//            -exp(A_log[h]) softplus(g)                without
//   beta   = sigmoid(b_proj x)                         (one per head)
//   S     <- diag(exp(g)) S;   S += k (beta (v - S^T k))^T;   o = S^T q      (S: [key dim x value dim] per head)
//   out    = o_proj(rmsnorm(o) * o_norm * sigmoid(g_b(g_a x)))              (per head, rms_norm_eps)
// The state (per layer) is the conv's last kernel-1 inputs u, oldest first, then S of every head.
// The projections are here; the recurrence per token is kernels::kda_token_cpu (the CUDA kernel's reference).
#include "glm5_next_parts.hpp"
#include "tandem/kernels/glm5_next.hpp"
#include "tandem/kernels/linear.hpp"

namespace tandem::model::detail {

namespace k = tandem::kernels;

void kda_forward(const KdaLayer& w, const Glm5NextConfig& c, const float* x, int rows, std::span<float> state, float* out) {
  const int H = c.d.hidden_size, heads = c.linear_num_heads, hd = c.linear_head_dim;
  const int qk = heads * hd, channels = 3 * qk;
  std::vector<float> u(static_cast<size_t>(channels)), low(static_cast<size_t>(hd)), g(static_cast<size_t>(qk));
  std::vector<float> beta(static_cast<size_t>(heads)), gate(static_cast<size_t>(qk)), o(static_cast<size_t>(qk));
  const k::KdaShape shape = kda_shape(c);
  const k::KdaWeights kw{w.conv.data(), w.a_log.data(), w.dt_bias.data(), w.o_norm.data()};
  for (int t = 0; t < rows; ++t) {
    const float* xt = x + static_cast<long>(t) * H;
    k::linear_cpu(xt, w.q.data(), nullptr, u.data(), 1, H, qk);
    k::linear_cpu(xt, w.k.data(), nullptr, u.data() + qk, 1, H, qk);
    k::linear_cpu(xt, w.v.data(), nullptr, u.data() + 2 * qk, 1, H, qk);
    k::linear_cpu(xt, w.f_a.data(), nullptr, low.data(), 1, H, hd);
    k::linear_cpu(low.data(), w.f_b.data(), nullptr, g.data(), 1, hd, qk);
    k::linear_cpu(xt, w.b.data(), nullptr, beta.data(), 1, H, heads);
    k::linear_cpu(xt, w.g_a.data(), nullptr, low.data(), 1, H, hd);
    k::linear_cpu(low.data(), w.g_b.data(), nullptr, gate.data(), 1, hd, qk);
    k::kda_token_cpu(shape, kw, u.data(), g.data(), beta.data(), gate.data(), state.data(), o.data());
    k::linear_cpu(o.data(), w.o.data(), nullptr, out + static_cast<long>(t) * H, 1, qk, H);
  }
}

}  // namespace tandem::model::detail
