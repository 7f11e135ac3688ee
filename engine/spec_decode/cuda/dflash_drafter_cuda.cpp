// The DFlash drafter on CUDA: the math of the CPU drafter (dflash_drafter.cpp), batched.
//
//   add_context (after each target step, for every token of it): the captured features are
//   copied aside (one device copy) with the rows' positions and slots; before the next proposal
//   (or when t_cap_ rows wait) every waiting row becomes a context row in one pass:
//     c = hidden_norm(fc(captured features));  per layer: K = rope(k_norm(c Wk^T)), V = c Wv^T,
//     written into the context pool at the token's own position (the target's block table).
//   So a step that drafts nothing (the adaptive length decoding plainly) pays a copy, not the
//   context pass: on an H100 that pass cost a plain step of the committed pair 0.02-0.03 ms of
//   its 0.2 (s16a, 2026-12-07), and the context rows of 16 plain steps cost about what one's do.
//   propose (the T block tokens of every drafting sequence in one forward):
//     x = embed([anchor, mask x n]) with the target's table (one launch with the first norm);
//     per layer (Qwen3 shape, fp32 residual):
//       h = rmsnorm(x); q, k, v = h W^T (one product); q_norm / k_norm per head, rope at the block's
//       positions and the block's K/V into the pool at positions pos .. pos + n (one launch:
//       kernels' head_prep; scratch: see device_drafter.hpp);
//       paged attention with every query masked at its block's last position, so it sees all
//       context rows and its whole block (no causal mask inside the block); x += o_proj(...);
//       x += down(silu(gate(h')) * up(h')), h' = rmsnorm(x)
//     logits = lm_head(norm(x)) at block rows 1..n (the target's head; the norm of those rows alone),
//     argmax on the device.
//   Products of up to 64 rows take the decode-sized gemv (gate_up fused with its activation); a
//   proposal of kFusedFromRows rows or more takes the tensor cores instead (enqueue_fused: rows_mma
//   with the norms, the embedding and the argmax folded in, qkv_heads with head_prep folded in).
//   The attention splits the keys at a fixed size (layout()), so the graph captured for
//   max-model-len serves short contexts well.
//   A proposal replays a CUDA graph per (batch bucket, longest n), shorter blocks padded, as the
//   target's decode steps do, and context rows of up to 512 tokens one per padded size; padding
//   writes only the scratch block.
// bf16 weights and activations, fp32 accumulation and residual, as the target's CUDA path.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "tandem/kernels/activation.hpp"
#include "tandem/kernels/gemm.hpp"
#include "tandem/kernels/glue.hpp"
#include "tandem/kernels/head_prep.hpp"
#include "tandem/kernels/paged_attention.hpp"
#include "tandem/kernels/rope.hpp"
#include "tandem/kernels/rows_mma.hpp"
#include "tandem/kernels/sampling_cuda.hpp"
#include "tandem/model/cuda/cuda_decoder.hpp"  // cuda_error, FirstError
#include "tandem/model/cuda/cuda_graph.hpp"
#include "tandem/model/cuda/device_buffer.hpp"
#include "tandem/model/safetensors.hpp"
#include "tandem/spec/dflash_cuda.hpp"
#include "tandem/spec/drafter.hpp"
#include "tandem/spec/waiting_context.hpp"
#include "tandem/kernels/cuda_check.hpp"

namespace tandem::spec {

namespace {

namespace k = tandem::kernels;
using model::error;
using model::cuda::DeviceBuffer;
using model::cuda::capture_graph;
using model::cuda::FirstError;
using model::cuda::Uploader;
constexpr k::DType kBf16 = k::DType::bf16;

int next_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

class DFlashCuda final : public DeviceDrafter {
 public:
  DFlashCuda(DFlashConfig c, model::CudaModel& target, const DFlashCudaOptions& o) : c_(std::move(c)), target_(target) {
    H_ = c_.hidden_size, V_ = c_.vocab_size, I_ = c_.intermediate_size, hd_ = c_.head_dim;
    nh_ = c_.num_attention_heads, kvh_ = c_.num_key_value_heads, qw_ = nh_ * hd_, kvw_ = kvh_ * hd_;
    F_ = static_cast<int>(c_.target_layer_ids.size()) * H_;
    B_ = c_.block_size;
    s_cap_ = o.max_num_seqs;
    t_cap_ = std::max({o.max_num_batched_tokens, o.max_num_seqs, o.max_num_seqs * B_});
    r_cap_ = o.max_num_seqs * (B_ - 1);
    max_len_ = o.max_model_len > 0 ? o.max_model_len : target.config().decoder().max_position_embeddings;
    eager_ = o.enforce_eager;
    const char* mma = std::getenv("TANDEM_DRAFTER_MMA");
    mma_ = !(mma && std::string(mma) == "0");
    const char* heads = std::getenv("TANDEM_DRAFTER_FUSED_HEADS");
    fused_heads_ = !(heads && std::string(heads) == "0");
    const char* defer = std::getenv("TANDEM_DRAFTER_DEFER_CONTEXT");
    defer_context_ = !(defer && std::string(defer) == "0");
    target_tokens_ = std::max(o.max_num_batched_tokens, o.max_num_seqs);
  }
  ~DFlashCuda() override {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    for (auto& [key, exec] : context_graphs_) cudaGraphExecDestroy(exec);
    for (cudaEvent_t e : {ctx_staged_, ctx_begin_, ctx_end_})
      if (e) cudaEventDestroy(e);
    for (std::int32_t* p : {ctx_host_, prop_host_})
      if (p) cudaFreeHost(p);
    if (keys_host_) cudaFreeHost(keys_host_);
  }

  Status load(const model::Checkpoint& ck);

  const std::vector<int>& target_layers() const override { return c_.target_layer_ids; }
  int max_draft() const override { return B_ - 1; }
  std::uint64_t context_bytes_per_token() const override {
    return static_cast<std::uint64_t>(c_.num_hidden_layers) * 2u * static_cast<std::uint64_t>(kvw_) * 2u;
  }
  tandem::Status make_pool(std::int32_t num_blocks, int block_size) override;
  tandem::Status add_context(std::span<const model::PagedWork> work) override;
  tandem::Result<Drafts> propose(std::span<const DraftItem> items, bool logits) override;
  void set_op_timer(model::OpTimer* timer) override { timer_ = eager_ ? timer : nullptr; }

 private:
  struct Layer {
    DeviceBuffer in_norm, post_norm, qkv, o, q_norm, k_norm, gate_up, down;  // qkv: [q_proj; k_proj; v_proj]
  };

  void mark(const char* op) {
    if (timer_) timer_->mark(op, 0, stream_);
  }
  float eps() const { return static_cast<float>(c_.rms_norm_eps); }
  k::PagedKvLayout layout() const {
    k::PagedKvLayout l;
    l.dtype = kBf16;
    l.block_size = block_size_;
    l.kv_heads = kvh_;
    l.qk_dim = l.v_dim = hd_;
    // Fixed splits of 32 keys or more (at most 64 of max-model-len): a proposal's graph is captured
    // for max-model-len, and splits chosen for that would give a short context one or two blocks
    // walking all of it.
    l.fixed_split_keys = 32 * (((max_len_ + 31) / 32 + 63) / 64);
    return l;
  }
  char* k_pool(int l) const { return pool_.as<char>() + static_cast<std::size_t>(2 * l) * layer_bytes_; }
  char* v_pool(int l) const { return k_pool(l) + layer_bytes_; }

  // Device inputs: tokens, rotary positions, mask positions, sequence of each token, pool slots
  // (t_cap_ each), logit rows (r_cap_), block tables (s_cap_ x max_blocks_).
  std::int32_t* in_tok() const { return inputs_.as<std::int32_t>(); }
  std::int32_t* in_pos() const { return in_tok() + t_cap_; }
  std::int32_t* in_mask() const { return in_pos() + t_cap_; }
  std::int32_t* in_seq() const { return in_mask() + t_cap_; }
  std::int32_t* in_slot() const { return in_seq() + t_cap_; }
  std::int32_t* in_rows() const { return in_slot() + t_cap_; }
  std::int32_t* in_tables() const { return in_rows() + r_cap_; }
  // Context rows stage their positions and slots apart from a proposal's inputs, one after the other
  // over the token and position fields (a proposal uploads its own before it runs): pos at
  // ctx_pos(), the slots of `rows` staged rows right after them, so one copy uploads both.
  std::int32_t* ctx_pos() const { return in_tok(); }
  std::int32_t* ctx_slot(int rows) const { return in_tok() + rows; }
  std::size_t offset(const std::int32_t* device_ptr) const { return static_cast<std::size_t>(device_ptr - in_tok()); }

  // The slot of `pos` through `table`, or -1 (with `why`) when the table does not cover it.
  long slot(std::span<const std::int32_t> table, int pos, std::string& why) const {
    const std::size_t b = static_cast<std::size_t>(pos / block_size_);
    if (pos < 0 || b >= table.size() || table[b] < 0 || table[b] >= num_blocks_) {
      why = "position " + std::to_string(pos) + " is not covered by the block table";
      return -1;
    }
    return static_cast<long>(table[b]) * block_size_ + pos % block_size_;
  }

  // `n` ints of the host staging area `host` (a mirror of inputs_) to their device place.
  void upload(std::int32_t* host, const std::int32_t* device_ptr, std::size_t n, FirstError& err) const {
    if (n == 0) return;
    const std::size_t at = offset(device_ptr);
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(const_cast<std::int32_t*>(device_ptr), host + at, n * 4, cudaMemcpyHostToDevice, stream_),
                   "drafter inputs"));
  }

  k::GemmArgs linear(const void* x, long ldx, const DeviceBuffer& w, void* y, int rows, int in, int out) const {
    k::GemmArgs g;
    g.rows = rows, g.in = in, g.out = out;
    g.x = x, g.ldx = ldx, g.w = w.get(), g.ldw = in, g.y = y, g.ldy = out;
    return g;
  }
  // Products of a proposal or of a step's context rows: the decode-sized kernel (gemv.hpp) up to
  // kGemvRows rows, where cuBLASLt's tiles leave the GPU mostly idle and cost a launch of several
  // microseconds each; cuBLASLt above (prefill chunks' context rows).
  static constexpr int kGemvRows = 64;
  static constexpr std::size_t kOneUploadBytes = 64 * 1024;
  Status gemm(const k::GemmArgs& g) {
    if (g.batch == 1 && g.w_trans && g.xw_type == kBf16 && g.rows <= kGemvRows && !g.bias) {
      const k::GemvArgs v = as_gemv(g);
      if (k::gemv_fits(v)) return k::gemv_cuda(v, stream_);
    }
    return gemm_->run(g, stream_);
  }
  static k::GemvArgs as_gemv(const k::GemmArgs& g) {
    k::GemvArgs v;
    v.rows = g.rows, v.in = g.in, v.out = g.out;
    v.x = g.x, v.ldx = g.ldx, v.w = g.w, v.ldw = g.ldw, v.y = g.y, v.ldy = g.ldy, v.y_type = g.y_type;
    return v;
  }
  // silu(gate(h)) * up(h) of T rows into act_: one fused gemv where it fits, else the product into
  // gu_ and the activation apart.
  Status gate_up_silu(const DeviceBuffer& gate_up, int T) {
    k::GemvArgs v = as_gemv(linear(h_.get(), H_, gate_up, act_.get(), T, H_, I_));
    v.silu_mul = true, v.up_offset = I_;
    if (T <= kGemvRows && k::gemv_fits(v)) return k::gemv_cuda(v, stream_);
    FirstError err;
    err(gemm(linear(h_.get(), H_, gate_up, gu_.get(), T, H_, 2 * I_)));
    err(k::silu_and_mul_cuda(kBf16, gu_.get(), act_.get(), T, I_, stream_));
    return err.status;
  }

  // Layer l's q|k|v rows for T rows of h_ (queries false: k|v alone), then one head_prep: K and V
  // into the pool (positions in_pos, slots in_slot), the normed, rotated queries into q_.
  Status qkv_rows(int l, int T, bool queries);
  // head_prep of layer l's q|k|v rows in qkv_ (qkv_rows' second half) at positions pos, into slots.
  Status prep_heads(int l, int T, bool queries, const std::int32_t* pos, const std::int32_t* slot);
  k::HeadPrep head_prep_args(int l, int T, bool queries, const std::int32_t* pos, const std::int32_t* slot) const;
  // Product m of layer l's q|k|v (or k|v) rows and head_prep of them: one qkv_heads launch where it
  // fits (and fused_heads_), else rows_mma then head_prep.
  Status product_and_heads(int l, k::RowsMma m, int T, bool queries, const std::int32_t* pos, const std::int32_t* slot,
                           const char* op);
  // The proposal's forward over T staged block tokens, R logit rows, argmax keys into argmax_keys_.
  Status enqueue(int T, int R, int max_context);
  // The same forward with the products on the tensor cores and the norms folded into them
  // (rows_mma.hpp): 5 launches a layer instead of 8 (the embedding in the first), head_prep folded
  // into the q|k|v product (qkv_heads), the head's argmax in its product. Taken when mma_, the shapes
  // fit (fused_fits) and the proposal has kFusedFromRows rows or more: on an H100 with the pair's
  // drafter a proposal of 8 rows (batch 1) cost 0.137 ms this way and 0.125 ms unfused, one of 48
  // rows (batch 6) 0.200 ms against 0.233 (engine/spec_decode/bench/results/h100-spec21-2026-12-06.md):
  // the products' k split and the folded norms cost latency that only more rows pay back.
  static constexpr int kFusedFromRows = 17;
  Status enqueue_fused(int T, int R, int max_context);
  bool fused_fits(int T) const;
  k::RowsMma mma(const void* x, long ldx, const void* w, void* y, int rows, int in, int out) const {
    k::RowsMma m;
    m.rows = rows, m.in = in, m.out = out, m.x = x, m.ldx = ldx, m.w = w, m.ldw = in, m.y = y, m.ldy = out;
    return m;
  }
  // m with its x as rmsnorm(cur + delta) * norm_w: the residual after the add goes to the other
  // residual buffer, which becomes the current one.
  void normed(k::RowsMma& m, const DeviceBuffer& norm_w, bool keep_residual) {
    m.x = nullptr, m.ldx = 0;
    m.x32 = res_[cur_]->as<float>(), m.delta = delta_.get(), m.norm_w = norm_w.get(), m.eps = eps();
    if (keep_residual) m.x32_out = res_[1 - cur_]->as<float>(), cur_ = 1 - cur_;
  }
  Status capture(int B, int n);
  // Context rows of T tokens whose positions and slots are staged (features: waiting_ rows 0..T).
  Status enqueue_context(int T);
  // Every waiting row into the context pool, in one pass (see the top of the file).
  Status flush_context();

  DFlashConfig c_;
  model::CudaModel& target_;
  int H_ = 0, V_ = 0, I_ = 0, hd_ = 0, nh_ = 0, kvh_ = 0, qw_ = 0, kvw_ = 0, F_ = 0, B_ = 0;
  int s_cap_ = 0, t_cap_ = 0, r_cap_ = 0, max_len_ = 0;
  k::Stream stream_ = nullptr;
  std::unique_ptr<k::GemmRunner> gemm_;
  DeviceBuffer fc_, hidden_norm_, norm_, inv_freq_;
  std::vector<Layer> layers_;
  DeviceBuffer x_, x2_, delta_, h_, q_, qkv_, attn_, gu_, act_, head_in_, logits_, argmax_keys_;
  int qkvw() const { return qw_ + 2 * kvw_; }  // a q|k|v row's width (qkv_, Layer::qkv)
  DeviceBuffer pool_, inputs_, attn_ws_;
  std::size_t layer_bytes_ = 0, in_ints_ = 0;
  std::int32_t num_blocks_ = 0;
  int block_size_ = 0, max_blocks_ = 0;
  // Separate pinned staging for context passes (not waited for) and propose (waited for), so a
  // proposal never rewrites inputs an earlier context pass's copy has yet to read; a context pass
  // waits for the previous one's copy (ctx_staged_) before it writes its own.
  std::int32_t* ctx_host_ = nullptr;
  std::int32_t* prop_host_ = nullptr;
  // The drafts' argmax keys come back through pinned memory (r_cap_ of them): a copy into pageable
  // memory is staged by the driver, microseconds more on every proposal.
  unsigned long long* keys_host_ = nullptr;
  bool eager_ = false;
  bool mma_ = true;                        // TANDEM_DRAFTER_MMA=0: the gemv path (for comparison)
  bool fused_heads_ = true;                // TANDEM_DRAFTER_FUSED_HEADS=0: rows_mma then head_prep
  bool defer_context_ = true;              // TANDEM_DRAFTER_DEFER_CONTEXT=0: a context pass after every step
  DeviceBuffer* res_[2] = {&x_, &x2_};     // the fused path's residual, ping-ponged
  int cur_ = 0;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // by (batch bucket, drafts per sequence)
  std::map<int, cudaGraphExec_t> context_graphs_;            // by padded token count
  // Context rows not yet written: their features (bf16 [t_cap_, F_], copied from the target's
  // capture after each step, in the order of waiting_rows_: positions and pool slots).
  DeviceBuffer waiting_;
  WaitingContext waiting_rows_;
  cudaEvent_t ctx_staged_ = nullptr;  // the last context pass's staged inputs were read
  cudaEvent_t ctx_begin_ = nullptr, ctx_end_ = nullptr;  // around a proposal's pass (Drafts::context_seconds)
  // Captures the context pass's graph of every padded size up front (at make_pool), so no step
  // pays a capture: a proposal's time would count it as drafting's (the adaptive length weighs it).
  Status capture_context_graphs();
  int target_tokens_ = 0;                                    // rows the target's capture holds
  model::OpTimer* timer_ = nullptr;                          // eager proposals only
};


// long-function: the config checks the CUDA drafter needs, then a flat upload list of its weights, in order.
Status DFlashCuda::load(const model::Checkpoint& ck) {
  if (c_.input_embedding_scale != 1.0 || c_.output_multiplier != 1.0 || c_.final_logit_softcapping > 0)
    return Error{"input_embedding_scale, output_multiplier or final_logit_softcapping is set: the CUDA drafter does not apply "
           "them (run this drafter with `device` cpu)"};
  if (c_.mask_token_id < 0 || c_.mask_token_id >= V_) return Error{"mask_token_id is outside the vocabulary"};
  if (nh_ % kvh_ != 0 || nh_ / kvh_ > 8) return Error{"the paged-attention kernel needs 1..8 query heads per KV head"};
  if (H_ % 8 != 0 || I_ % 8 != 0 || hd_ % 8 != 0) return Error{"hidden_size, intermediate_size and head_dim must be multiples of 8"};
  if (!k::head_prep_fits(hd_)) return Error{"the CUDA drafter needs an even head_dim of at most 256 (kernels' head_prep)"};
  stream_ = target_.stream();
  auto gemm = k::GemmRunner::create();
  if (!gemm) return gemm.error();
  gemm_ = std::move(*gemm);

  Uploader up(ck);
  std::set<std::string> used;
  const auto H = static_cast<int64_t>(H_), I = static_cast<int64_t>(I_), hd = static_cast<int64_t>(hd_);
  auto tensor = [&](DeviceBuffer& b, const std::string& name, std::vector<int64_t> shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    if (auto e = b.allocate(n * 2, name); !e) return up.fail(e);
    used.insert(name);
    up.bf16(b, 0, name, shape);
  };
  tensor(fc_, "fc.weight", {H, F_});
  tensor(hidden_norm_, "hidden_norm.weight", {H});
  tensor(norm_, "norm.weight", {H});
  layers_.resize(static_cast<std::size_t>(c_.num_hidden_layers));
  for (int l = 0; l < c_.num_hidden_layers; ++l) {
    Layer& a = layers_[static_cast<std::size_t>(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    tensor(a.in_norm, p + "input_layernorm.weight", {H});
    tensor(a.post_norm, p + "post_attention_layernorm.weight", {H});
    // q, k and v as one [qw + 2 kvw, H] weight: one product writes a token's q|k|v row (a row's sum
    // does not depend on the rows beside it); the context rows take its k|v rows alone.
    if (auto e = a.qkv.allocate(static_cast<std::size_t>((qw_ + 2 * kvw_) * H) * 2, p + "qkv"); !e) return e;
    for (const char* w : {"q_proj", "k_proj", "v_proj"}) used.insert(p + "self_attn." + w + ".weight");
    up.bf16(a.qkv, 0, p + "self_attn.q_proj.weight", {qw_, H});
    up.bf16(a.qkv, static_cast<std::size_t>(qw_ * H), p + "self_attn.k_proj.weight", {kvw_, H});
    up.bf16(a.qkv, static_cast<std::size_t>((qw_ + kvw_) * H), p + "self_attn.v_proj.weight", {kvw_, H});
    tensor(a.o, p + "self_attn.o_proj.weight", {H, qw_});
    tensor(a.q_norm, p + "self_attn.q_norm.weight", {hd});
    tensor(a.k_norm, p + "self_attn.k_norm.weight", {hd});
    tensor(a.down, p + "mlp.down_proj.weight", {H, I});
    // gate and up fused into one [2I, H] product (gate rows first, as silu_and_mul reads them).
    if (auto e = a.gate_up.allocate(static_cast<std::size_t>(2 * I * H) * 2, p + "gate_up"); !e) return e;
    used.insert(p + "mlp.gate_proj.weight");
    used.insert(p + "mlp.up_proj.weight");
    up.bf16(a.gate_up, 0, p + "mlp.gate_proj.weight", {I, H});
    up.bf16(a.gate_up, static_cast<std::size_t>(I * H), p + "mlp.up_proj.weight", {I, H});
  }
  if (!up.ok()) return up.error();
  for (const auto& name : ck.names())
    if (!used.count(name)) return Error{"drafter tensor \"" + name + "\" is not part of DFlashDraftModel (a DFlash2 or other variant?)"};

  std::vector<float> inv(static_cast<std::size_t>(hd_ / 2));
  k::rope_inv_freq(inv.data(), hd_, c_.rope_theta);
  if (auto e = inv_freq_.allocate(inv.size() * 4, "drafter rope frequencies"); !e) return e;
  if (auto e = TANDEM_CUDA_STATUS(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice), "rope"); !e)
    return e;

  const std::size_t T = static_cast<std::size_t>(t_cap_), R = static_cast<std::size_t>(r_cap_), h = static_cast<std::size_t>(H_);
  struct Want {
    DeviceBuffer* b;
    std::size_t bytes;
    const char* what;
  };
  const Want wants[] = {
      {&x_, T * h * 4, "drafter residual"},
      {&x2_, T * h * 4, "drafter residual (second)"},
      {&delta_, T * h * 2, "drafter delta"},
      {&h_, T * h * 2, "drafter normed"},
      {&q_, T * static_cast<std::size_t>(qw_) * 2, "drafter queries"},
      {&qkv_, T * static_cast<std::size_t>(qkvw()) * 2, "drafter q|k|v rows"},
      {&attn_, T * static_cast<std::size_t>(qw_) * 2, "drafter attention out"},
      {&gu_, T * 2 * static_cast<std::size_t>(I_) * 2, "drafter gate_up"},
      {&act_, T * static_cast<std::size_t>(I_) * 2, "drafter act"},
      {&head_in_, R * h * 2, "drafter head rows"},
      {&logits_, R * static_cast<std::size_t>(V_) * 4, "draft logits"},
      {&argmax_keys_, R * sizeof(unsigned long long), "draft tokens"},
      // Features of the context rows that wait for a proposal (add_context): allocated here, before
      // the KV pool is sized from what memory is left.
      {&waiting_, T * static_cast<std::size_t>(F_) * 2, "the drafter's waiting context rows"},
  };
  for (const Want& w : wants)
    if (auto e = w.b->allocate(w.bytes, w.what); !e) return e;
  // Zeroed: a graph's padding rows read waiting rows past the real ones.
  if (auto e = TANDEM_CUDA_STATUS(cudaMemset(waiting_.get(), 0, T * static_cast<std::size_t>(F_) * 2), "zeroing the waiting context rows"); !e)
    return e.error();
  waiting_rows_ = WaitingContext(t_cap_);

  if (auto s = target_.set_capture(c_.target_layer_ids); !s) return s.error().with_context("the target's hidden-state capture");
  return {};
}

tandem::Status DFlashCuda::make_pool(std::int32_t num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) return error("drafter context pool: no blocks");
  num_blocks_ = num_blocks, block_size_ = block_size;
  max_blocks_ = (max_len_ + block_size - 1) / block_size;
  // One block more than the target's: the padding rows of a step point there.
  layer_bytes_ = static_cast<std::size_t>(num_blocks + 1) * static_cast<std::size_t>(block_size) * static_cast<std::size_t>(kvw_) * 2;
  if (auto e = pool_.allocate(layer_bytes_ * 2 * static_cast<std::size_t>(c_.num_hidden_layers), "the drafter's context pool"); !e)
    return e.error();
  in_ints_ = 5 * static_cast<std::size_t>(t_cap_) + static_cast<std::size_t>(r_cap_) +
             static_cast<std::size_t>(s_cap_) * static_cast<std::size_t>(max_blocks_);
  if (auto e = inputs_.allocate(in_ints_ * 4, "drafter inputs"); !e) return e.error();
  for (std::int32_t** p : {&ctx_host_, &prop_host_})
    if (auto e = TANDEM_CUDA_STATUS(cudaMallocHost(p, in_ints_ * 4), "pinned drafter inputs"); !e) return e.error();
  if (auto e = TANDEM_CUDA_STATUS(cudaMallocHost(&keys_host_, static_cast<std::size_t>(r_cap_) * sizeof(unsigned long long)), "pinned draft tokens");
      !e)
    return e.error();
  if (auto e = TANDEM_CUDA_STATUS(cudaEventCreateWithFlags(&ctx_staged_, cudaEventDisableTiming), "context staging event"); !e)
    return e.error();
  for (cudaEvent_t* ev : {&ctx_begin_, &ctx_end_})
    if (auto e = TANDEM_CUDA_STATUS(cudaEventCreate(ev), "context timing event"); !e) return e.error();
  std::size_t ws = 0;
  for (int n = 1; n <= s_cap_ * B_; ++n) ws = std::max(ws, k::paged_attention_workspace_bytes(n, nh_, layout(), max_len_));
  if (auto e = attn_ws_.allocate(std::max<std::size_t>(ws, 256), "drafter attention workspace"); !e) return e.error();
  return capture_context_graphs();
}

Status DFlashCuda::qkv_rows(int l, int T, bool queries) {
  const Layer& a = layers_[static_cast<std::size_t>(l)];
  const int skip = queries ? 0 : qw_;  // context rows: the k|v rows of the weight alone
  k::GemmArgs g = linear(h_.get(), H_, a.qkv, qkv_.as<std::uint16_t>() + skip, T, H_, qkvw() - skip);
  g.w = a.qkv.as<std::uint16_t>() + static_cast<std::size_t>(skip) * static_cast<std::size_t>(H_);
  g.ldy = qkvw();
  FirstError err;
  err(gemm(g));
  mark("qkv (gemv)");
  err(queries ? prep_heads(l, T, true, in_pos(), in_slot()) : prep_heads(l, T, false, ctx_pos(), ctx_slot(T)));
  return err.status;
}

Status DFlashCuda::prep_heads(int l, int T, bool queries, const std::int32_t* pos, const std::int32_t* slot) {
  FirstError err;
  err(k::head_prep(head_prep_args(l, T, queries, pos, slot), stream_));
  mark("head prep (norms, rope, cache write)");
  return err.status;
}

k::HeadPrep DFlashCuda::head_prep_args(int l, int T, bool queries, const std::int32_t* pos, const std::int32_t* slot) const {
  const Layer& a = layers_[static_cast<std::size_t>(l)];
  k::HeadPrep p;
  p.qkv = qkv_.get(), p.ld = qkvw(), p.k_at = qw_, p.v_at = qw_ + kvw_;
  p.tokens = T, p.q_heads = queries ? nh_ : 0, p.kv_heads = kvh_, p.head_dim = hd_;
  p.q_norm = a.q_norm.get(), p.k_norm = a.k_norm.get(), p.eps = eps();
  p.inv_freq = inv_freq_.as<float>(), p.pos = pos, p.slot = slot;
  p.q_out = q_.get(), p.k_cache = k_pool(l), p.v_cache = v_pool(l);
  return p;
}

Status DFlashCuda::product_and_heads(int l, k::RowsMma m, int T, bool queries, const std::int32_t* pos, const std::int32_t* slot,
                                     const char* op) {
  FirstError err;
  const k::HeadPrep p = head_prep_args(l, T, queries, pos, slot);
  if (fused_heads_ && k::qkv_heads_fits(m, p)) {
    err(k::qkv_heads(m, p, stream_));
    mark(op);
    return err.status;
  }
  err(k::rows_mma(m, stream_));
  mark(op);
  err(k::head_prep(p, stream_));
  mark("head prep (norms, rope, cache write)");
  return err.status;
}

tandem::Status DFlashCuda::add_context(std::span<const model::PagedWork> work) {
  if (pool_.empty()) return error("drafter: make_pool first");
  if (!target_.captured()) return error("drafter: the target captures no hidden states");
  std::vector<std::int32_t> pos, slots;
  std::string why;
  for (const model::PagedWork& w : work)
    for (std::size_t i = 0; i < w.tokens.size(); ++i) {
      const int p = w.start + static_cast<int>(i);
      const long s = slot(w.block_table, p, why);
      if (s < 0) return error("drafter context: " + why);
      pos.push_back(p), slots.push_back(static_cast<std::int32_t>(s));
    }
  const int T = static_cast<int>(pos.size());
  if (T == 0) return tandem::Ok{};
  if (T > t_cap_) return error("drafter context: more than " + std::to_string(t_cap_) + " tokens in a step");
  if (!waiting_rows_.fits(T))
    if (auto s = flush_context(); !s) return s;
  // The capture's first T rows (the step's tokens in the items' order) behind the waiting ones;
  // the next target step overwrites the capture only after this copy (the same stream).
  const std::size_t row_bytes = static_cast<std::size_t>(F_) * 2;
  if (auto s = TANDEM_CUDA_STATUS(cudaMemcpyAsync(waiting_.as<char>() + static_cast<std::size_t>(waiting_rows_.size()) * row_bytes, target_.captured(),
                                                  static_cast<std::size_t>(T) * row_bytes, cudaMemcpyDeviceToDevice, stream_),
                                  "drafter context: keeping the captured rows");
      !s)
    return s.error();
  waiting_rows_.add(pos, slots);
  return defer_context_ ? tandem::Ok{} : flush_context();
}

Status DFlashCuda::flush_context() {
  const int T = waiting_rows_.size();
  if (T == 0) return tandem::Ok{};
  // The previous pass's copy of the staged inputs must have read them before they are rewritten
  // (a target step or a proposal waits for the stream; two passes can follow one another without).
  if (auto s = TANDEM_CUDA_STATUS(cudaEventSynchronize(ctx_staged_), "drafter context: waiting for the last staging"); !s)
    return s.error();
  // Passes repeat their sizes (decodes, verifications, short prompts): up to 512 tokens, padded to
  // a power of two, they replay a graph per size (capture_context_graphs). Padding rows (zeroed or
  // stale waiting rows) write the scratch block only.
  const int Tn = next_pow2(T);
  const bool graph = !eager_ && context_graphs_.count(Tn) > 0;
  const int rows = graph ? Tn : T;
  const auto n = static_cast<std::size_t>(rows);
  waiting_rows_.stage(rows, num_blocks_ * block_size_, block_size_, std::span(ctx_host_ + offset(ctx_pos()), n),
                      std::span(ctx_host_ + offset(ctx_slot(rows)), n));
  waiting_rows_.clear();
  FirstError err;
  upload(ctx_host_, ctx_pos(), 2 * n, err);
  err(TANDEM_CUDA_STATUS(cudaEventRecord(ctx_staged_, stream_), "drafter context: staging event"));
  if (graph) {
    err(TANDEM_CUDA_STATUS(cudaGraphLaunch(context_graphs_.at(Tn), stream_), "drafter context graph launch"));
  } else {
    err(enqueue_context(T));
  }
  if (!err.ok()) return err.status.error().with_context("drafter context");
  return tandem::Ok{};
}

// Every padded size's pass once eagerly (which plans its GEMMs), then captured; the rows are
// padding (position 0, the scratch block), so the pool's real blocks are not written.
Status DFlashCuda::capture_context_graphs() {
  if (eager_) return tandem::Ok{};
  FirstError err;
  for (int Tn = 1; Tn <= std::min(512, t_cap_) && err.ok(); Tn *= 2) {
    std::int32_t* pos = ctx_host_ + offset(ctx_pos());
    for (int t = 0; t < Tn; ++t) pos[t] = 0, pos[Tn + t] = num_blocks_ * block_size_ + t % block_size_;
    upload(ctx_host_, ctx_pos(), 2 * static_cast<std::size_t>(Tn), err);
    err(enqueue_context(Tn));
    if (!err.ok()) break;
    auto exec = capture_graph(stream_, [&] { return enqueue_context(Tn); }, "context graph of " + std::to_string(Tn) + " rows");
    if (exec) context_graphs_[Tn] = exec.value();
    else err(exec.error());
    // The staged inputs are rewritten for the next size: this one's copy must have read them.
    err(TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "drafter context graphs"));
  }
  if (!err.ok()) return err.status.error().with_context("capturing the drafter's context passes");
  return tandem::Ok{};
}

// The gemv path for every size: the tensor-core one (fc into fp32 rows, the hidden norm and
// head_prep folded into each layer's k|v product) cost 0.037 ms for a verification's 8 rows on an
// H100 against 0.024 ms this way, and no less for 48 (spec21's run, 2026-12-06).
Status DFlashCuda::enqueue_context(int T) {
  FirstError err;
  err(gemm(linear(waiting_.get(), F_, fc_, h_.get(), T, F_, H_)));
  err(kernels::rmsnorm_rows(h_.get(), H_, T, H_, hidden_norm_.get(), h_.get(), H_, eps(), stream_));
  for (int l = 0; l < c_.num_hidden_layers && err.ok(); ++l) err(qkv_rows(l, T, false));
  return err.status;
}

// long-function: a proposal's staging, eager run or graph capture/replay per shape, then the drafts read back.
tandem::Result<Drafts> DFlashCuda::propose(std::span<const DraftItem> items, bool want_logits) {
  if (pool_.empty()) return error("drafter: make_pool first");
  const int S = static_cast<int>(items.size());
  Drafts out;
  if (S == 0) return out;
  // The context rows waiting since the last proposal first: this one attends to them. Their pass
  // is timed apart on the device (the events are read after the proposal's synchronisation).
  const bool waited = !waiting_rows_.empty();
  if (waited) {
    if (auto e = TANDEM_CUDA_STATUS(cudaEventRecord(ctx_begin_, stream_), "context timing"); !e) return e.error();
    if (auto f = flush_context(); !f) return f.error();
    if (auto e = TANDEM_CUDA_STATUS(cudaEventRecord(ctx_end_, stream_), "context timing"); !e) return e.error();
  }
  if (S > s_cap_) return error("drafter: " + std::to_string(S) + " sequences, more than " + std::to_string(s_cap_));
  // Mixed lengths (the adaptive policy at batch > 1) replay the graph of the longest: a shorter
  // block is padded with mask tokens whose rows write the scratch block and attend only up to the
  // block's own end (its real tokens do not see them), their drafts dropped.
  int n_all = 0;
  for (const DraftItem& it : items) n_all = std::max(n_all, it.n);
  const bool graph = !eager_ && n_all + 1 <= block_size_;  // a padded block fits the scratch block
  const int B = graph ? std::min(next_pow2(S), s_cap_) : S;
  std::int32_t* host = prop_host_;
  std::int32_t* tok = host + offset(in_tok());
  std::int32_t* pos = host + offset(in_pos());
  std::int32_t* mask = host + offset(in_mask());
  std::int32_t* seq = host + offset(in_seq());
  std::int32_t* slots = host + offset(in_slot());
  std::int32_t* rows = host + offset(in_rows());
  std::int32_t* tables = host + offset(in_tables());
  const std::size_t mb = static_cast<std::size_t>(max_blocks_);
  int T = 0, R = 0, max_context = 0;
  std::string why;
  std::vector<int> first_row(static_cast<std::size_t>(S));  // an item's first draft row
  for (int s = 0; s < B; ++s) {
    std::int32_t* table = tables + static_cast<std::size_t>(s) * mb;
    if (s >= S) {  // padding: a block at positions 0..n of a sequence that owns only the scratch block
      std::fill(table, table + mb, num_blocks_);
      for (int i = 0; i <= n_all; ++i, ++T) {
        tok[T] = i == 0 ? 0 : c_.mask_token_id;
        pos[T] = i, mask[T] = n_all, seq[T] = s, slots[T] = num_blocks_ * block_size_ + i;
        if (i > 0) rows[R++] = T;
      }
      continue;
    }
    const DraftItem& it = items[static_cast<std::size_t>(s)];
    if (it.n < 1 || it.n > max_draft())
      return error("drafter: " + std::to_string(it.n) + " proposals asked, 1.." + std::to_string(max_draft()) + " possible");
    if (it.anchor < 0 || it.anchor >= V_) return error("drafter: anchor token " + std::to_string(it.anchor) + " is outside the vocabulary");
    if (it.pos + it.n >= max_len_) return error("drafter: the block passes max-model-len");
    const std::size_t have = std::min(mb, it.block_table.size());
    std::copy(it.block_table.begin(), it.block_table.begin() + static_cast<long>(have), table);
    std::fill(table + have, table + mb, num_blocks_);
    first_row[static_cast<std::size_t>(s)] = R;
    for (int i = 0; i <= (graph ? n_all : it.n); ++i, ++T) {
      long sl = num_blocks_ * block_size_ + i;  // a padding token's: the scratch block
      if (i <= it.n && (sl = slot(it.block_table, it.pos + i, why)) < 0) return error("drafter: " + why);
      tok[T] = i == 0 ? it.anchor : c_.mask_token_id;
      pos[T] = it.pos + i, mask[T] = it.pos + it.n, seq[T] = s, slots[T] = static_cast<std::int32_t>(sl);
      if (i > 0) rows[R++] = T;
    }
    max_context = std::max(max_context, it.pos + it.n + 1);
  }
  const int real_rows = graph ? S * n_all : R;  // the items' rows (padding included) at the front
  FirstError err;
  // One copy of the staged inputs up to the last table where that span is small (each copy costs
  // microseconds of host time whatever its size, and a proposal is short), else one per field.
  const std::size_t span = offset(in_tables()) + static_cast<std::size_t>(B) * mb;
  if (span * 4 <= kOneUploadBytes) {
    upload(host, in_tok(), span, err);
  } else {
    for (std::int32_t* d : {in_tok(), in_pos(), in_mask(), in_seq(), in_slot()}) upload(host, d, static_cast<std::size_t>(T), err);
    upload(host, in_rows(), static_cast<std::size_t>(R), err);
    upload(host, in_tables(), static_cast<std::size_t>(B) * mb, err);
  }
  if (graph) {
    if (auto g = graphs_.find({B, n_all}); g != graphs_.end()) {
      err(TANDEM_CUDA_STATUS(cudaGraphLaunch(g->second, stream_), "drafter graph launch"));
    } else {
      // First proposal of this shape: eagerly (which plans its GEMMs), then captured for later ones.
      err(enqueue(T, R, max_context));
      if (err.ok()) err(capture(B, n_all));
    }
  } else {
    err(enqueue(T, R, max_context));
  }
  const std::span<const unsigned long long> got(keys_host_, static_cast<std::size_t>(real_rows));
  err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(keys_host_, argmax_keys_.get(), got.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                 stream_),
                 "draft tokens"));
  std::vector<float> logits;
  if (want_logits) {
    logits.resize(static_cast<std::size_t>(real_rows) * static_cast<std::size_t>(V_));
    err(TANDEM_CUDA_STATUS(cudaMemcpyAsync(logits.data(), logits_.get(), logits.size() * 4, cudaMemcpyDeviceToHost, stream_),
                   "draft logits"));
  }
  err(TANDEM_CUDA_STATUS(cudaStreamSynchronize(stream_), "drafter"));
  if (!err.ok()) return err.status.error().with_context("drafter");
  if (waited) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, ctx_begin_, ctx_end_) == cudaSuccess) out.context_seconds = 1e-3 * static_cast<double>(ms);
  }
  // Each item's n drafts, without the rows that padded its block.
  const std::size_t Vs = static_cast<std::size_t>(V_);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < items[static_cast<std::size_t>(s)].n; ++i) {
      const std::size_t r = static_cast<std::size_t>(first_row[static_cast<std::size_t>(s)] + i);
      out.tokens.push_back(k::argmax_key_index(got[r]));
      if (want_logits) out.logits.insert(out.logits.end(), logits.begin() + static_cast<long>(r * Vs), logits.begin() + static_cast<long>((r + 1) * Vs));
    }
  return out;
}

Status DFlashCuda::enqueue(int T, int R, int max_context) {
  if (mma_ && T >= kFusedFromRows && fused_fits(T)) return enqueue_fused(T, R, max_context);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd_)));
  FirstError err;
  mark("start");
  for (int l = 0; l < c_.num_hidden_layers && err.ok(); ++l) {
    const Layer& a = layers_[static_cast<std::size_t>(l)];
    if (l == 0) {
      err(kernels::embed_rmsnorm(target_.embedding_device(), V_, in_tok(), x_.as<float>(), a.in_norm.get(), h_.get(), T, H_, eps(),
                                 stream_));
      mark("embedding + add_rmsnorm");
    } else {
      err(kernels::add_rmsnorm(x_.as<float>(), delta_.get(), kBf16, a.in_norm.get(), h_.get(), T, H_, eps(), stream_));
      mark("add_rmsnorm");
    }
    err(qkv_rows(l, T, true));
    err(k::paged_attention_cuda(kBf16, q_.get(), T, in_seq(), in_mask(), nh_, layout(), k_pool(l), v_pool(l), in_tables(),
                                max_blocks_, scale, attn_.get(), max_context, attn_ws_.get(), attn_ws_.bytes(), stream_));
    mark("paged attention");
    err(gemm(linear(attn_.get(), qw_, a.o, delta_.get(), T, qw_, H_)));
    mark("o_proj (gemv)");
    err(kernels::add_rmsnorm(x_.as<float>(), delta_.get(), kBf16, a.post_norm.get(), h_.get(), T, H_, eps(), stream_));
    mark("add_rmsnorm");
    err(gate_up_silu(a.gate_up, T));
    mark("gate_up + silu (gemv)");
    err(gemm(linear(act_.get(), I_, a.down, delta_.get(), T, I_, H_)));
    mark("down (gemv)");
  }
  // The final norm of the R logit rows alone, gathered into head_in_.
  err(kernels::add_rmsnorm(x_.as<float>(), delta_.get(), kBf16, norm_.get(), head_in_.get(), R, H_, eps(), stream_, nullptr, in_rows()));
  mark("final norm of the logit rows");
  k::GemmArgs head;
  head.rows = R, head.in = H_, head.out = V_;
  head.x = head_in_.get(), head.ldx = H_, head.w = target_.lm_head_device(), head.ldw = H_;
  head.y = logits_.get(), head.ldy = V_, head.y_type = k::DType::f32;
  err(gemm(head));
  mark("lm_head (gemv)");
  // Greedy drafts (the sampled ones are drawn on the host from the logits): one argmax per row.
  err(k::argmax_rows_cuda(logits_.as<float>(), R, V_, argmax_keys_.as<unsigned long long>(), stream_));
  mark("argmax");
  return err.status;
}

bool DFlashCuda::fused_fits(int T) const {
  const Layer& a = layers_.front();
  k::RowsMma normed_probe = mma(nullptr, 0, a.gate_up.get(), act_.get(), T, H_, I_);
  normed_probe.x32 = x_.as<float>(), normed_probe.norm_w = a.post_norm.get();
  return k::rows_mma_fits(mma(h_.get(), H_, a.qkv.get(), qkv_.get(), T, H_, qkvw())) &&
         k::rows_mma_fits(mma(attn_.get(), qw_, a.o.get(), delta_.get(), T, qw_, H_)) &&
         k::rows_mma_fits(mma(act_.get(), I_, a.down.get(), delta_.get(), T, I_, H_)) && k::rows_mma_fits(normed_probe);
}

// long-function: the fused forward, one launch after another in the order of the unfused one.
Status DFlashCuda::enqueue_fused(int T, int R, int max_context) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd_)));
  FirstError err;
  cur_ = 0;
  mark("start");
  for (int l = 0; l < c_.num_hidden_layers && err.ok(); ++l) {
    const Layer& a = layers_[static_cast<std::size_t>(l)];
    k::RowsMma qkv = mma(h_.get(), H_, a.qkv.get(), qkv_.get(), T, H_, qkvw());
    if (l == 0) {
      // The embedding rows normalised in the product (embed_rmsnorm folded in), the residual kept.
      qkv.x = nullptr, qkv.ldx = 0;
      qkv.table = target_.embedding_device(), qkv.ids = in_tok(), qkv.vocab = V_;
      qkv.norm_w = a.in_norm.get(), qkv.eps = eps(), qkv.x32_out = res_[cur_]->as<float>();
      // The head's argmax keys start at zero: cleared by this launch, long before the head's.
      qkv.clear = argmax_keys_.as<unsigned long long>(), qkv.clear_words = R;
    } else {
      normed(qkv, a.in_norm, true);
    }
    err(product_and_heads(l, qkv, T, true, in_pos(), in_slot(),
                          l == 0 ? "embedding + rmsnorm + qkv (mma)" : "add_rmsnorm + qkv (mma)"));
    err(k::paged_attention_cuda(kBf16, q_.get(), T, in_seq(), in_mask(), nh_, layout(), k_pool(l), v_pool(l), in_tables(),
                                max_blocks_, scale, attn_.get(), max_context, attn_ws_.get(), attn_ws_.bytes(), stream_));
    mark("paged attention");
    err(k::rows_mma(mma(attn_.get(), qw_, a.o.get(), delta_.get(), T, qw_, H_), stream_));
    mark("o_proj (mma)");
    k::RowsMma gu = mma(nullptr, 0, a.gate_up.get(), act_.get(), T, H_, I_);
    gu.silu = true, gu.up_offset = I_;
    normed(gu, a.post_norm, true);
    err(k::rows_mma(gu, stream_));
    mark("add_rmsnorm + gate_up + silu (mma)");
    err(k::rows_mma(mma(act_.get(), I_, a.down.get(), delta_.get(), T, I_, H_), stream_));
    mark("down (mma)");
  }
  // The final norm of the R logit rows (picked), the target's head and each row's argmax, in one.
  k::RowsMma head = mma(nullptr, 0, target_.lm_head_device(), logits_.get(), R, H_, V_);
  head.y_type = k::DType::f32;
  normed(head, norm_, false);
  head.pick = in_rows();
  head.keys = argmax_keys_.as<unsigned long long>();
  err(k::rows_mma(head, stream_));
  mark("final norm + lm_head + argmax (mma)");
  return err.status;
}

Status DFlashCuda::capture(int B, int n) {
  // Attending up to max-model-len, so the graph serves every later context.
  auto exec = capture_graph(stream_, [&] { return enqueue(B * (n + 1), B * n, max_len_); },
                            "drafter graph of " + std::to_string(B) + " x " + std::to_string(n) + " drafts");
  if (!exec) return exec.error();
  graphs_[{B, n}] = exec.value();
  return {};
}

}  // namespace

tandem::Result<std::unique_ptr<DeviceDrafter>> load_dflash_cuda(const std::filesystem::path& drafter_dir, model::CudaModel& target,
                                                               const DFlashCudaOptions& options) {
  const auto where = drafter_dir.string();
  if (!target.embedding_device() || !target.lm_head_device())
    return error("drafter " + where + ": the target holds only a vocabulary slice (tensor parallel) and no whole embedding "
                 "and LM head for a drafter (CudaOptions::drafter_vocab)");
  auto c = read_dflash_config(drafter_dir, target.config());
  if (!c) return c.error();
  auto ck = model::Checkpoint::open(drafter_dir);
  if (!ck) return ck.error().with_context("drafter " + where);
  auto d = std::make_unique<DFlashCuda>(std::move(c).value(), target, options);
  if (auto e = d->load(ck.value()); !e) return e.error().with_context("drafter " + where + " on the GPU");
  return std::unique_ptr<DeviceDrafter>(std::move(d));
}

}  // namespace tandem::spec
