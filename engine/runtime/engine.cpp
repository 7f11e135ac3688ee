// Engine lifecycle, submission, cancellation and metrics. The worker's step is engine_step.cpp.
#include "kv_agreement.hpp"
#include "engine.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <utility>

#include "hybrid_pool.hpp"
#include "pool_plan.hpp"
#include "rank_messages.hpp"
#include "request_state.hpp"

namespace tandem::engine::runtime {

using model::error;

namespace {

using LogFn = std::function<void(const std::string&)>;

// max_model_len defaults to the model's context and may not exceed it; the batch limits are >= 1.
tandem::Status check_lengths(const model::DecoderConfig& d, EngineConfig& cfg) {
  if (cfg.max_model_len == 0) cfg.max_model_len = d.max_position_embeddings;
  if (cfg.max_model_len <= 1) return error("`max_model_len` must be at least 2, got " + std::to_string(cfg.max_model_len));
  if (d.max_position_embeddings > 0 && cfg.max_model_len > d.max_position_embeddings)
    return error("`max_model_len` " + std::to_string(cfg.max_model_len) + " exceeds the model's max_position_embeddings " +
                 std::to_string(d.max_position_embeddings));
  if (cfg.max_num_seqs < 1) return error("`max_num_seqs` must be at least 1");
  if (cfg.max_num_batched_tokens < 1) return error("`max_num_batched_tokens` must be at least 1");
  return Ok{};
}

// Prefix caching of a recurrent model keeps copies of the state (kv/state_snapshots.hpp): decides
// how many (cfg.prefix_state_copies, 0 turning prefix caching off, with the reason in `lines`)
// and returns their bytes, which come out of `left`, the budget after the sequences' own states.
tandem::Result<std::uint64_t> recurrent_prefix_copies(const model::Model& model, EngineConfig& cfg, std::uint64_t left,
                                                      std::vector<std::string>& lines) {
  const auto off = [&](const std::string& why) -> tandem::Result<std::uint64_t> {
    if (cfg.enable_prefix_caching) lines.push_back("prefix caching is off: " + why);
    cfg.enable_prefix_caching = false;
    cfg.prefix_state_copies = 0;
    return std::uint64_t{0};
  };
  if (cfg.prefix_state_copies < -1)
    return error("`prefix_state_copies` " + std::to_string(cfg.prefix_state_copies) + ": give a count >= 0, or -1 for the default");
  if (!cfg.enable_prefix_caching) return off("");
  if (cfg.prefix_state_copies == 0) return off("no copies of this model's recurrent state are kept (`prefix_state_copies` 0)");
  if (model.kv_on_device() && !model.snapshots_states())
    return off("this device model cannot keep copies of its recurrent state, without which a hit has no state to resume from");
  const std::uint64_t each = static_cast<std::uint64_t>(model.kv_layout().state_floats) * 4u;  // fp32, as the slots
  std::uint64_t n = cfg.prefix_state_copies > 0
                        ? static_cast<std::uint64_t>(cfg.prefix_state_copies)
                        : std::min({static_cast<std::uint64_t>(cfg.max_num_seqs), std::uint64_t{8}, left / 8 / each});
  if (n * each >= left)
    return error("`prefix_state_copies` " + std::to_string(n) + " copies of the recurrent state need " + std::to_string(n * each) +
                 " bytes, all that the KV budget leaves (" + std::to_string(left) + "); give fewer");
  if (n == 0)
    return off("a copy of this model's recurrent state (" + std::to_string(each >> 10) +
               " KiB) takes more than an eighth of the KV budget (`prefix_state_copies` asks for a number)");
  cfg.prefix_state_copies = static_cast<int>(n);
  lines.push_back("prefix caching of the recurrent state: " + std::to_string(n) + " copies of " + std::to_string(each >> 10) +
                  " KiB, each taken at a prompt's last block boundary (a hit resumes from the longest kept one) = " +
                  std::to_string((n * each) >> 20) + " MiB, out of the KV budget");
  return n * each;
}

// A model with recurrent layers: its per-sequence state slots come out of the budget first, and
// the paged pool (attention rows only) gets the rest; no page size has to fit both. Narrows
// flags.kv_cache_memory, may turn prefix caching off, and appends the start-up lines to `lines`.
tandem::Status reserve_recurrent_states(const model::Model& model, EngineConfig& cfg, PoolFlags& flags,
                                       std::vector<std::string>& lines) {
  HybridPoolInputs in;
  in.layout = model.kv_layout();
  if (const auto* g = std::get_if<model::Glm5NextConfig>(&model.config().arch))
    in.recurrent_layers = static_cast<int>(std::count(g->layer_is_linear.begin(), g->layer_is_linear.end(), true));
  auto elem = kv_bytes_per_elem(cfg.kv_cache_dtype, model.config().decoder().dtype);
  if (!elem) return elem.error();
  in.bytes_per_elem = elem.value();
  in.block_size = cfg.block_size;
  in.max_num_seqs = cfg.max_num_seqs;
  if (cfg.kv_cache_memory) {
    in.budget_bytes = *cfg.kv_cache_memory;
  } else {
    auto b = cpu_kv_budget(cfg.gpu_memory_utilization);
    if (!b) return b.error();
    in.budget_bytes = b.value();
  }
  const HybridPoolReport report = hybrid_pool_report(in);
  if (report.state_pool_bytes >= in.budget_bytes)
    return error("the recurrent state of `max_num_seqs` " + std::to_string(cfg.max_num_seqs) + " sequences needs " +
                 std::to_string(report.state_pool_bytes) + " bytes, the whole KV budget of " + std::to_string(in.budget_bytes) +
                 "; lower `max_num_seqs` or raise `kv_cache_memory`");
  flags.kv_cache_memory = in.budget_bytes - report.state_pool_bytes;
  lines.insert(lines.end(), report.lines.begin(), report.lines.end());
  const auto copies = recurrent_prefix_copies(model, cfg, flags.kv_cache_memory.value_or(0), lines);
  if (!copies) return copies.error();
  *flags.kv_cache_memory -= copies.value();
  return Ok{};
}

// The pool's geometry under the config's flags (and a hybrid model's state reservation).
tandem::Result<kv::PoolSize> size_pool(const model::Model& model, EngineConfig& cfg, std::vector<std::string>& lines) {
  PoolFlags flags;
  flags.kv_cache_dtype = cfg.kv_cache_dtype;
  flags.model_dtype = model.config().decoder().dtype;
  flags.kv_cache_memory = cfg.kv_cache_memory;
  flags.gpu_memory_utilization = cfg.gpu_memory_utilization;
  flags.block_size = cfg.block_size;
  flags.max_model_len = cfg.max_model_len;
  if (model.kv_layout().state_floats > 0)
    if (auto s = reserve_recurrent_states(model, cfg, flags, lines); !s) return s.error();
  return plan_pool(model.kv_layout(), flags);
}

// A CPU drafter goes with a CPU pool, a device drafter with a device pool; never both; a device
// drafter on a recurrent model needs state restore; num_speculative_tokens within the drafter's reach.
tandem::Status check_drafters(const model::Model& model, const EngineConfig& cfg) {
  if (cfg.drafter && model.kv_on_device())
    return error("a drafter on the CPU cannot serve a model whose KV cache is on its device: give a device drafter "
                 "(EngineConfig::device_drafter)");
  if (cfg.device_drafter && !model.kv_on_device())
    return error("a device drafter needs a model whose KV cache is on that device (`device` cuda)");
  if (cfg.drafter && cfg.device_drafter) return error("engine: a CPU drafter and a device drafter were both given");
  if (cfg.device_drafter && model.kv_layout().state_floats > 0 && !model.restores_states())
    return error("speculative decoding on the device of a model with recurrent layers (" + model.config().model_type +
                 "): this model cannot keep and restore its recurrent states, so rejected drafts could not be rolled out of them");
  return Ok{};
}

// The target's KV pool: on the device for a device model (null here), else fp32 rows on the CPU.
// Honest note: the pool is sized at the element size --kv-cache-dtype names (2 bytes for
// bfloat16, 1 for fp8_e4m3), as the CUDA back end will store it, but the CPU reference keeps
// its rows in fp32, so it holds 4 / that many times the bytes the line reports. Untouched pages
// of the pool are never committed, which keeps a generous budget cheap in practice.
tandem::Result<std::unique_ptr<model::PagedKvPool>> make_pool(model::Model& model, const EngineConfig& cfg,
                                                             const kv::PoolSize& size,
                                                             const std::vector<std::string>& lines, const LogFn& log) {
  std::unique_ptr<model::PagedKvPool> pool;
  if (model.kv_on_device()) {
    // The CUDA back end keeps the pool on its device, at the element size the line reports.
    if (auto s = model.make_device_pool(static_cast<std::int32_t>(size.num_blocks), cfg.block_size); !s) return s.error();
    if (model.kv_layout().state_floats > 0 && cfg.prefix_state_copies > 0)
      if (auto s = model.make_state_snapshots(cfg.prefix_state_copies); !s)
        return error("the kept recurrent states for prefix caching: " + s.error().message);
  } else {
    auto p = model::PagedKvPool::create(model.kv_layout(), static_cast<std::int32_t>(size.num_blocks), cfg.block_size);
    if (!p) return p.error();
    pool = std::move(p).value();
  }
  log(size.describe());
  for (const auto& line : lines) log(line);
  if (pool)
    log("KV pool storage: fp32 rows on the CPU, " + std::to_string(pool->bytes() >> 20) +
        " MiB (sized at `kv_cache_dtype` " + cfg.kv_cache_dtype + ")");
  else
    log("KV pool storage: on the device, " + cfg.kv_cache_dtype + " rows");
  return pool;
}

// The drafter's context rows, in the same blocks as the target's KV: on the device (inside the
// device drafter; null here) or a CPU pool of its own. Null without a drafter.
tandem::Result<std::unique_ptr<model::PagedKvPool>> make_draft_pool(const EngineConfig& cfg, const kv::PoolSize& size,
                                                                   const LogFn& log) {
  if (!cfg.drafter && !cfg.device_drafter) return std::unique_ptr<model::PagedKvPool>();
  const int max_draft = cfg.drafter ? cfg.drafter->max_draft() : cfg.device_drafter->max_draft();
  if (cfg.num_speculative_tokens < 1 || cfg.num_speculative_tokens > max_draft)
    return error("num_speculative_tokens " + std::to_string(cfg.num_speculative_tokens) + ": this drafter proposes 1.." +
                 std::to_string(max_draft) + " tokens per step");
  const auto blocks = static_cast<std::int32_t>(size.num_blocks);
  if (cfg.device_drafter) {
    if (auto s = cfg.device_drafter->make_pool(blocks, cfg.block_size); !s)
      return error("the drafter's context pool: " + s.error().message);
    // Beside the KV budget, not out of it (for a drafter of a few layers it is a few percent).
    const auto rows = static_cast<std::uint64_t>(size.num_blocks) * static_cast<std::uint64_t>(cfg.block_size);
    log("speculative decoding on the device: up to " + std::to_string(cfg.num_speculative_tokens) +
        " drafted tokens per step; drafter context rows " +
        std::to_string((cfg.device_drafter->context_bytes_per_token() * rows) >> 20) +
        " MiB on the device, in the same blocks as the target's KV");
    return std::unique_ptr<model::PagedKvPool>();
  }
  auto dp = model::PagedKvPool::create(cfg.drafter->context_layout(), blocks, cfg.block_size);
  if (!dp) return error("the drafter's context pool: " + dp.error().message);
  log("speculative decoding: up to " + std::to_string(cfg.num_speculative_tokens) + " drafted tokens per step; drafter context rows " +
      std::to_string(dp.value()->bytes() >> 20) + " MiB, in the same blocks as the target's KV");
  return std::move(dp).value();
}

// Worker ranks mirror this pool: same tables, their own heads' rows; the message carries rank 0's
// own count (its flags' share; a worker without flags of its own takes it), agreed on next.
tandem::Status announce_pool(model::Model& model, const EngineConfig& cfg, const kv::PoolSize& size) {
  RankMessage m;
  m.op = RankOp::pool;
  m.num_blocks = static_cast<std::int32_t>(size.num_blocks);
  m.block_size = cfg.block_size;
  if (model.kv_layout().state_floats > 0) m.state_snapshots = cfg.prefix_state_copies;
  auto bytes = encode(m);
  if (auto s = model.comm().broadcast(bytes, cfg.heartbeat); !s) return error("telling the worker ranks the KV pool: " + s.error().message);
  return Ok{};
}

}  // namespace

Result<std::int64_t> pool_blocks(const model::Model& model, EngineConfig cfg) {
  if (auto s = check_lengths(model.config().decoder(), cfg); !s) return s.error();
  std::vector<std::string> lines;
  auto size = size_pool(model, cfg, lines);
  if (!size) return size.error();
  return size->num_blocks;
}

Result<std::unique_ptr<Engine>> Engine::start(std::unique_ptr<model::Model> model, EngineConfig cfg) {
  if (!model) return error("engine: no model");
  if (auto s = check_lengths(model->config().decoder(), cfg); !s) return s.error();
  std::vector<std::string> hybrid_lines;
  auto size = size_pool(*model, cfg, hybrid_lines);
  if (!size) return size.error();
  const LogFn log = cfg.log ? cfg.log : [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (auto s = check_drafters(*model, cfg); !s) return s.error();
  if (model->comm().size() > 1) {
    // The worker ranks size their own pools from their own flags; the group takes the smallest.
    if (auto s = announce_pool(*model, cfg, *size); !s) return s.error();
    auto agreed = agree_kv_blocks(model->comm(), size->num_blocks, log);
    if (!agreed) return agreed.error();
    size->num_blocks = agreed.value();
    size->tokens = size->num_blocks * cfg.block_size;
    if (size->max_model_len > 0) size->requests_at_max_len = static_cast<double>(size->tokens) / size->max_model_len;
  }
  auto pool = make_pool(*model, cfg, *size, hybrid_lines, log);
  if (!pool) return pool.error();
  auto draft_pool = make_draft_pool(cfg, *size, log);
  if (!draft_pool) return draft_pool.error();

  sched::SchedulerConfig sc;
  sc.max_num_seqs = cfg.max_num_seqs;
  sc.max_batched_tokens = cfg.max_num_batched_tokens;
  sc.max_model_len = cfg.max_model_len;
  return std::unique_ptr<Engine>(
      new Engine(std::move(model), std::move(pool).value(), std::move(draft_pool).value(), size.value(), sc, cfg));
}

Engine::Engine(std::unique_ptr<model::Model> model, std::unique_ptr<model::PagedKvPool> pool,
               std::unique_ptr<model::PagedKvPool> draft_pool, kv::PoolSize size, sched::SchedulerConfig sched_cfg,
               const EngineConfig& cfg)
    : model_(std::move(model)),
      pool_(std::move(pool)),
      draft_pool_(std::move(draft_pool)),
      drafter_(draft_pool_ ? cfg.drafter : nullptr),
      device_drafter_(cfg.device_drafter),
      num_spec_(draft_pool_ || cfg.device_drafter ? cfg.num_speculative_tokens : 0),
      draft_policy_(cfg.draft_policy),
      step_cost_(num_spec_ + 1),
      draft_prior_(num_spec_, cfg.draft_policy),
      pool_size_(size),
      sched_cfg_(sched_cfg),
      eos_ids_(model_->config().decoder().eos_token_ids),
      tp_(model_->comm().size() > 1),
      on_fatal_(cfg.on_fatal),
      heartbeat_(cfg.heartbeat),
      // A device model keeps each running sequence's recurrent state in a slot of its own
      // (max_num_seqs of them, allocated at load), as do a CPU group's workers (on the head the
      // state stays with the request); the KV manager hands the slots out with admission.
      kv_(static_cast<std::int32_t>(size.num_blocks), cfg.block_size, cfg.enable_prefix_caching,
          (model_->kv_on_device() || tp_) && model_->kv_layout().state_floats > 0 ? sched_cfg.max_num_seqs : 0,
          model_->kv_layout().state_floats > 0 ? cfg.prefix_state_copies : -1),
      sched_(sched_cfg, kv_) {
  counters_.kv_blocks_total = kv_.total_blocks();
  counters_.spec_drafted_at.assign(static_cast<size_t>(num_spec_), 0);
  counters_.spec_chosen_length.assign(static_cast<size_t>(num_spec_) + 1, 0);
  counters_.spec_accepted_at.assign(static_cast<size_t>(num_spec_), 0);
  worker_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
  if (tp_ && fatal_.empty()) {
    RankMessage m;
    m.op = RankOp::shutdown;
    m.reason = "the head engine stopped";
    auto bytes = encode(m);
    (void)model_->comm().broadcast(bytes, heartbeat_);  // best effort: workers also notice the closed link
  }
  // Whoever is still waiting on a request hears that it ended.
  for (auto& [id, r] : requests_) {
    sched_.abort(id);
    TokenEvent e{id, std::nullopt, 0.0f, FinishReason::abort, "the engine stopped"};
    if (r->req.on_event) r->req.on_event(e);
  }
  for (auto& p : pending_)
    if (p.req->req.on_event) p.req->req.on_event(p.event);
}

Result<RequestId> Engine::submit(GenerateRequest r) {
  const int V = model_->vocab_size();
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= V)
      return error("prompt token " + std::to_string(r.prompt[i]) + " at index " + std::to_string(i) +
                   " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (auto bad = kernels::check_sampling_params(r.sampling); !bad) return bad.error();

  auto state = std::make_shared<RequestState>();
  state->submitted = std::chrono::steady_clock::now();
  state->stop.insert(r.stop_token_ids.begin(), r.stop_token_ids.end());
  if (!r.ignore_eos) state->stop.insert(eos_ids_.begin(), eos_ids_.end());
  state->rng.seed(r.seed ? *r.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}());

  std::lock_guard lk(mu_);
  if (!fatal_.empty()) return error("the engine has stopped: " + fatal_);
  // A new request starts from what drafting has been worth to the requests before it.
  if (drafting()) state->draft_len.emplace(draft_prior_.fresh());
  const RequestId id = next_id_;
  sched::Request sr;
  sr.id = id;
  sr.prompt = r.prompt;
  sr.max_tokens = r.max_tokens;
  sr.use_prefix_cache = r.use_prefix_cache;
  if (auto why = sched_.add(std::move(sr))) return error("request refused: " + *why);
  ++next_id_;
  counters_.prompt_tokens += static_cast<std::int64_t>(r.prompt.size());
  state->id = id;
  state->req = std::move(r);
  requests_.emplace(id, std::move(state));
  wake_.notify_one();
  return id;
}

bool Engine::cancel(RequestId id) {
  std::lock_guard lk(mu_);
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  sched_.abort(id);  // frees its blocks now; a step in flight skips it when it completes
  pending_.push_back({it->second, TokenEvent{id, std::nullopt, 0.0f, FinishReason::abort, ""}});
  requests_.erase(it);
  ++counters_.requests_aborted;
  wake_.notify_one();
  return true;
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lk(mu_);
  EngineMetrics m = counters_;
  m.requests_running = static_cast<std::int64_t>(sched_.num_running());
  m.requests_waiting = static_cast<std::int64_t>(sched_.num_waiting());
  m.kv_blocks_total = kv_.total_blocks();
  m.kv_blocks_used = kv_.total_blocks() - kv_.free_blocks();
  m.preemptions = sched_.preemptions();
  if (drafting()) {
    m.spec_step_cost_seconds.assign(static_cast<size_t>(num_spec_) + 2, 0.0);
    for (int n = 1; n <= num_spec_ + 1; ++n) m.spec_step_cost_seconds[static_cast<size_t>(n)] = step_cost_.step(n).value_or(0.0);
    for (int p = 0; p < num_spec_; ++p) m.spec_position_rate.push_back(draft_prior_.estimate(p));
  }
  return m;
}

void Engine::loop() {
  std::unique_lock lk(mu_);
  const auto has_work = [&] { return stop_ || !pending_.empty() || sched_.num_waiting() + sched_.num_running() > 0; };
  while (true) {
    if (tp_ && fatal_.empty()) {
      if (!wake_.wait_for(lk, heartbeat_, has_work)) {
        // Idle: tell the workers we are alive (they give up on a silent head).
        auto bytes = encode(RankMessage{});
        lk.unlock();
        auto s = model_->comm().broadcast(bytes, heartbeat_);
        lk.lock();
        if (!s) go_fatal(s.error().message);
        continue;
      }
    } else {
      wake_.wait(lk, has_work);
    }
    if (stop_) return;
    if (!pending_.empty()) deliver(lk, std::exchange(pending_, {}));
    if (sched_.num_waiting() + sched_.num_running() == 0) continue;
    if (!step(lk)) fail_all("the scheduler can fit no request into the KV pool");
  }
}

void Engine::deliver(std::unique_lock<std::mutex>& lk, std::vector<PendingEvent> events) {
  lk.unlock();
  for (auto& p : events)
    if (p.req->req.on_event) p.req->req.on_event(p.event);
  lk.lock();
}

void Engine::go_fatal(const std::string& why) {
  if (!fatal_.empty()) return;
  fatal_ = why;
  fail_all("the engine stopped: " + why);
  if (on_fatal_) on_fatal_(why);
}

void Engine::fail_all(const std::string& why) {
  std::vector<PendingEvent> events;
  for (auto it = requests_.begin(); it != requests_.end();) {
    sched_.abort(it->first);
    events.push_back({it->second, TokenEvent{it->first, std::nullopt, 0.0f, FinishReason::abort, why}});
    ++counters_.requests_aborted;
    it = requests_.erase(it);
  }
  pending_.insert(pending_.end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
}

}  // namespace tandem::engine::runtime
