// Plain decoding vs DFlash on the engine, per prompt class, for a target/drafter pair and the
// reference.json that tools/train/train_pair.py wrote (held-out prose / code / JSON prompts with the
// PyTorch reference's greedy outputs and acceptance lengths). Prints one Markdown table row per class
// and batch size: tokens, tok/s plain and DFlash, mean acceptance length (ours and the reference's),
// whether DFlash output equals plain output, and whether plain output equals the reference's.
//
//   tandem_spec_bench TARGET_DIR DRAFTER_DIR REFERENCE_JSON [--batch N]... [--k N] [--max-tokens N]
//                     [--fixed-k | --both] [--device cpu|cuda] [--repeat N] [--probe]
// --fixed-k drafts k tokens every step (the reference's way, so acceptance lengths compare);
// without it each request's draft length adapts to its acceptance (the serving default); --both
// runs both. --device cuda runs target and drafter on the GPU (spec_costs.cpp adds --probe: the
// costs of one decode, one proposal and one verification, and the speedup bound they give); every
// engine first runs the prompts once untimed (CUDA graphs, GEMM plans), then --repeat times timed.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine.hpp"
#ifdef TANDEM_HAVE_CUDA_MODEL
#include "spec_costs.hpp"
#include "tandem/model/cuda_model.hpp"
#include "tandem/spec/dflash_cuda.hpp"
#endif

using namespace tandem;
using namespace tandem::engine::runtime;

namespace {

struct Prompt {
  std::string kind;
  std::vector<std::int32_t> ids, reference;
  std::vector<int> ref_lengths;
};

struct Outcome {
  std::vector<std::vector<std::int32_t>> tokens;  // per prompt
  double seconds = 0;
  EngineMetrics metrics;
};

struct Setup {
  std::string target, drafter_dir;
  std::shared_ptr<const spec::Drafter> cpu_drafter;  // --device cpu
  bool cuda = false;
  int k = 7;
};

// An engine with the target alone (k = 0) or with the drafter drafting up to k (fixed or adaptive).
std::unique_ptr<Engine> start(const Setup& s, int k, int seqs, bool fixed_k) {
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.max_num_seqs = seqs;
  cfg.kv_cache_memory = 256ull << 20;
  cfg.log = [](const std::string&) {};
  cfg.num_speculative_tokens = k;
  if (fixed_k) {  // always the full k, as the reference drafts
    cfg.draft_policy.min_chance = 0.0;
    cfg.draft_policy.use_cost = false;
  }
  std::unique_ptr<model::Model> target;
  if (s.cuda) {
#ifdef TANDEM_HAVE_CUDA_MODEL
    model::CudaOptions o;
    o.max_num_seqs = seqs;
    o.max_num_batched_tokens = cfg.max_num_batched_tokens;
    o.max_model_len = cfg.max_model_len;
    o.max_logit_rows = seqs * (1 + s.k);
    auto m = model::load_cuda_model(s.target, o);
    if (!m) throw std::runtime_error(m.error().message);
    if (k > 0) {
      spec::DFlashCudaOptions d;
      d.max_num_seqs = seqs;
      d.max_num_batched_tokens = cfg.max_num_batched_tokens;
      d.max_model_len = cfg.max_model_len;
      auto drafter = spec::load_dflash_cuda(s.drafter_dir, *m.value(), d);
      if (!drafter) throw std::runtime_error(drafter.error().message);
      cfg.device_drafter = std::move(drafter).value();
    }
    target = std::move(m).value();
#else
    throw std::runtime_error("--device cuda: this build has no CUDA back end");
#endif
  } else {
    auto m = model::load_model(s.target);
    if (!m) throw std::runtime_error(m.error().message);
    target = std::move(m).value();
    if (k > 0) cfg.drafter = s.cpu_drafter;
  }
  if (k == 0) cfg.num_speculative_tokens = 0;
  auto e = Engine::start(std::move(target), cfg);
  if (!e) throw std::runtime_error(e.error().message);
  return std::move(e).value();
}

// Runs the prompts `batch` at a time (each group concurrently in the engine).
Outcome run(Engine& e, const std::vector<Prompt>& prompts, int batch, int max_tokens) {
  Outcome o;
  o.tokens.resize(prompts.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(batch)) {
    std::mutex mu;
    std::condition_variable cv;
    size_t open = 0;
    for (size_t i = first; i < std::min(prompts.size(), first + static_cast<size_t>(batch)); ++i, ++open) {
      GenerateRequest r;
      r.prompt = prompts[i].ids;
      r.max_tokens = max_tokens;
      r.ignore_eos = true;
      r.sampling.temperature = 0.0f;  // greedy: DFlash output must equal plain output
      r.on_event = [&, i](const TokenEvent& ev) {
        std::lock_guard lk(mu);
        if (ev.token) o.tokens[i].push_back(*ev.token);
        if (ev.finish != FinishReason::none) {
          --open;
          cv.notify_all();
        }
      };
      if (auto id = e.submit(std::move(r)); !id) throw std::runtime_error(id.error().message);
    }
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return open == 0; });
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.metrics = e.metrics();
  return o;
}

// One engine's run: untimed once, then timed `repeat` times (the tokens of the last timed run).
Outcome measure(const Setup& s, int k, bool fixed_k, const std::vector<Prompt>& prompts, int batch, int max_tokens, int repeat) {
  auto engine = start(s, k, batch, fixed_k);
  const EngineMetrics before = run(*engine, prompts, batch, max_tokens).metrics;
  Outcome total;
  for (int r = 0; r < repeat; ++r) {
    Outcome o = run(*engine, prompts, batch, max_tokens);
    total.seconds += o.seconds;
    total.tokens = std::move(o.tokens);
    total.metrics = o.metrics;
  }
  total.seconds /= repeat;
  // Speculation and time counted over the timed runs only.
  total.metrics.steps -= before.steps;
  total.metrics.model_seconds -= before.model_seconds;
  total.metrics.spec_draft_seconds -= before.spec_draft_seconds;
  total.metrics.spec_verify_seconds -= before.spec_verify_seconds;
  total.metrics.spec_context_seconds -= before.spec_context_seconds;
  total.metrics.spec_drafts -= before.spec_drafts;
  total.metrics.spec_accepted_tokens -= before.spec_accepted_tokens;
  total.metrics.spec_draft_tokens -= before.spec_draft_tokens;
  for (size_t i = 0; i < before.spec_chosen_length.size() && i < total.metrics.spec_chosen_length.size(); ++i)
    total.metrics.spec_chosen_length[i] -= before.spec_chosen_length[i];
  return total;
}

// One row of the table of where a run's time goes, in ms per engine step over the timed runs:
// the wall clock; the model work (run_model: proposals, target forwards, context rows, acceptance);
// of it the proposals, the verifying forwards and the drafter's context rows (on the device: the
// pass writing the rows that waited for a proposal), and the rest (plain forwards, sampling and
// acceptance on the host, copying context rows aside); and the engine outside the model work
// (scheduling, completing, events), which is wall less model work.
std::string time_row(const std::string& kind, int batch, const char* mode, const Outcome& o, int repeat) {
  const EngineMetrics& m = o.metrics;
  const double steps = static_cast<double>(std::max<std::int64_t>(1, m.steps));
  const double wall = o.seconds * repeat;  // o.seconds is the mean of the timed runs
  const auto ms = [&](double s) { return 1e3 * s / steps; };
  // How the adaptive length drafted: the share of requests' steps that drafted (a step of a batch
  // of b verifies up to b requests' drafts) and their mean draft length.
  const double request_steps = steps * batch, drafted = static_cast<double>(m.spec_drafts);
  char buf[384];
  std::snprintf(buf, sizeof buf, "| %s | %d | %s | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f%% | %.2f |\n", kind.c_str(),
                batch, mode, static_cast<long long>(m.steps), ms(wall), ms(m.model_seconds), ms(m.spec_draft_seconds), ms(m.spec_verify_seconds),
                ms(m.spec_context_seconds), ms(m.model_seconds - m.spec_draft_seconds - m.spec_verify_seconds - m.spec_context_seconds),
                ms(wall - m.model_seconds),
                100.0 * std::min(1.0, drafted / request_steps), drafted > 0 ? static_cast<double>(m.spec_draft_tokens) / drafted : 0.0);
  return buf;
}

// The adaptive length's view at the end of a run: how often each draft length was chosen, the step
// costs it weighed (ms, by forward tokens; "-" not timed) and the per-position acceptance rates
// that new requests start from.
std::string policy_row(const std::string& kind, int batch, const Outcome& o) {
  const EngineMetrics& m = o.metrics;
  std::string chosen, costs, rates;
  char buf[64];
  for (size_t k = 0; k < m.spec_chosen_length.size(); ++k) {
    std::snprintf(buf, sizeof buf, "%s%zu:%lld", k ? " " : "", k, static_cast<long long>(m.spec_chosen_length[k]));
    chosen += buf;
  }
  for (size_t n = 1; n < m.spec_step_cost_seconds.size(); ++n) {
    if (m.spec_step_cost_seconds[n] > 0) std::snprintf(buf, sizeof buf, "%s%.3f", n > 1 ? " " : "", 1e3 * m.spec_step_cost_seconds[n]);
    else std::snprintf(buf, sizeof buf, "%s-", n > 1 ? " " : "");
    costs += buf;
  }
  for (size_t p = 0; p < m.spec_position_rate.size(); ++p) {
    std::snprintf(buf, sizeof buf, "%s%.2f", p ? " " : "", m.spec_position_rate[p]);
    rates += buf;
  }
  return "| " + kind + " | " + std::to_string(batch) + " | " + chosen + " | " + costs + " | " + rates + " |\n";
}

double acceptance_length(const EngineMetrics& m) {
  return m.spec_drafts > 0 ? 1.0 + static_cast<double>(m.spec_accepted_tokens) / static_cast<double>(m.spec_drafts) : 1.0;
}

}  // namespace

// long-function: a benchmark driver; arguments, the pair's load, then one run per batch and mode,
// in the order of the table it prints.
int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s TARGET_DIR DRAFTER_DIR REFERENCE_JSON [--batch N]... [--k N] [--max-tokens N] [--fixed-k | --both] "
                 "[--device cpu|cuda] [--repeat N] [--probe]\n",
                 argv[0]);
    return 2;
  }
  Setup setup;
  setup.target = argv[1], setup.drafter_dir = argv[2];
  std::vector<int> batches;
  int k = -1, max_tokens = -1, repeat = 1;
  bool fixed_k = false, both = false, probe = false;
  for (int i = 4; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--fixed-k") fixed_k = true;
    else if (f == "--both") both = true;
    else if (f == "--probe") probe = true;
    else if (i + 1 >= argc) return std::fprintf(stderr, "%s needs a value\n", f.c_str()), 2;
    else if (f == "--device") setup.cuda = std::string(argv[++i]) == "cuda";
    else if (f == "--batch") batches.push_back(std::stoi(argv[++i]));
    else if (f == "--k") k = std::stoi(argv[++i]);
    else if (f == "--max-tokens") max_tokens = std::stoi(argv[++i]);
    else if (f == "--repeat") repeat = std::max(1, std::stoi(argv[++i]));
    else return std::fprintf(stderr, "unknown flag %s\n", f.c_str()), 2;
  }
  if (batches.empty()) batches = {1, 4};
  std::ifstream in(argv[3]);
  const auto ref = nlohmann::json::parse(in);
  if (k < 0) k = ref.at("num_speculative_tokens").get<int>();
  if (max_tokens < 0) max_tokens = ref.at("max_new_tokens").get<int>();
  setup.k = k;
  std::map<std::string, std::vector<Prompt>> by_kind;
  for (const auto& p : ref.at("prompts"))
    by_kind[p.at("kind").get<std::string>()].push_back({p.at("kind").get<std::string>(), p.at("prompt_ids").get<std::vector<std::int32_t>>(),
                                                        p.at("plain_greedy").get<std::vector<std::int32_t>>(),
                                                        p.at("acceptance_lengths").get<std::vector<int>>()});

  if (!setup.cuda) {
    auto tm = model::load_model(setup.target);
    if (!tm) return std::fprintf(stderr, "%s\n", tm.error().message.c_str()), 1;
    auto d = spec::load_dflash(setup.drafter_dir, setup.target, tm.value()->config());
    if (!d) return std::fprintf(stderr, "%s\n", d.error().message.c_str()), 1;
    setup.cpu_drafter = std::move(d).value();
  }

  struct Mode {
    const char* name;
    bool fixed;
  };
  std::vector<Mode> modes;
  if (both || fixed_k) modes.push_back({"fixed k", true});
  if (both || !fixed_k) modes.push_back({"adaptive", false});
  std::printf("device %s, k %d, %d new tokens per prompt, %d timed run(s) after one untimed\n\n", setup.cuda ? "cuda" : "cpu", k,
              max_tokens, repeat);
  std::printf("| class | batch | tokens | plain tok/s | drafting | DFlash tok/s | speedup | acceptance length | reference | DFlash = plain | plain = reference |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> time_rows, policy_rows;
  try {
    for (const auto& [kind, prompts] : by_kind) {
      double ref_sum = 0, ref_n = 0;
      for (const auto& p : prompts)
        for (int l : p.ref_lengths) ref_sum += l, ++ref_n;
      for (int b : batches) {
        const Outcome plain = measure(setup, 0, false, prompts, b, max_tokens, repeat);
        time_rows.push_back(time_row(kind, b, "plain", plain, repeat));
        size_t tokens = 0, same_ref = 0, compared = 0;
        for (size_t i = 0; i < prompts.size(); ++i) {
          tokens += plain.tokens[i].size();
          const size_t n = std::min(plain.tokens[i].size(), prompts[i].reference.size());
          compared += n;
          for (size_t j = 0; j < n && plain.tokens[i][j] == prompts[i].reference[j]; ++j) ++same_ref;
        }
        for (const Mode& mode : modes) {
          const Outcome sp = measure(setup, k, mode.fixed, prompts, b, max_tokens, repeat);
          time_rows.push_back(time_row(kind, b, mode.name, sp, repeat));
          if (!mode.fixed) policy_rows.push_back(policy_row(kind, b, sp));
          if (std::getenv("SPEC_BENCH_VERBOSE"))
            for (size_t i = 0; i < prompts.size(); ++i) {
              auto show = [](const char* what, const std::vector<std::int32_t>& t) {
                std::printf("  %-9s", what);
                for (auto x : t) std::printf(" %d", x);
                std::printf("\n");
              };
              show("plain", plain.tokens[i]);
              show("dflash", sp.tokens[i]);
              show("reference", prompts[i].reference);
            }
          std::printf("| %s | %d | %zu | %.1f | %s | %.1f | %.2fx | %.2f | %.2f | %s | %.0f%% |\n", kind.c_str(), b, tokens,
                      static_cast<double>(tokens) / plain.seconds, mode.name, static_cast<double>(tokens) / sp.seconds,
                      plain.seconds / sp.seconds, acceptance_length(sp.metrics), ref_n > 0 ? ref_sum / ref_n : 0.0,
                      sp.tokens == plain.tokens ? "yes" : "NO",
                      compared ? 100.0 * static_cast<double>(same_ref) / static_cast<double>(compared) : 0.0);
          std::fflush(stdout);
        }
      }
    }
    std::printf("\nWhere the time goes: ms per engine step over the timed runs (model = the steps' model work; "
                "context = the drafter's context rows; rest = model less proposals, verifications and context; outside = the engine's own work between; drafted = the "
                "share of a request's steps that drafted, at most 100%% at batch 1; k = their mean draft length)\n\n");
    std::printf("| class | batch | drafting | steps | wall | model | proposals | verifications | context | rest | outside | drafted | k |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& r : time_rows) std::fputs(r.c_str(), stdout);
    if (!policy_rows.empty()) {
      std::printf("\nThe adaptive length's view after each run: steps that chose k drafts (k:steps over the timed runs, "
                  "0 = plain), its step costs in ms by forward tokens 1..k+1 (proposal included past 1; - not timed), "
                  "and the acceptance rate per draft position that new requests start from\n\n");
      std::printf("| class | batch | chosen k | step cost ms | position rates |\n|---|---|---|---|---|\n");
      for (const std::string& r : policy_rows) std::fputs(r.c_str(), stdout);
    }
    if (probe) {
#ifdef TANDEM_HAVE_CUDA_MODEL
      if (!setup.cuda) throw std::runtime_error("--probe measures the CUDA path: add --device cuda");
      std::printf("\n");
      std::vector<std::pair<std::string, double>> lengths;  // the reference's acceptance length per class
      for (const auto& [kind, prompts] : by_kind) {
        double sum = 0, n = 0;
        for (const auto& p : prompts)
          for (int l : p.ref_lengths) sum += l, ++n;
        lengths.emplace_back(kind, n > 0 ? sum / n : 1.0);
      }
      for (int b : batches) spec::bench::print_costs(setup.target, setup.drafter_dir, b, k, lengths);
#else
      throw std::runtime_error("--probe: this build has no CUDA back end");
#endif
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
