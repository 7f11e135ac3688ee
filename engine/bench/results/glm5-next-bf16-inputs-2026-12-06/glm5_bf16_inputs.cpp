// EXPERIMENT (the CPU emulation of glm5_next's bf16 product inputs; needs bf16_emulate.patch):
//   glm5_bf16_inputs FIXTURES_DIR
// For each setting of TANDEM_BF16_EMULATE (none, every product, each product alone, and the
// candidates), the fp32 CPU reference with those products' inputs rounded to bf16, against the
// transformers goldens of both glm5_next fixtures: the worst relative error of any position's logits
// (max|ours - golden| / max|golden| per row, as glm5_next_cuda_check measures it), the 16-token
// greedy continuations (fed one token at a time) equal to the goldens', and the recurrent state
// after each prompt against the unrounded run's (max|diff| / max|ref|; the CUDA check's bar: 2e-2).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bf16_checkpoint.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/safetensors.hpp"

using namespace tandem::model;
namespace fs = std::filesystem;

struct Result1 {
  double worst = 0, state = 0;
  int same = 0, total = 0;
};
// The recurrent state after each prompt with no product emulated (the reference of the state column).
std::map<std::string, std::vector<float>> base_state;

Result1 run(const fs::path& dir) {
  Result1 r;
  std::ifstream in(dir / "golden.json");
  const auto doc = nlohmann::json::parse(in);
  auto file = SafetensorsFile::open(dir / "golden.safetensors");
  auto m = load_model(dir);
  if (!file || !m) std::exit(1);
  const int V = m.value()->vocab_size();
  for (size_t i = 0; i < doc["sequences"].size(); ++i) {
    const auto ids = doc["sequences"][i]["input_ids"].get<std::vector<int32_t>>();
    const auto greedy = doc["sequences"][i]["greedy"].get<std::vector<int32_t>>();
    const auto gold = bench::as_f32(file.value()->tensors().at("seq" + std::to_string(i) + ".logits"));
    std::vector<int32_t> pos;
    std::vector<int> rows;
    for (size_t t = 0; t < ids.size(); ++t) pos.push_back(static_cast<int32_t>(t)), rows.push_back(static_cast<int>(t));
    KvCache cache = m.value()->new_cache();
    auto l = m.value()->forward(ids, pos, cache, rows);
    if (!l) std::exit(1);
    const auto rs = cache.recurrent_state();
    std::vector<float> st(rs.begin(), rs.end());
    const std::string key = dir.string() + "/" + std::to_string(i);
    if (!base_state.count(key)) base_state[key] = st;
    double d = 0, ref = 0;
    for (size_t j = 0; j < st.size(); ++j)
      d = std::max(d, std::fabs(static_cast<double>(st[j]) - base_state[key][j])), ref = std::max(ref, std::fabs(static_cast<double>(base_state[key][j])));
    r.state = std::max(r.state, d / ref);
    for (size_t t = 0; t < ids.size(); ++t) {
      double d = 0, ref = 0;
      for (int v = 0; v < V; ++v) {
        d = std::max(d, std::fabs(static_cast<double>(l.value()[t * V + v]) - gold[t * V + v]));
        ref = std::max(ref, std::fabs(static_cast<double>(gold[t * V + v])));
      }
      r.worst = std::max(r.worst, d / ref);
    }
    auto argmax = [&](const float* row) {
      int best = 0;
      for (int v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
      return best;
    };
    int32_t next = argmax(l.value().data() + (ids.size() - 1) * V);
    for (size_t k = 0; k < greedy.size(); ++k) {
      r.same += next == greedy[k], ++r.total;
      const int32_t p = static_cast<int32_t>(ids.size() + k);
      const int row = 0;
      auto s = m.value()->forward(std::vector<int32_t>{greedy[k]}, std::vector<int32_t>{p}, cache, std::vector<int>{row});
      if (!s) std::exit(1);
      next = argmax(s.value().data());
    }
  }
  return r;
}

int main(int argc, char** argv) {
  const fs::path fx = argc > 1 ? argv[1] : "tests/model/fixtures";
  std::vector<std::string> settings = {"none", "all", "kda_in", "kda_gates", "kda_o", "dsa_in", "dsa_q", "dsa_o",
                                       "mlp_gate_up", "mlp_down", "shared_gate_up", "shared_down", "lm_head"};
  for (int i = 2; i < argc; ++i) settings.push_back(argv[i]);
  std::printf("| bf16 inputs | glm5_next_text logits | greedy | state | glm5_next_text_sparse logits | greedy | state |\n|---|---|---|---|---|---|---|\n");
  for (const auto& s : settings) {
    if (s == "none") unsetenv("TANDEM_BF16_EMULATE");
    else setenv("TANDEM_BF16_EMULATE", s.c_str(), 1);
    const Result1 a = run(fx / "glm5_next_text"), b = run(fx / "glm5_next_text_sparse");
    std::printf("| %s | %.3e | %d/%d | %.2e | %.3e | %d/%d | %.2e |\n", s.c_str(), a.worst, a.same, a.total, a.state, b.worst, b.same, b.total,
                b.state);
    std::fflush(stdout);
  }
}
