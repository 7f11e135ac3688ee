// tandem-bench-cuda: the CUDA model's speed on one GPU, against the memory-bandwidth floor.
//   tandem-bench-cuda MODEL_DIR [--prompt N] [--decode N] [--batches 1,4,16] [--kv-cache-dtype D] [--json FILE]
//                    [--skinny-rows N] [--modes graphs,eager]
// Measures the device-to-device copy bandwidth (bytes read + written per second), prefill tokens/s
// (one prompt per step), and decode tokens/s at each batch size with CUDA graphs and eager. The
// floor of a decode step is the bytes it must read (the weights it touches: everything but the
// routed experts once, plus the experts its tokens choose, expected under uniform routing; plus
// every cached KV row of the batch) over that bandwidth. Prompts are random token ids; greedy.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/model/cuda_model.hpp"

using namespace tandem::model;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes read + written per second by cudaMemcpy device to device of 1 GiB.
double copy_bandwidth() {
  const size_t n = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) return 0;
  cudaMemset(a, 1, n);
  cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int reps = 10;
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(n) * reps / (static_cast<double>(ms) / 1e3);
}

void fail(const std::string& what) {
  std::fprintf(stderr, "tandem-bench-cuda: %s\n", what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: tandem-bench-cuda MODEL_DIR [--prompt N] [--decode N] [--batches 1,4,16] [--kv-cache-dtype D] [--json FILE]");
  std::string dir = argv[1], json_path, kv = "auto";
  int prompt = 512, decode = 128, skinny = CudaOptions{}.skinny_rows;
  std::string modes = "graphs,eager";
  std::vector<int> batches{1, 4, 16};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--prompt") prompt = std::stoi(v);
    else if (a == "--decode") decode = std::stoi(v);
    else if (a == "--json") json_path = v;
    else if (a == "--kv-cache-dtype") kv = v;
    else if (a == "--skinny-rows") skinny = std::stoi(v);
    else if (a == "--modes") modes = v;
    else if (a == "--batches") {
      batches.clear();
      std::stringstream ss(v);
      for (std::string b; std::getline(ss, b, ',');) batches.push_back(std::stoi(b));
    } else fail("unknown flag " + a);
  }
  int max_batch = 1;
  for (int b : batches) max_batch = std::max(max_batch, b);

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double bw = copy_bandwidth();
  std::printf("GPU %s; device-to-device copy: %.0f GB/s (read + write)\n", prop.name, bw / 1e9);

  CudaOptions opt;
  opt.kv_cache_dtype = kv;
  opt.max_num_seqs = max_batch;
  opt.max_num_batched_tokens = prompt;
  opt.max_model_len = prompt + decode + 16;
  opt.skinny_rows = skinny;
  const auto t_load = Clock::now();
  auto loaded = load_cuda_model(dir, opt);
  if (!loaded) fail(loaded.error().message);
  CudaModel& m = *loaded.value();
  const double load_s = seconds_since(t_load);
  const int block = 16, per_seq = (opt.max_model_len + block - 1) / block;
  if (auto s = m.make_device_pool(max_batch * per_seq, block); !s) fail(s.error().message);
  const DecodeBytes db = m.decode_bytes();
  std::printf("model %s: %.2f GB of bf16 weights (%.2f B parameters), loaded in %.1f s; KV %llu bytes/token\n", dir.c_str(),
              static_cast<double>(m.weight_bytes()) / 1e9, static_cast<double>(m.weight_bytes()) / 2e9, load_s,
              static_cast<unsigned long long>(m.kv_bytes_per_token()));

  std::mt19937 rng(1);
  auto random_ids = [&](int n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<unsigned>(m.vocab_size()));
    return ids;
  };
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(max_batch));
  for (int s = 0; s < max_batch; ++s)
    for (int b = 0; b < per_seq; ++b) tables[static_cast<size_t>(s)].push_back(s * per_seq + b);

  // Prefill: one prompt per step, first run a warm-up.
  double prefill_s = 0;
  const int prefill_runs = 3;
  for (int r = 0; r <= prefill_runs; ++r) {
    const auto ids = random_ids(prompt);
    PagedWork w{ids, 0, tables[0], true};
    const auto t0 = Clock::now();
    auto out = m.step_greedy(std::span<const PagedWork>(&w, 1));
    if (!out) fail("prefill: " + out.error().message);
    if (r > 0) prefill_s += seconds_since(t0);
  }
  const double prefill_tps = prompt * prefill_runs / prefill_s;
  std::printf("prefill: %d tokens per step, %.0f tokens/s\n", prompt, prefill_tps);

  nlohmann::json doc;
  doc["gpu"] = prop.name;
  doc["copy_bandwidth_GBps"] = bw / 1e9;
  doc["model"] = {{"dir", dir},
                  {"weight_bytes", m.weight_bytes()},
                  {"decode_fixed_bytes", db.fixed},
                  {"expert_bytes", db.per_expert},
                  {"moe_layers", db.moe_layers},
                  {"experts", db.experts},
                  {"top_k", db.top_k},
                  {"kv_bytes_per_token", m.kv_bytes_per_token()},
                  {"kv_cache_dtype", kv}};
  doc["prompt"] = prompt;
  doc["skinny_rows"] = skinny;
  doc["decode_steps"] = decode;
  doc["prefill_tok_s"] = prefill_tps;
  std::printf("\n| batch | mode | decode tok/s | ms/step | floor tok/s | %% of floor |\n|---|---|---|---|---|---|\n");
  for (const bool eager : {false, true}) {
    if (modes.find(eager ? "eager" : "graphs") == std::string::npos) continue;
    m.set_enforce_eager(eager);
    for (int B : batches) {
      std::vector<std::vector<int32_t>> last(static_cast<size_t>(B));
      std::vector<PagedWork> work;
      for (int s = 0; s < B; ++s) {
        const auto ids = random_ids(prompt);
        PagedWork w{ids, 0, tables[static_cast<size_t>(s)], true};
        auto out = m.step_greedy(std::span<const PagedWork>(&w, 1));
        if (!out) fail("prefill: " + out.error().message);
        last[static_cast<size_t>(s)] = out.value();
      }
      auto one_step = [&](int i) {
        work.clear();
        for (int s = 0; s < B; ++s) work.push_back({last[static_cast<size_t>(s)], prompt + i, tables[static_cast<size_t>(s)], true});
        auto out = m.step_greedy(work);
        if (!out) fail("decode: " + out.error().message);
        for (int s = 0; s < B; ++s) last[static_cast<size_t>(s)] = {out.value()[static_cast<size_t>(s)]};
      };
      one_step(0);  // warm-up: plans the GEMMs and captures this batch's graph
      const auto t0 = Clock::now();
      for (int i = 1; i < decode; ++i) one_step(i);
      const double s = seconds_since(t0);
      const int steps = decode - 1;
      const double tps = static_cast<double>(B) * steps / s;
      const double avg_ctx = prompt + decode / 2.0;
      const double bytes = db.weights(B) + B * avg_ctx * static_cast<double>(m.kv_bytes_per_token());
      const double floor_tps = B * bw / bytes;
      std::printf("| %d | %s | %.0f | %.3f | %.0f | %.0f%% |\n", B, eager ? "eager" : "graphs", tps, 1e3 * s / steps, floor_tps,
                  100.0 * tps / floor_tps);
      doc["decode"].push_back({{"batch", B},
                               {"mode", eager ? "eager" : "graphs"},
                               {"tok_s", tps},
                               {"ms_per_step", 1e3 * s / steps},
                               {"bytes_per_step", bytes},
                               {"floor_tok_s", floor_tps},
                               {"pct_of_floor", 100.0 * tps / floor_tps}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << doc.dump(1) << "\n";
  return 0;
}
