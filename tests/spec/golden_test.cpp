// The PyTorch code that trains the real pair (tools/train) and tandem-serve compute the same thing:
// fixtures/dflash_pair (made by tools/train/make_spec_fixture.py) holds a random glm4_moe_lite target
// and DFlash drafter with the target logits, captured features and draft logits PyTorch computed.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tandem/model/model.hpp"
#include "tandem/spec/drafter.hpp"

using namespace tandem;

namespace {

const std::string kDir = std::string(TANDEM_SOURCE_DIR) + "/tests/spec/fixtures/dflash_pair";

double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("target logits, captured features and DFlash draft logits match the training code's PyTorch") {
  std::ifstream in(kDir + "/golden.json");
  const auto g = nlohmann::json::parse(in);
  auto target = model::load_model(kDir + "/target");
  REQUIRE_MESSAGE(target.ok(), (target.ok() ? "" : target.error().message));
  auto drafter = spec::load_dflash(kDir + "/drafter", kDir + "/target", target.value()->config());
  REQUIRE_MESSAGE(drafter.ok(), (drafter.ok() ? "" : drafter.error().message));

  const auto prompt = g["prompt"].get<std::vector<std::int32_t>>();
  const int P = static_cast<int>(prompt.size());
  std::vector<std::int32_t> pos(prompt.size());
  for (int i = 0; i < P; ++i) pos[static_cast<size_t>(i)] = i;
  model::KvCache kv = target.value()->new_cache();
  model::HiddenCapture cap;
  cap.layers = drafter.value()->target_layers();
  const int last = P - 1;
  auto logits = target.value()->forward(prompt, pos, kv, std::span(&last, 1), &cap);
  REQUIRE(logits.ok());
  CHECK(max_rel_err(logits.value(), g["last_logits"].get<std::vector<float>>()) < 1e-5);
  CHECK(max_rel_err(cap.rows, g["features"].get<std::vector<float>>()) < 1e-5);

  const auto l = drafter.value()->context_layout();
  model::KvCache ctx(l.n_layers, l.row_width);
  REQUIRE(drafter.value()->add_context(cap.rows, pos, ctx).ok());
  const int n = g["n"].get<int>();
  auto draft = drafter.value()->propose(ctx, g["anchor"].get<std::int32_t>(), P, n);
  REQUIRE(draft.ok());
  CHECK(max_rel_err(draft.value(), g["draft_logits"].get<std::vector<float>>()) < 1e-5);
  const auto want = g["draft_greedy"].get<std::vector<std::int32_t>>();
  for (int i = 0; i < n; ++i) {
    const auto row = std::span<const float>(draft.value()).subspan(static_cast<size_t>(i) * 320, 320);
    CHECK(std::max_element(row.begin(), row.end()) - row.begin() == want[static_cast<size_t>(i)]);
  }
}
