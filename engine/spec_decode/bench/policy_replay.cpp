// The adaptive draft length (spec/draft_length.hpp, spec/step_cost.hpp, the engine's own classes)
// replayed against a pair's reference acceptance and a GPU's measured step costs, without a GPU:
// what each policy setting would give per prompt class, beside 7 drafts every step and plain
// decoding. It answers "does this change to the policy help?" on the CPU; tandem_spec_bench on the
// GPU is the measurement that counts.
//
//   tandem_policy_replay REFERENCE_JSON [--plain MS] [--verify MS] [--proposal MS] [--extra MS]
//                        [--k N] [--max-tokens N] [--json FILE]
// Costs default to an H100's with the committed pair (engine/bench/results/h100-s16-2026-12-07.md,
// call b): a plain step 0.210 ms in an engine with a drafter, a verification's forward over k + 1
// tokens 0.245 ms (sizes between cost in proportion), a proposal 0.110 ms: what the engine's
// StepCost sees; and 0.045 ms more a drafting step that it does not (context rows, acceptance on
// the host, the engine between steps), so a step of 7 drafts costs 0.40 ms, as measured.
//
// The model of acceptance: reference.json holds, per prompt, the acceptance length of each step of
// the PyTorch reference drafting k every step. A block drafted at a position inside a reference
// step's accepted run is taken to be accepted to that run's end (the drafter saw the same context
// and proposes the same continuation); one anchored at the run's rejected position accepts nothing.
// That is exact for the reference's own anchors and an approximation elsewhere.
//
// Beside the policies, an oracle row: each step drafts what is best for that step knowing how
// many drafts will be accepted; no policy can beat it, so it bounds what a better policy could win.
//
// Each policy runs the class's prompts once to warm up (the engine keeps one prior fed by every
// verification), then once counted, as tandem_spec_bench does.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/spec/draft_length.hpp"
#include "tandem/spec/step_cost.hpp"

namespace {

using tandem::spec::DraftLength;
using tandem::spec::DraftLengthPolicy;
using tandem::spec::StepCost;

struct Costs {
  double plain = 0.210e-3, verify = 0.245e-3, proposal = 0.110e-3, extra = 0.045e-3;
  int k = 7;
  // Seconds of a target forward over n tokens (1: plain; k + 1: a full verification).
  double forward(int n) const { return plain + (verify - plain) * (n - 1) / std::max(1, k); }
};

// accepted[p]: how many drafts a block anchored at output position p keeps (the model above).
std::vector<int> accepted_runs(const std::vector<int>& lengths) {
  std::vector<int> run;
  for (int l : lengths)
    for (int o = 0; o < l; ++o) run.push_back(std::max(l - 1 - o, 0));
  return run;
}

struct Tally {
  double seconds = 0;
  long tokens = 0, steps = 0, drafting = 0, drafted = 0;
};

// The draft length a step would choose knowing how many drafts will be accepted (`run`): the
// most tokens per second of this step alone. An upper bound for any policy that decides from what
// it knows before the step (the drafter's confidence included), not a policy.
int oracle_k(int run, const Costs& c) {
  int best = 0;
  double rate = 1.0 / c.forward(1);
  for (int k = 1; k <= c.k; ++k)
    if (const double r = (std::min(run, k) + 1) / (c.forward(k + 1) + c.proposal + c.extra); r > rate) rate = r, best = k;
  return best;
}

constexpr int kOracle = -2;  // answer()'s k_fixed for oracle_k

// One prompt's answer of `max_tokens`: k_fixed >= 0 drafts that many every step, kOracle knows
// each step's acceptance; else the policy.
void answer(const std::vector<int>& run, int max_tokens, const Costs& c, int k_fixed, DraftLength& prior, StepCost& cost, Tally& t) {
  DraftLength mine = prior.fresh();
  for (int p = 0; p < max_tokens;) {
    const int here = p < static_cast<int>(run.size()) ? run[static_cast<std::size_t>(p)] : 0;
    int k = k_fixed >= 0 ? k_fixed : k_fixed == kOracle ? oracle_k(here, c) : mine.next(&cost);
    k = std::min(k, max_tokens - p - 1);
    ++t.steps;
    if (k <= 0) {
      cost.record_forward(1, c.forward(1));
      t.seconds += c.forward(1);
      ++p;
      continue;
    }
    const int a = std::min(here, k);
    cost.record_forward(k + 1, c.forward(k + 1));
    cost.record_draft(c.proposal);
    t.seconds += c.forward(k + 1) + c.proposal + c.extra;
    ++t.drafting, t.drafted += k;
    mine.record(k, a), prior.record(k, a);
    p += a + 1;
  }
  t.tokens += max_tokens;
}

Tally replay(const std::vector<std::vector<int>>& runs, int max_tokens, const Costs& c, int k_fixed, const DraftLengthPolicy& p) {
  DraftLength prior(c.k, p);
  StepCost cost(c.k + 1);
  Tally warm, counted;
  for (const auto& r : runs) answer(r, max_tokens, c, k_fixed, prior, cost, warm);
  for (const auto& r : runs) answer(r, max_tokens, c, k_fixed, prior, cost, counted);
  return counted;
}

struct Setting {
  std::string name;
  DraftLengthPolicy policy;
};

}  // namespace

// long-function: a benchmark driver: arguments, the reference's runs per class, one row per class and setting.
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s REFERENCE_JSON [--plain MS] [--verify MS] [--proposal MS] [--extra MS] [--k N] [--max-tokens N] [--json FILE]\n",
                 argv[0]);
    return 2;
  }
  Costs c;
  int max_tokens = -1;
  std::string json_out;
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) return std::fprintf(stderr, "%s needs a value\n", f.c_str()), 2;
    const std::string v = argv[++i];
    try {
      if (f == "--plain") c.plain = std::stod(v) * 1e-3;
      else if (f == "--verify") c.verify = std::stod(v) * 1e-3;
      else if (f == "--proposal") c.proposal = std::stod(v) * 1e-3;
      else if (f == "--extra") c.extra = std::stod(v) * 1e-3;
      else if (f == "--k") c.k = std::stoi(v);
      else if (f == "--max-tokens") max_tokens = std::stoi(v);
      else if (f == "--json") json_out = v;
      else return std::fprintf(stderr, "unknown flag %s\n", f.c_str()), 2;
    } catch (const std::exception&) {
      return std::fprintf(stderr, "%s: '%s' is not a number\n", f.c_str(), v.c_str()), 2;
    }
  }
  if (c.plain <= 0 || c.verify <= 0 || c.proposal < 0 || c.extra < 0 || c.k < 1) return std::fprintf(stderr, "costs must be positive and k >= 1\n"), 2;
  std::ifstream in(argv[1]);
  if (!in) return std::fprintf(stderr, "cannot read %s\n", argv[1]), 1;
  nlohmann::json ref;
  try {
    ref = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "%s: %s\n", argv[1], e.what()), 1;
  }
  const int covered = ref.value("max_new_tokens", 64);  // the reference's runs end there
  if (max_tokens < 0) max_tokens = covered;
  if (max_tokens < 1 || max_tokens > covered)
    return std::fprintf(stderr, "--max-tokens: 1..%d (what the reference's acceptance covers)\n", covered), 2;
  std::map<std::string, std::vector<std::vector<int>>> runs;
  for (const auto& p : ref.at("prompts")) runs[p.at("kind").get<std::string>()].push_back(accepted_runs(p.at("acceptance_lengths").get<std::vector<int>>()));

  const DraftLengthPolicy base;
  std::vector<Setting> settings{{"adaptive (default)", base}};
  {
    DraftLengthPolicy p = base;
    p.probe_every = 8;
    settings.push_back({"probe every 8", p});
    p = base;
    p.smoothing = 0.1;
    settings.push_back({"smoothing 0.1", p});
    p = base;
    p.probe_cost = 2.0;
    settings.push_back({"probe cost 2.0", p});
  }
  std::printf("costs: plain %.3f ms, verification of %d tokens %.3f ms, proposal %.3f ms, %.3f ms more a drafting step; %d tokens "
              "a prompt\n\n",
              c.plain * 1e3, c.k + 1, c.verify * 1e3, c.proposal * 1e3, c.extra * 1e3, max_tokens);
  std::printf("| class | prompts | drafting | speedup over plain | steps that drafted | mean k |\n|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [kind, r] : runs) {
    const double plain = static_cast<double>(max_tokens) * static_cast<double>(r.size()) * c.forward(1);
    auto row = [&](const std::string& name, const Tally& t) {
      const double speedup = plain / t.seconds, share = static_cast<double>(t.drafting) / static_cast<double>(std::max(1L, t.steps));
      const double mean_k = t.drafting ? static_cast<double>(t.drafted) / static_cast<double>(t.drafting) : 0.0;
      std::printf("| %s | %zu | %s | %.2fx | %.0f%% | %.2f |\n", kind.c_str(), r.size(), name.c_str(), speedup, 100 * share, mean_k);
      rows.push_back({{"class", kind}, {"drafting", name}, {"speedup", speedup}, {"drafted_share", share}, {"mean_k", mean_k}});
    };
    row("fixed k", replay(r, max_tokens, c, c.k, base));
    row("oracle (knows each step's acceptance)", replay(r, max_tokens, c, kOracle, base));
    for (const Setting& s : settings) row(s.name, replay(r, max_tokens, c, -1, s.policy));
  }
  if (!json_out.empty()) {
    std::ofstream out(json_out);
    out << nlohmann::json{{"costs_ms", {{"plain", c.plain * 1e3}, {"verify", c.verify * 1e3}, {"proposal", c.proposal * 1e3}, {"extra", c.extra * 1e3}}},
                          {"k", c.k},
                          {"max_tokens", max_tokens},
                          {"rows", rows}}
               .dump(2)
        << "\n";
    if (!out) return std::fprintf(stderr, "cannot write %s\n", json_out.c_str()), 1;
  }
  return 0;
}
