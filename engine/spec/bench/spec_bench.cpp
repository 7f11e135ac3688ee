// Plain decoding vs DFlash on the CPU engine, per prompt class, for a target/drafter pair and the
// reference.json that tools/train/train_pair.py wrote (held-out prose / code / JSON prompts with the
// PyTorch reference's greedy outputs and acceptance lengths). Prints one table row per class and
// batch size: tokens, tok/s plain and DFlash, mean acceptance length (ours and the reference's),
// whether DFlash output equals plain output, and whether plain output equals the reference's.
//
//   tandem_spec_bench TARGET_DIR DRAFTER_DIR REFERENCE_JSON [--batch N]... [--k N] [--max-tokens N] [--fixed-k]
// --fixed-k drafts k tokens every step (the reference's way, so acceptance lengths compare);
// without it each request's draft length adapts to its acceptance (the serving default).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine.hpp"

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

std::unique_ptr<Engine> start(const std::string& target, std::shared_ptr<const spec::Drafter> drafter, int k, int seqs,
                              bool fixed_k) {
  auto m = model::load_model(target);
  if (!m) throw std::runtime_error(m.error().message);
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.max_num_seqs = seqs;
  cfg.kv_cache_memory = 256ull << 20;
  cfg.log = [](const std::string&) {};
  cfg.drafter = std::move(drafter);
  cfg.num_speculative_tokens = k;
  if (fixed_k) {  // always the full k, as the reference drafts
    cfg.draft_policy.min_chance = 0.0;
    cfg.draft_policy.use_cost = false;
  }
  auto e = Engine::start(std::move(m).value(), cfg);
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TARGET_DIR DRAFTER_DIR REFERENCE_JSON [--batch N]... [--k N] [--max-tokens N] [--fixed-k]\n", argv[0]);
    return 2;
  }
  const std::string target = argv[1], drafter_dir = argv[2];
  std::vector<int> batches;
  int k = -1, max_tokens = -1;
  bool fixed_k = false;
  for (int i = 4; i < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--fixed-k") {
      fixed_k = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) break;
    const int v = std::stoi(argv[i + 1]);
    if (f == "--batch") batches.push_back(v);
    else if (f == "--k") k = v;
    else if (f == "--max-tokens") max_tokens = v;
  }
  if (batches.empty()) batches = {1, 4};
  std::ifstream in(argv[3]);
  const auto ref = nlohmann::json::parse(in);
  if (k < 0) k = ref.at("num_speculative_tokens").get<int>();
  if (max_tokens < 0) max_tokens = ref.at("max_new_tokens").get<int>();
  std::map<std::string, std::vector<Prompt>> by_kind;
  for (const auto& p : ref.at("prompts"))
    by_kind[p.at("kind").get<std::string>()].push_back({p.at("kind").get<std::string>(), p.at("prompt_ids").get<std::vector<std::int32_t>>(),
                                                        p.at("plain_greedy").get<std::vector<std::int32_t>>(),
                                                        p.at("acceptance_lengths").get<std::vector<int>>()});

  auto tm = model::load_model(target);
  if (!tm) return std::fprintf(stderr, "%s\n", tm.error().message.c_str()), 1;
  auto d = spec::load_dflash(drafter_dir, target, tm.value()->config());
  if (!d) return std::fprintf(stderr, "%s\n", d.error().message.c_str()), 1;
  std::shared_ptr<const spec::Drafter> drafter = std::move(d).value();

  std::printf("%-6s %5s %7s %10s %10s %8s %9s %9s %10s %10s\n", "class", "batch", "tokens", "plain t/s", "dflash t/s", "speedup",
              "acc.len", "ref.len", "identical", "=reference");
  for (const auto& [kind, prompts] : by_kind) {
    double ref_sum = 0, ref_n = 0;
    for (const auto& p : prompts)
      for (int l : p.ref_lengths) ref_sum += l, ++ref_n;
    for (int b : batches) {
      auto plain_engine = start(target, nullptr, 0, b, false);
      const Outcome plain = run(*plain_engine, prompts, b, max_tokens);
      auto spec_engine = start(target, drafter, k, b, fixed_k);
      const Outcome sp = run(*spec_engine, prompts, b, max_tokens);
      size_t tokens = 0, same_ref = 0, compared = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        tokens += plain.tokens[i].size();
        const size_t n = std::min(plain.tokens[i].size(), prompts[i].reference.size());
        compared += n;
        for (size_t j = 0; j < n && plain.tokens[i][j] == prompts[i].reference[j]; ++j) ++same_ref;
      }
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
      const auto& m = sp.metrics;
      const double acc_len = m.spec_drafts > 0 ? 1.0 + static_cast<double>(m.spec_accepted_tokens) / static_cast<double>(m.spec_drafts) : 1.0;
      std::printf("%-6s %5d %7zu %10.1f %10.1f %7.2fx %9.2f %9.2f %10s %9.0f%%\n", kind.c_str(), b, tokens,
                  static_cast<double>(tokens) / plain.seconds, static_cast<double>(tokens) / sp.seconds, plain.seconds / sp.seconds,
                  acc_len, ref_n > 0 ? ref_sum / ref_n : 0.0, sp.tokens == plain.tokens ? "yes" : "NO",
                  compared ? 100.0 * static_cast<double>(same_ref) / static_cast<double>(compared) : 0.0);
      std::fflush(stdout);
    }
  }
  return 0;
}
