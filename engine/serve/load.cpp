#include "load.hpp"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "pool_plan.hpp"
#ifdef TANDEM_HAVE_CUDA_MODEL
#include "tandem/model/cuda_model.hpp"
#include "tandem/spec/dflash_cuda.hpp"
#endif
#include "rank_group.hpp"
#include "tandem/spec/device_drafter.hpp"
#include "tandem/spec/drafter.hpp"
#include "tandem/units.hpp"

namespace tandem::engine::serve {

namespace fs = std::filesystem;
using model::error;

namespace {

// What this build cannot do yet, refused before anything is loaded.
std::optional<std::string> unsupported(const ServeConfig& cfg) {
#ifdef TANDEM_HAVE_CUDA_MODEL
#else
  if (cfg.device == "cuda")
    return "`device` cuda: this tandem-serve was built without the CUDA back end (no nvcc at build time); run with "
           "`device` cpu (the CPU reference path)";
#endif
  if (cfg.tensor_parallel_size != cfg.nnodes)
    return "`tensor_parallel_size` " + std::to_string(cfg.tensor_parallel_size) + " with `nnodes` " + std::to_string(cfg.nnodes) +
           ": this build runs one rank per process, so start one tandem-serve per rank with `nnodes` equal to the "
           "tensor-parallel size and its own `node_rank`";
  return std::nullopt;
}

// The recurrent-state slots of a model with linear-attention layers: one per sequence, fp32.
std::uint64_t state_slot_bytes(const ServeConfig& cfg, const model::Model& m) {
  return static_cast<std::uint64_t>(cfg.max_num_seqs) * static_cast<std::uint64_t>(m.kv_layout().state_floats) * 4u;
}

// On the CPU device the utilization share is of system memory, which on a workstation is far more
// than max-num-seqs full-length sequences need; the pool is capped there so that starting a tiny
// model does not claim half the machine. An explicit --kv-cache-memory is taken as given.
tandem::Result<std::optional<std::uint64_t>> kv_budget(const ServeConfig& cfg, const model::Model& m, int max_model_len,
                                                      const std::function<void(const std::string&)>& log) {
  if (!cfg.kv_cache_memory.empty()) {
    ParseError pe;
    auto bytes = parse_size(cfg.kv_cache_memory, &pe);
    if (!bytes) return error("`kv_cache_memory` '" + cfg.kv_cache_memory + "': " + pe.what);
    return std::optional<std::uint64_t>(*bytes);
  }
#ifdef TANDEM_HAVE_CUDA_MODEL
  // On the GPU the pool takes everything the utilization share leaves after the weights, as in vLLM.
  if (cfg.device == "cuda") {
    auto share = model::cuda_kv_budget(0, cfg.gpu_memory_utilization);
    if (!share) return share.error();
    log("KV budget: " + format_size(share.value()) + " of device memory (`gpu_memory_utilization` " +
        std::to_string(cfg.gpu_memory_utilization) + ", weights and buffers already loaded)");
    // The budget is both pools' (the engine takes the recurrent-state slots out of it, as with
    // --kv-cache-memory), but the device model allocated its slots at load, so what is free now
    // already lacks them: they go back in, or they would be paid for twice.
    return std::optional<std::uint64_t>(share.value() + state_slot_bytes(cfg, m));
  }
#endif
  auto share = runtime::cpu_kv_budget(cfg.gpu_memory_utilization);
  if (!share) return share.error();
  auto elem = runtime::kv_bytes_per_elem(cfg.kv_cache_dtype, m.config().decoder().dtype);
  if (!elem) return elem.error();
  const auto l = m.kv_layout();
  const std::uint64_t per_token = static_cast<std::uint64_t>(l.n_layers) * static_cast<std::uint64_t>(l.row_width) *
                                  static_cast<std::uint64_t>(elem.value());
  const std::uint64_t tokens = static_cast<std::uint64_t>(cfg.max_num_seqs) * static_cast<std::uint64_t>(max_model_len) +
                               static_cast<std::uint64_t>(cfg.block_size) * static_cast<std::uint64_t>(cfg.max_num_seqs);
  // Plus the recurrent-state slots for models with linear-attention layers.
  const std::uint64_t need = per_token * tokens + state_slot_bytes(cfg, m);
  if (need < share.value())
    log("KV budget: " + format_size(need) + " (`max_num_seqs` " + std::to_string(cfg.max_num_seqs) + " x `max_model_len` " +
        std::to_string(max_model_len) + "), under the " + format_size(share.value()) + " that `gpu_memory_utilization` " +
        std::to_string(cfg.gpu_memory_utilization) + " allows of system memory");
  return std::optional<std::uint64_t>(std::min(need, share.value()));
}

#ifdef TANDEM_HAVE_CUDA_MODEL
// The device model's options from the flags (every rank of a group the same: the steps must match).
model::CudaOptions cuda_options(const ServeConfig& cfg, const nlohmann::json& spec_config) {
  model::CudaOptions o;
  o.kv_cache_dtype = cfg.kv_cache_dtype;
  o.max_num_seqs = cfg.max_num_seqs;
  o.max_num_batched_tokens = runtime::EngineConfig{}.max_num_batched_tokens;
  o.max_model_len = cfg.max_model_len;
  o.enforce_eager = cfg.enforce_eager;
  o.invariant_tokens = cfg.batch_invariant_tokens;
  o.reduction_groups = cfg.nnodes > 1 ? 1 : std::max(cfg.reduction_groups, 1);  // (a rank of a group: the group's, implied)
  // A verification asks for the logits of every token of its block (on every rank: workers run it).
  if (!spec_config.is_null())
    o.max_logit_rows = cfg.max_num_seqs * (1 + spec_config.at("num_speculative_tokens").get<int>());
  // The drafter runs on the head rank, over whole copies of the vocabulary weights.
  o.drafter_vocab = !spec_config.is_null() && cfg.nnodes > 1 && cfg.node_rank == 0;
  return o;
}
#endif

}  // namespace

tandem::Result<std::unique_ptr<model::Model>> load_worker_model(const ServeConfig& cfg, comm::Communicator& group) {
  if (auto why = unsupported(cfg)) return error(*why);
#ifdef TANDEM_HAVE_CUDA_MODEL
  if (cfg.device == "cuda") {
    // The head's speculative config sizes the verification steps this rank runs too.
    const auto spec = cfg.speculative_config.empty() ? nlohmann::json() : nlohmann::json::parse(cfg.speculative_config);
    auto m = model::load_cuda_model(cfg.model, cuda_options(cfg, spec), group);
    if (!m) return m.error();
    return std::unique_ptr<model::Model>(std::move(m).value());
  }
#endif
  return model::load_model(cfg.model, group);
}

namespace {

// The target model (and, on the GPU, its DFlash drafter: loaded before the KV budget is measured,
// so it counts as memory in use).
struct Target {
  std::unique_ptr<model::Model> model;
  std::shared_ptr<spec::DeviceDrafter> device_drafter;
  std::uint64_t kv_per_token = 0;  // the device model's KV bytes per token (0 on the CPU)
};

tandem::Result<Target> load_target([[maybe_unused]] const ServeConfig& cfg, const fs::path& dir,
                                   [[maybe_unused]] const nlohmann::json& spec_config, comm::TcpCommunicator& comm,
                                   StartupPhases& phases) {
  Target t;
#ifdef TANDEM_HAVE_CUDA_MODEL
  if (cfg.device == "cuda") {
    const model::CudaOptions o = cuda_options(cfg, spec_config);
    auto m = model::load_cuda_model(dir, o, comm);
    if (!m) return error("loading the model from " + dir.string() + " onto the GPU: " + m.error().message);
    phases.mark("weights_loaded", "target model onto the GPU");
    t.kv_per_token = m.value()->kv_bytes_per_token();
    if (!spec_config.is_null()) {
      spec::DFlashCudaOptions d;
      d.max_num_seqs = o.max_num_seqs;
      d.max_num_batched_tokens = o.max_num_batched_tokens;
      d.max_model_len = cfg.max_model_len;
      d.enforce_eager = cfg.enforce_eager;
      auto drafter = spec::load_dflash_cuda(spec_config.at("model").get<std::string>(), *m.value(), d);
      if (!drafter) return error("`speculative_config`: " + drafter.error().message);
      t.device_drafter = std::move(drafter).value();
      phases.mark("drafter_loaded", "DFlash drafter onto the GPU");
    }
    t.model = std::move(m).value();
    return t;
  }
#endif
  auto m = model::load_model(dir, comm);
  if (!m) return error("loading the model from " + dir.string() + ": " + m.error().message);
  t.model = std::move(m).value();
  phases.mark("weights_loaded", "target model into host memory");
  return t;
}

// The tokenizer, the chat template and the API options that come from the flags.
tandem::Status load_text_side(const ServeConfig& cfg, const fs::path& dir, const model::Model& model, Loaded& out,
                              const std::function<void(const std::string&)>& log) {
  auto tok = tokenizer::Tokenizer::load(dir / "tokenizer.json");
  if (!tok) return error("loading the tokenizer of " + dir.string() + ": " + tok.error().message);
  out.tokenizer = std::make_unique<tokenizer::Tokenizer>(std::move(tok).value());
  if (static_cast<int>(out.tokenizer->vocab_size()) > model.vocab_size())
    return error("the tokenizer of " + dir.string() + " has " + std::to_string(out.tokenizer->vocab_size()) +
                 " ids but the model's vocab_size is " + std::to_string(model.vocab_size()));
  if (!cfg.chat_template.empty()) {
    auto t = tmpl::ChatTemplate::from_file(cfg.chat_template);
    if (!t) return error("`chat_template` " + cfg.chat_template + ": " + t.error().text());
    // Special tokens (bos_token, eos_token) still come from the model's tokenizer_config.json.
    if (auto base = tmpl::ChatTemplate::from_model_dir(dir)) t.value().set_special_tokens(base.value().special_tokens());
    out.chat_template = std::make_unique<tmpl::ChatTemplate>(std::move(t.value()));
  } else if (auto t = tmpl::ChatTemplate::from_model_dir(dir)) {
    out.chat_template = std::make_unique<tmpl::ChatTemplate>(std::move(t.value()));
  } else if (tmpl::kind_of(t.error()) != tmpl::ErrorKind::io || t.error().message.rfind("no ", 0) != 0) {
    return error("the chat template of " + dir.string() + ": " + t.error().text());
  } else {
    log("note: " + dir.string() + " has no chat template (" + t.error().text() +
        "); /v1/chat/completions answers 400 until one is given with `chat_template`");
  }

  out.options.model_name = cfg.served_model_name.empty() ? cfg.model : cfg.served_model_name;
  out.options.reasoning_parser = cfg.reasoning_parser == "glm45";
  out.options.tool_parser = cfg.enable_auto_tool_choice && !cfg.tool_call_parser.empty();
  if (!cfg.default_chat_template_kwargs.empty())
    out.options.default_template_kwargs = nlohmann::ordered_json::parse(cfg.default_chat_template_kwargs);

  return Ok{};
}

// The engine's limits and the KV budget (split with the device drafter's context rows).
tandem::Result<runtime::EngineConfig> engine_config(const ServeConfig& cfg, const model::Model& model, const Target& t,
                                                    const std::function<void(const std::string&)>& log) {
  runtime::EngineConfig ec;
  const int model_max = model.config().decoder().max_position_embeddings;
  ec.max_model_len = cfg.max_model_len > 0 ? cfg.max_model_len : model_max;
  if (ec.max_model_len > model_max && model_max > 0)
    return error("`max_model_len` " + std::to_string(ec.max_model_len) + " is more than the model's max_position_embeddings " +
                 std::to_string(model_max));
  ec.max_num_seqs = cfg.max_num_seqs;
  ec.block_size = cfg.block_size;
  ec.enable_prefix_caching = cfg.enable_prefix_caching;
  ec.prefix_state_copies = cfg.prefix_state_copies;
  // The CUDA pool stores bf16 unless fp8 is asked for, whatever the checkpoint's dtype.
  const bool fp8 = cfg.kv_cache_dtype.rfind("fp8", 0) == 0;
  ec.kv_cache_dtype = model.kv_on_device() && !fp8 ? "bfloat16" : cfg.kv_cache_dtype;
  // ... except a model whose device pool keeps fp32 rows (glm5_next's DSA pool in this version):
  // the pool is sized at the bytes the model really stores per token.
  if (const auto l = model.kv_layout(); model.kv_on_device() && !fp8 && l.n_layers > 0 && l.row_width > 0 &&
                                        t.kv_per_token == std::uint64_t{4} * static_cast<std::uint64_t>(l.n_layers) *
                                                              static_cast<std::uint64_t>(l.row_width))
    ec.kv_cache_dtype = "float32";
  ec.gpu_memory_utilization = cfg.gpu_memory_utilization;
  auto budget = kv_budget(cfg, model, ec.max_model_len, log);
  if (!budget) return error("sizing the KV pool: " + budget.error().message);
  ec.kv_cache_memory = budget.value();
  if (t.device_drafter && ec.kv_cache_memory && t.kv_per_token > 0) {
    // The drafter's context rows take the same blocks: what the budget holds beyond the recurrent
    // state slots (which the engine takes out of it whole) is split between both pools.
    const double share = static_cast<double>(t.kv_per_token) /
                         static_cast<double>(t.kv_per_token + t.device_drafter->context_bytes_per_token());
    const std::uint64_t slots = state_slot_bytes(cfg, model);
    if (*ec.kv_cache_memory > slots)
      ec.kv_cache_memory = slots + static_cast<std::uint64_t>(static_cast<double>(*ec.kv_cache_memory - slots) * share);
  }
  return ec;
}

}  // namespace

tandem::Result<std::int64_t> own_kv_blocks(const ServeConfig& cfg, const model::Model& model,
                                          const std::function<void(const std::string&)>& log) {
  Target t;  // no drafter: a worker's budget is all KV rows
#ifdef TANDEM_HAVE_CUDA_MODEL
  if (const auto* cuda = dynamic_cast<const model::CudaModel*>(&model)) t.kv_per_token = cuda->kv_bytes_per_token();
#endif
  auto ec = engine_config(cfg, model, t, log);
  if (!ec) return ec.error();
  return runtime::pool_blocks(model, ec.value());
}

namespace {

// The DFlash drafter's part of the engine config: the device one loaded with the target, or the
// CPU one loaded now (after the tokenizer, template and KV budget).
tandem::Status attach_drafter(const nlohmann::json& spec_config, const fs::path& dir, const Target& t,
                              runtime::EngineConfig& ec, StartupPhases& phases,
                              const std::function<void(const std::string&)>& log) {
  const auto& device_drafter = t.device_drafter;
  const model::Model& model = *t.model;
  const fs::path drafter_dir = spec_config.at("model").get<std::string>();
  if (device_drafter) {
    ec.device_drafter = device_drafter;
  } else {
    auto drafter = spec::load_dflash(drafter_dir, dir, model.config());
    if (!drafter) return error("`speculative_config`: " + drafter.error().message);
    ec.drafter = std::move(drafter).value();
    phases.mark("drafter_loaded", "DFlash drafter into host memory (tokenizer, template and KV budget before it)");
  }
  ec.num_speculative_tokens = spec_config.at("num_speculative_tokens").get<int>();
  const std::vector<int>& layers = device_drafter ? device_drafter->target_layers() : ec.drafter->target_layers();
  const int max_draft = device_drafter ? device_drafter->max_draft() : ec.drafter->max_draft();
  log("DFlash drafter " + drafter_dir.string() + (device_drafter ? " (on the GPU)" : " (on the CPU)") + ": reads target layers " + [&] {
    std::string s;
    for (int l : layers) s += (s.empty() ? "" : ",") + std::to_string(l);
    return s;
  }() + ", drafts up to " + std::to_string(ec.num_speculative_tokens) + " of " + std::to_string(max_draft) +
      " per step (fewer per request when its acceptance is low)");
  return Ok{};
}

}  // namespace

tandem::Result<Loaded> load(const ServeConfig& cfg, const std::function<void(const std::string&)>& log,
                           std::function<void(const std::string&)> on_fatal) {
  if (auto why = unsupported(cfg)) return error(*why);
  const fs::path dir = cfg.model;
  Loaded out;
  out.startup = std::make_shared<StartupPhases>();
  StartupPhases& phases = *out.startup;

  auto group = make_rank_group(cfg, dir, log);
  if (!group) return group.error();
  comm::TcpCommunicator& comm = *group.value();
  out.group = std::move(group).value();
  // serve_flags checked the shape: {"method":"dflash","model":DIR,"num_speculative_tokens":N}.
  const auto spec_config = cfg.speculative_config.empty() ? nlohmann::json() : nlohmann::json::parse(cfg.speculative_config);
  auto target = load_target(cfg, dir, spec_config, comm, phases);
  if (!target) return target.error();
  Target& t = target.value();
  if (cfg.device == "cuda" && cfg.nnodes == 1 && cfg.reduction_groups > 1)
    log("reduction groups: each layer summed as " + std::to_string(cfg.reduction_groups) +
        " tensor-parallel ranks sum it (each rank's slice apart, added in rank order): greedy output equals TP" +
        std::to_string(cfg.reduction_groups) + "'s bit for bit");
  if (auto s = load_text_side(cfg, dir, *t.model, out, log); !s) return s.error();
  auto config = engine_config(cfg, *t.model, t, log);
  if (!config) return config.error();
  runtime::EngineConfig& ec = config.value();
  ec.log = log;
  ec.on_fatal = std::move(on_fatal);
  if (!spec_config.is_null()) {
    if (auto s = attach_drafter(spec_config, dir, t, ec, phases, log); !s) return s.error();
  } else {
    phases.note("drafter_loaded", "n/a", "no --speculative-config");
  }
  if (auto s = comm.rendezvous(); !s) return error(s.error().message);  // a group of one: at once
  auto wired = wire_device_all_reduce(comm, *t.model, log);
  if (!wired) return wired.error();
  out.device_all_reduce = std::move(wired).value();
  if (cfg.nnodes > 1) phases.mark("ranks_met", std::to_string(cfg.nnodes) + " ranks at the rendezvous");
  auto engine = runtime::Engine::start(std::move(t.model), ec);
  if (!engine) return error("starting the engine: " + engine.error().message);
  out.engine = std::move(engine).value();
  phases.mark("kv_pool_sized", ec.kv_cache_memory ? format_size(*ec.kv_cache_memory) + " budget" : std::string("engine default"));
  // The CUDA decoder captures one graph per batch bucket at that bucket's first decode step, not here.
  if (cfg.device != "cuda") phases.note("graphs_captured", "n/a", "CPU device: no CUDA graphs");
  else if (cfg.enforce_eager) phases.note("graphs_captured", "n/a", "--enforce-eager");
  else phases.note("graphs_captured", "deferred", "captured per batch bucket at its first decode step");
  out.options.startup = out.startup;
  return out;
}

}  // namespace tandem::engine::serve
