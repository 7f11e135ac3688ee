// Shared by the golden tests: read a goldens file written by reference/golden_ids.mjs.
#pragma once
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::tokenizer::test {

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;               // add_special_tokens = false
  std::vector<int32_t> ids_with_special;  // add_special_tokens = true
  std::string decoded;                    // the reference's decode(ids)
};

inline std::string data_path(const std::string& relative) {
  return std::string(TANDEM_SOURCE_DIR) + "/tests/tokenizer/" + relative;
}

// The small trained tokenizer: it is the demo model's (tandem-serve --write-demo-model embeds it), so
// it lives with the product and the tests read it there.
inline std::string small_bpe_path(const std::string& file = "tokenizer.json") {
  return std::string(TANDEM_SOURCE_DIR) + "/engine/serve/assets/demo_tokenizer/" + file;
}

inline std::vector<GoldenCase> read_goldens(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  const auto doc = nlohmann::json::parse(s.str());
  std::vector<GoldenCase> cases;
  for (const auto& c : doc.at("cases")) {
    cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(),
                     c.at("ids_with_special").get<std::vector<int32_t>>(), c.at("decoded").get<std::string>()});
  }
  return cases;
}

}  // namespace tandem::tokenizer::test
