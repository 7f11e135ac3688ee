// The DFlash drafter on the CPU reference op layer.
//
//   context:  c = hidden_norm(fc(concat of target layer outputs))           one row per committed token
//             per layer: k = rope(k_norm(k_proj(c))), v = v_proj(c)        -> the context row [k | v]
//   block:    x = embed([anchor, mask x n]) * input_embedding_scale        (the target's embedding)
//             per layer (pre-norm residual, Qwen3 shape):
//               h = rmsnorm(x);  q, k, v from h (q_norm/k_norm per head, rope at the block's positions)
//               x += o_proj(attention(q over every context row and every block row: no causal mask))
//               x += down(silu(gate(h')) * up(h')),  h' = rmsnorm(x)
//   logits:   target lm_head(norm(x)) at block rows 1..n, * output_multiplier, optional tanh soft cap
// The context rows depend only on the token's own features and position, so they are computed once
// per committed token and cached; the block's rows are scratch, rewritten every proposal.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/attention.hpp"
#include "tandem/kernels/linear.hpp"
#include "tandem/kernels/rmsnorm.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/model/safetensors.hpp"
#include "tandem/spec/drafter.hpp"

namespace tandem::spec {

namespace k = tandem::kernels;
using model::error;

namespace {

class DFlashDrafter final : public Drafter {
 public:
  explicit DFlashDrafter(DFlashConfig c) : c_(std::move(c)) {}

  Status load(const model::Checkpoint& draft, const model::Checkpoint& target, bool tied) {
    const int64_t H = c_.hidden_size, V = c_.vocab_size, I = c_.intermediate_size, hd = c_.head_dim;
    const int64_t qw = c_.num_attention_heads * hd, kvw = c_.num_key_value_heads * hd;
    const int64_t F = static_cast<int64_t>(c_.target_layer_ids.size()) * H;
    std::set<std::string> used;
    std::optional<Error> err;
    auto get = [&](const model::Checkpoint& ck, const std::string& name, std::vector<int64_t> shape) {
      std::vector<float> out;
      if (err) return out;
      auto t = ck.read(name, shape);
      if (!t) err = t.error();
      else out = std::move(t).value();
      if (&ck == &draft) used.insert(name);
      return out;
    };
    fc_ = get(draft, "fc.weight", {H, F});
    hidden_norm_ = get(draft, "hidden_norm.weight", {H});
    norm_ = get(draft, "norm.weight", {H});
    layers_.resize(static_cast<size_t>(c_.num_hidden_layers));
    for (int l = 0; l < c_.num_hidden_layers; ++l) {
      Layer& a = layers_[static_cast<size_t>(l)];
      const std::string p = "layers." + std::to_string(l) + ".";
      a.in_norm = get(draft, p + "input_layernorm.weight", {H});
      a.post_norm = get(draft, p + "post_attention_layernorm.weight", {H});
      a.q = get(draft, p + "self_attn.q_proj.weight", {qw, H});
      a.k = get(draft, p + "self_attn.k_proj.weight", {kvw, H});
      a.v = get(draft, p + "self_attn.v_proj.weight", {kvw, H});
      a.o = get(draft, p + "self_attn.o_proj.weight", {H, qw});
      a.q_norm = get(draft, p + "self_attn.q_norm.weight", {hd});
      a.k_norm = get(draft, p + "self_attn.k_norm.weight", {hd});
      a.gate = get(draft, p + "mlp.gate_proj.weight", {I, H});
      a.up = get(draft, p + "mlp.up_proj.weight", {I, H});
      a.down = get(draft, p + "mlp.down_proj.weight", {H, I});
    }
    // DFlash has no embedding or head of its own; a file that carries them anyway is read from the
    // target (they must be the target's for the proposals to mean anything).
    embed_ = get(target, "model.embed_tokens.weight", {V, H});
    head_ = tied ? embed_ : get(target, "lm_head.weight", {V, H});
    if (err) return *err;
    for (const auto& name : draft.names())
      if (!used.count(name))
        return error("drafter tensor \"" + name + "\" is not part of DFlashDraftModel (a DFlash2 or other variant?)");
    inv_freq_.resize(static_cast<size_t>(hd / 2));
    k::rope_inv_freq(inv_freq_.data(), static_cast<int>(hd), c_.rope_theta);
    return tandem::Ok{};
  }

  const std::vector<int>& target_layers() const override { return c_.target_layer_ids; }
  model::KvLayout context_layout() const override { return {c_.num_hidden_layers, 2 * kv_width()}; }
  int max_draft() const override { return c_.block_size - 1; }

  Status add_context(std::span<const float> features, std::span<const int> positions, model::KvSequence& ctx) const override {
    const int T = static_cast<int>(positions.size()), H = c_.hidden_size;
    const size_t F = c_.target_layer_ids.size() * static_cast<size_t>(H);
    if (T == 0) return tandem::Ok{};
    if (features.size() != F * static_cast<size_t>(T))
      return error("drafter context: " + std::to_string(features.size()) + " feature values for " + std::to_string(T) +
                   " tokens of width " + std::to_string(F));
    if (ctx.layout() != context_layout()) return error("drafter context: the store was not made for this drafter");
    if (auto s = ctx.append(positions); !s) return s.error();
    const int first = ctx.length() - T;
    std::vector<float> fused(static_cast<size_t>(T) * static_cast<size_t>(H));
    k::linear_cpu(features.data(), fc_.data(), nullptr, fused.data(), T, static_cast<int>(F), H);
    k::rmsnorm_cpu(fused.data(), hidden_norm_.data(), fused.data(), T, H, eps());
    for (int l = 0; l < c_.num_hidden_layers; ++l)
      for (int t = 0; t < T; ++t)
        write_kv(l, fused.data() + static_cast<long>(t) * H, positions[static_cast<size_t>(t)], ctx.row(l, first + t));
    return tandem::Ok{};
  }

  Result<std::vector<float>> propose(model::KvSequence& ctx, std::int32_t anchor, int pos, int n) const override {
    const int H = c_.hidden_size, V = c_.vocab_size, B = n + 1;
    if (n < 1 || n > max_draft()) return error("drafter: " + std::to_string(n) + " proposals asked, 1.." + std::to_string(max_draft()) + " possible");
    if (anchor < 0 || anchor >= V) return error("drafter: anchor token " + std::to_string(anchor) + " is outside the vocabulary");
    if (ctx.length() != pos) return error("drafter: the anchor's position " + std::to_string(pos) + " is not the context length " + std::to_string(ctx.length()));
    std::vector<int> block_pos(static_cast<size_t>(B));
    for (int t = 0; t < B; ++t) block_pos[static_cast<size_t>(t)] = pos + t;
    if (auto s = ctx.append(block_pos); !s) return s.error();

    const auto scale = static_cast<float>(c_.input_embedding_scale);
    std::vector<float> x(static_cast<size_t>(B) * static_cast<size_t>(H)), h(x.size());
    for (int t = 0; t < B; ++t) {
      const std::int32_t id = t == 0 ? anchor : c_.mask_token_id;
      const float* e = embed_.data() + static_cast<long>(id) * H;
      std::transform(e, e + H, x.begin() + static_cast<long>(t) * H, [scale](float v) { return v * scale; });
    }
    for (int l = 0; l < c_.num_hidden_layers; ++l) {
      const Layer& a = layers_[static_cast<size_t>(l)];
      k::rmsnorm_cpu(x.data(), a.in_norm.data(), h.data(), B, H, eps());
      attend(l, h.data(), B, pos, ctx, h.data());
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
      k::rmsnorm_cpu(x.data(), a.post_norm.data(), h.data(), B, H, eps());
      mlp(a, h.data(), B, h.data());
      for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    }
    k::rmsnorm_cpu(x.data(), norm_.data(), h.data(), B, H, eps());
    std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(V));
    k::linear_cpu(h.data() + H, head_.data(), nullptr, logits.data(), n, H, V);
    const double mult = c_.output_multiplier, cap = c_.final_logit_softcapping;
    if (mult != 1.0 || cap > 0)
      for (auto& v : logits) {
        double z = v * mult;
        if (cap > 0) z = std::tanh(z / cap) * cap;
        v = static_cast<float>(z);
      }
    return logits;
  }

 private:
  struct Layer {
    std::vector<float> in_norm, post_norm, q, k, v, o, q_norm, k_norm, gate, up, down;
  };
  int kv_width() const { return c_.num_key_value_heads * c_.head_dim; }
  float eps() const { return static_cast<float>(c_.rms_norm_eps); }

  // Row [k | v] of layer l for one input vector at position pos.
  void write_kv(int l, const float* in, int pos, float* row) const {
    const Layer& a = layers_[static_cast<size_t>(l)];
    const int H = c_.hidden_size, hd = c_.head_dim, kvh = c_.num_key_value_heads;
    k::linear_cpu(in, a.k.data(), nullptr, row, 1, H, kvw());
    k::rmsnorm_cpu(row, a.k_norm.data(), row, kvh, hd, eps());
    k::rope_cpu(row, kvh, hd, hd, inv_freq_.data(), pos, k::RopeLayout::half);
    k::linear_cpu(in, a.v.data(), nullptr, row + kvw(), 1, H, kvw());
  }
  int kvw() const { return kv_width(); }

  // Block attention of layer l: the B block rows (already normed, in `h`) write their own K/V
  // rows after the context, then every query sees every row. `out` may alias `h`.
  void attend(int l, const float* h, int B, int pos, model::KvSequence& ctx, float* out) const {
    const Layer& a = layers_[static_cast<size_t>(l)];
    const int H = c_.hidden_size, hd = c_.head_dim, nh = c_.num_attention_heads;
    const int first = ctx.length() - B;
    std::vector<float> q(static_cast<size_t>(B) * static_cast<size_t>(nh * hd));
    for (int t = 0; t < B; ++t) {
      float* qt = q.data() + static_cast<long>(t) * nh * hd;
      k::linear_cpu(h + static_cast<long>(t) * H, a.q.data(), nullptr, qt, 1, H, nh * hd);
      k::rmsnorm_cpu(qt, a.q_norm.data(), qt, nh, hd, eps());
      k::rope_cpu(qt, nh, hd, hd, inv_freq_.data(), pos + t, k::RopeLayout::half);
      write_kv(l, h + static_cast<long>(t) * H, pos + t, ctx.row(l, first + t));
    }
    const model::KvRows r = ctx.rows(l);
    const k::PagedRows rows{r.base, r.block_table, r.block_size, r.row_width};
    k::AttentionShape s;
    s.q_heads = nh;
    s.kv_heads = c_.num_key_value_heads;
    s.qk_dim = s.v_dim = hd;
    s.q_stride = s.out_stride = nh * hd;
    s.q_head_stride = s.k_head_stride = s.v_head_stride = hd;
    // Every query is masked as if it sat at the block's last position: all context and block rows
    // are visible (no causal mask inside the block). Rotary used the true positions above.
    std::vector<int> q_mask_pos(static_cast<size_t>(B), pos + B - 1);
    std::vector<float> attn(q.size());
    k::attention_paged_cpu(q.data(), q_mask_pos.data(), B, rows, 0, kvw(), ctx.positions().data(), ctx.length(), attn.data(), s,
                           static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))));
    k::linear_cpu(attn.data(), a.o.data(), nullptr, out, B, nh * hd, H);
  }

  void mlp(const Layer& a, const float* h, int B, float* out) const {
    const int H = c_.hidden_size, I = c_.intermediate_size;
    std::vector<float> g(static_cast<size_t>(B) * static_cast<size_t>(I)), u(g.size());
    k::linear_cpu(h, a.gate.data(), nullptr, g.data(), B, H, I);
    k::linear_cpu(h, a.up.data(), nullptr, u.data(), B, H, I);
    k::swiglu_cpu(g.data(), u.data(), g.data(), static_cast<long>(g.size()));
    k::linear_cpu(g.data(), a.down.data(), nullptr, out, B, I, H);
  }

  DFlashConfig c_;
  std::vector<float> fc_, hidden_norm_, norm_, embed_, head_, inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace

Result<DFlashConfig> read_dflash_config(const std::filesystem::path& drafter_dir, const model::ModelConfig& target) {
  const auto where = drafter_dir.string();
  std::ifstream in(drafter_dir / "config.json");
  if (!in) return error("drafter " + where + ": cannot read config.json");
  auto doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded()) return error("drafter " + where + "/config.json: not valid JSON");
  auto c = parse_dflash_config(doc, where + "/config.json");
  if (!c) return c.error();
  const model::DecoderConfig& d = target.decoder();
  if (c->hidden_size != d.hidden_size)
    return error("drafter " + where + ": hidden_size " + std::to_string(c->hidden_size) + " differs from the target's " +
                 std::to_string(d.hidden_size) + " (DFlash embeds with the target's embedding)");
  if (c->vocab_size != d.vocab_size)
    return error("drafter " + where + ": vocab_size " + std::to_string(c->vocab_size) + " differs from the target's " +
                 std::to_string(d.vocab_size));
  for (int l : c->target_layer_ids)
    if (l >= d.num_hidden_layers)
      return error("drafter " + where + ": target layer " + std::to_string(l) + " does not exist (the target has " +
                   std::to_string(d.num_hidden_layers) + ")");
  return c;
}

Result<std::unique_ptr<Drafter>> load_dflash(const std::filesystem::path& drafter_dir, const std::filesystem::path& target_dir,
                                             const model::ModelConfig& target) {
  const auto where = drafter_dir.string();
  auto c = read_dflash_config(drafter_dir, target);
  if (!c) return c.error();
  const model::DecoderConfig& d = target.decoder();
  auto draft_ck = model::Checkpoint::open(drafter_dir);
  if (!draft_ck) return error("drafter " + where + ": " + draft_ck.error().message);
  auto target_ck = model::Checkpoint::open(target_dir);
  if (!target_ck) return error("drafter's target " + target_dir.string() + ": " + target_ck.error().message);
  auto m = std::make_unique<DFlashDrafter>(std::move(c).value());
  if (auto s = m->load(draft_ck.value(), target_ck.value(), d.tie_word_embeddings); !s)
    return error("drafter " + where + ": " + s.error().message);
  return std::unique_ptr<Drafter>(std::move(m));
}

}  // namespace tandem::spec
