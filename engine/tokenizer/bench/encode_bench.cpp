// Encode/decode throughput of tandem_tokenizer. Prints a table; not a test.
//   tandem_tokenizer_bench <tokenizer.json> [text file ...]
// Without text files it builds about 4 MB of mixed prose, code, JSON and CJK, with changing
// numbers and identifiers so the per-word cache does not see only repeats.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/tokenizer/tokenizer.hpp"

namespace {

std::string synthetic_text(std::size_t target_bytes) {
  const char* parts[] = {
      "The scheduler admits a request when enough KV blocks are free; otherwise it waits in the queue. ",
      "for (int i = 0; i < n; ++i) { sum += values[i] * weights[i]; }\n",
      "{\"role\": \"assistant\", \"content\": \"Sure, here is the summary.\", \"index\": ",
      "今天的会议讨论了模型部署、推理速度和显存占用的问题。",
      "    def forward(self, hidden_states, attention_mask=None):\n        return self.proj(hidden_states)\n",
      "Don't worry: it'll be fine, they're sure we've checked everything. ",
  };
  std::string text;
  std::size_t i = 0;
  while (text.size() < target_bytes) {
    text += parts[i % std::size(parts)];
    text += "id_" + std::to_string(i * 7919 % 100003) + " " + std::to_string(i) + "\n";
    ++i;
  }
  return text;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Process CPU seconds: on a shared build machine wall time mostly measures the neighbours.
double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <tokenizer.json> [text file ...]\n", argv[0]);
    return 2;
  }
  const auto t_load = std::chrono::steady_clock::now();
  auto tok = tandem::tokenizer::Tokenizer::load(argv[1]);
  if (!tok) {
    std::fprintf(stderr, "%s\n", tok.error().message.c_str());
    return 1;
  }
  std::printf("load %s: %.3f s, vocab %zu\n\n", argv[1], seconds_since(t_load), tok->vocab_size());

  std::vector<std::pair<std::string, std::string>> inputs;
  if (argc == 2) inputs.emplace_back("synthetic mix", synthetic_text(4u << 20));
  for (int i = 2; i < argc; ++i) inputs.emplace_back(argv[i], read_file(argv[i]));

  std::printf("%-24s %8s %9s %12s %14s %12s %12s\n", "input", "MB", "tokens", "encode MB/s", "encode MB/cpu-s",
              "again MB/s", "decode MB/s");
  for (const auto& [name, text] : inputs) {
    const double mb = static_cast<double>(text.size()) / 1e6;
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    const auto ids = tok->encode(text, false);
    const double first = seconds_since(t0);
    const double first_cpu = cpu_seconds() - c0;
    t0 = std::chrono::steady_clock::now();
    const auto again = tok->encode(text, false);  // warm per-word cache
    const double second = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const auto back = tok->decode(ids, false);
    const double dec = seconds_since(t0);
    std::printf("%-24s %8.2f %9zu %12.1f %14.1f %12.1f %12.1f%s\n", name.c_str(), mb, ids.size(), mb / first,
                mb / first_cpu, mb / second, mb / dec, back == text && again == ids ? "" : "  (round trip MISMATCH)");
  }
  return 0;
}
