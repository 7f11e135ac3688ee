// tandem-bench-cuda: the CUDA model's speed on one GPU, against the memory-bandwidth floor.
//   tandem-bench-cuda MODEL_DIR [--prompt N] [--decode N] [--batches 1,4,16] [--max-model-len N] [--json FILE] (more: its usage)
//                    [--skinny-rows N] [--modes graphs,eager] [--decode-kernels 0|1] [--pdl 0|1] [--profile STEPS]
//                    [--profile-batch B] [--prefill 512,32768] [--prefill-seqs N] [--group-prefill 0|1]
//                    [--invariant-tokens N] [--profile-prefill L]
// Measures the device-to-device copy bandwidth (bytes read + written per second), prefill tokens/s
// (one prompt per step), and decode tokens/s at each batch size with CUDA graphs and eager. The
// floor of a decode step is the bytes it must read (the weights it touches: everything but the
// routed experts once, plus the experts its tokens choose, expected under uniform routing; plus
// every cached KV row of the batch) over that bandwidth. Prompts are random token ids; greedy.
// --decode-kernels 0 runs the model as it was before the decode-sized kernels (cuBLASLt, unfused
// glue, the sampler's one-block greedy), for a before/after in one run; --pdl 0 launches the kernels
// that use programmatic dependent launch (kernels/launch.hpp) the ordinary way.
// --prefill L1,L2,...: also prefill one prompt of each length, after the decode rows (3 timed runs
// after a warm-up; 1 run, no warm-up, from 8192 tokens, whose one run takes seconds); the KV pool
// then holds the longest as one sequence. The JSON file is rewritten after every measurement, so a
// run cut short (a timeout during a long prefill) keeps what it measured. Decode graphs attend up
// to max-model-len, which a long --prefill raises: measure decode apart (--batches none: no decode).
// --prefill-seqs N: each --prefill step holds N prompts of that length (N forward passes, one a
// prompt, or one pass with --group-prefill 1: CudaOptions::group_prefill); --invariant-tokens sets
// CudaOptions::invariant_tokens (the longest chunk that takes the batch-invariant kernels).
// --profile-prefill L: where a prefill of one L-token prompt spends its time (3 eager steps timed
// as --profile times a decode step).
// --profile STEPS: where a decode step's time goes (batch 1, or each of --profile-batch B1,B2,...). STEPS eager steps with a CUDA event
// after every op (the model's OpTimer marks), each step's ops queued behind a 5 ms host wait so
// the GPU runs them back to back as a graph would (the event deltas are then each op's kernel time
// plus its launch gap); then STEPS graph replays timed the same way (the whole forward, then the
// token choice). One table: op, calls per step, microseconds per step, bytes, GB/s.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/kernels/launch.hpp"
#include "event_timer.hpp"
#include "tandem/model/cuda_model.hpp"

using namespace tandem::model;
using Clock = std::chrono::steady_clock;
using tandem::bench::EventTimer;

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

// The op timer's totals over `steps` steps as a table (slowest first) and as JSON.
nlohmann::json op_table(const std::map<std::string, EventTimer::Op>& ops, int steps) {
  std::vector<std::pair<std::string, EventTimer::Op>> rows(ops.begin(), ops.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  double total_us = 0, total_bytes = 0;
  for (const auto& [op, o] : rows) total_us += o.us / steps, total_bytes += o.bytes / steps;
  std::printf("| op | calls/step | us/step | %% | MB/step | GB/s |\n|---|---|---|---|---|---|\n");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [op, o] : rows) {
    const double us = o.us / steps, mb = o.bytes / steps / 1e6;
    std::printf("| %s | %.0f | %.1f | %.1f%% | %.2f | %.0f |\n", op.c_str(), static_cast<double>(o.calls) / steps, us,
                100.0 * us / total_us, mb, us > 0 ? mb * 1e6 / (us * 1e-6) / 1e9 : 0.0);
    out.push_back({{"op", op}, {"calls_per_step", static_cast<double>(o.calls) / steps}, {"us_per_step", us},
                   {"bytes_per_step", o.bytes / steps}});
  }
  std::printf("| **sum** | | %.1f | 100%% | %.2f | %.0f |\n", total_us, total_bytes / 1e6, total_bytes / (total_us * 1e-6) / 1e9);
  return out;
}

void fail(const std::string& what) {
  std::fprintf(stderr, "tandem-bench-cuda: %s\n", what.c_str());
  std::exit(1);
}


}  // namespace

// B sequences prefilled with random prompts of `prompt` tokens, then decoded one greedy token a step.
// Sequence s reads and advances recurrent-state slot s (models with one, glm5_next; others ignore it).
struct Decoder {
  template <class Ids>
  Decoder(CudaModel& model, int B, int prompt, const std::vector<std::vector<int32_t>>& tables, Ids&& random_ids)
      : m(model), tables_(tables), last(static_cast<size_t>(B)) {
    for (int s = 0; s < B; ++s) {
      const auto ids = random_ids(prompt);
      PagedWork w{ids, 0, tables[static_cast<size_t>(s)], true, s};
      auto out = m.step_greedy(std::span<const PagedWork>(&w, 1));
      if (!out) fail("prefill: " + out.error().message);
      last[static_cast<size_t>(s)] = out.value();
    }
  }
  void step(int position) {
    work.clear();
    for (size_t s = 0; s < last.size(); ++s) work.push_back({last[s], position, tables_[s], true, static_cast<int>(s)});
    auto out = m.step_greedy(work);
    if (!out) fail("decode: " + out.error().message);
    for (size_t s = 0; s < last.size(); ++s) last[s] = {out.value()[s]};
  }
  CudaModel& m;
  const std::vector<std::vector<int32_t>>& tables_;
  std::vector<std::vector<int32_t>> last;
  std::vector<PagedWork> work;
};

// long-function: a benchmark driver; its phases (arguments, load, prefill, decode per batch, JSON)
// run top to bottom in the order of the results it prints.
int main(int argc, char** argv) {
  if (argc < 2)
    fail("usage: tandem-bench-cuda MODEL_DIR [--prompt N] [--decode N] [--batches 1,4,16|none] [--prefill L,...] "
         "[--prefill-seqs N] [--max-model-len N] [--kv-cache-dtype D] [--modes graphs,eager] [--profile STEPS] "
         "[--profile-batch B] [--profile-prefill L] [--decode-kernels 0|1] [--skinny-rows N] [--pdl 0|1] "
         "[--group-prefill 0|1] [--invariant-tokens N] [--json FILE]\n"
         "  --max-model-len N: load the model for sequences of up to N tokens, as a server's flag does (at least what "
         "the run needs); the attention's split of a context depends on it");
  std::string dir = argv[1], json_path, kv = "auto";
  int prompt = 512, decode = 128, skinny = CudaOptions{}.skinny_rows, profile = 0;
  std::vector<int> profile_batches{1};
  bool decode_kernels = CudaOptions{}.decode_kernels, group_prefill = CudaOptions{}.group_prefill;
  int prefill_seqs = 1, invariant_tokens = CudaOptions{}.invariant_tokens, profile_prefill = 0, max_model_len = 0;
  std::string modes = "graphs,eager";
  std::vector<int> batches{1, 4, 16}, prefills;
  auto int_list = [](const std::string& v) {
    std::vector<int> out;
    std::stringstream ss(v);
    for (std::string b; std::getline(ss, b, ',');) out.push_back(std::stoi(b));
    return out;
  };
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--prompt") prompt = std::stoi(v);
    else if (a == "--decode") decode = std::stoi(v);
    else if (a == "--json") json_path = v;
    else if (a == "--kv-cache-dtype") kv = v;
    else if (a == "--skinny-rows") skinny = std::stoi(v);
    else if (a == "--modes") modes = v;
    else if (a == "--decode-kernels") decode_kernels = std::stoi(v) != 0;
    else if (a == "--profile") profile = std::stoi(v);
    else if (a == "--profile-batch") profile_batches = int_list(v);
    else if (a == "--pdl") tandem::kernels::set_programmatic_launch(std::stoi(v) != 0);
    else if (a == "--batches") batches = v == "none" ? std::vector<int>{} : int_list(v);
    else if (a == "--prefill") prefills = int_list(v);
    else if (a == "--prefill-seqs") prefill_seqs = std::max(1, std::stoi(v));
    else if (a == "--group-prefill") group_prefill = std::stoi(v) != 0;
    else if (a == "--invariant-tokens") invariant_tokens = std::stoi(v);
    else if (a == "--profile-prefill") profile_prefill = std::stoi(v);
    else if (a == "--max-model-len") max_model_len = std::stoi(v);
    else fail("unknown flag " + a);
  }
  int max_batch = 1, max_prefill = prompt;
  for (int b : profile_batches) {
    if (b < 1) fail("--profile-batch needs batches of at least 1");
    if (profile > 0) max_batch = std::max(max_batch, b);
  }
  for (int b : batches) max_batch = std::max(max_batch, b);
  for (int p : prefills) max_prefill = std::max(max_prefill, p);
  max_prefill = std::max(max_prefill, profile_prefill);
  if (!prefills.empty()) max_batch = std::max(max_batch, prefill_seqs);

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const double bw = copy_bandwidth();
  std::printf("GPU %s; device-to-device copy: %.0f GB/s (read + write)\n", prop.name, bw / 1e9);

  CudaOptions opt;
  opt.kv_cache_dtype = kv;
  opt.max_num_seqs = max_batch;
  opt.max_num_batched_tokens = max_prefill * (prefills.empty() ? 1 : prefill_seqs);
  opt.max_model_len = std::max(prompt + decode + 16, max_prefill + 16);
  opt.skinny_rows = skinny;
  opt.decode_kernels = decode_kernels;
  opt.group_prefill = group_prefill;
  opt.invariant_tokens = invariant_tokens;
  opt.max_model_len += 2 * profile;
  if (max_model_len > 0 && max_model_len < opt.max_model_len)
    fail("--max-model-len " + std::to_string(max_model_len) + " is below what this run needs (" + std::to_string(opt.max_model_len) + ")");
  opt.max_model_len = std::max(opt.max_model_len, max_model_len);
  const auto t_load = Clock::now();
  auto loaded = load_cuda_model(dir, opt);
  if (!loaded) fail(loaded.error().message);
  CudaModel& m = *loaded.value();
  const double load_s = seconds_since(t_load);
  // Decode sequences hold prompt + decode tokens each; a long prefill (--prefill) is one sequence
  // over the same blocks.
  const int block = 16, per_seq = (prompt + decode + 2 * profile + 16 + block - 1) / block;
  const int prefill_blocks = (max_prefill + 16 + block - 1) / block;
  const int prompt_seqs = prefills.empty() ? 1 : prefill_seqs;
  if (auto s = m.make_device_pool(std::max(max_batch * per_seq, prefill_blocks * prompt_seqs), block); !s) fail(s.error().message);
  const DecodeBytes db = m.decode_bytes();
  std::printf("model %s: %.2f GB of weights on the device (%s), loaded in %.1f s; a batch-1 decode step reads %.3f GB of "
              "them; KV %llu bytes/token\n",
              dir.c_str(), static_cast<double>(m.weight_bytes()) / 1e9, m.weight_formats().c_str(), load_s, db.weights(1) / 1e9,
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
  std::vector<std::vector<int32_t>> prefill_tables(static_cast<size_t>(prompt_seqs));
  for (int s = 0; s < prompt_seqs; ++s)
    for (int b = 0; b < prefill_blocks; ++b) prefill_tables[static_cast<size_t>(s)].push_back(s * prefill_blocks + b);

  // Prefill: `seqs` prompts of `len` tokens per step, `runs` timed after `warmups`; seconds per run.
  auto prefill_seconds = [&](int len, int warmups, int runs, int seqs = 1) {
    double total = 0;
    for (int r = 0; r < warmups + runs; ++r) {
      std::vector<std::vector<int32_t>> ids;
      std::vector<PagedWork> w;
      for (int s = 0; s < seqs; ++s) ids.push_back(random_ids(len));
      for (int s = 0; s < seqs; ++s) w.push_back({ids[static_cast<size_t>(s)], 0, prefill_tables[static_cast<size_t>(s)], true, s});
      const auto t0 = Clock::now();
      auto out = m.step_greedy(w);
      if (!out) fail("prefill of " + std::to_string(len) + " tokens: " + out.error().message);
      if (r >= warmups) total += seconds_since(t0);
    }
    return total / runs;
  };
  const int prefill_runs = 3;
  const double prefill_tps = prompt / prefill_seconds(prompt, 1, prefill_runs);
  std::printf("prefill: %d tokens per step, %.0f tokens/s\n", prompt, prefill_tps);

  nlohmann::json doc;
  doc["gpu"] = prop.name;
  doc["copy_bandwidth_GBps"] = bw / 1e9;
  doc["model"] = {{"dir", dir},
                  {"weight_bytes", m.weight_bytes()},
                  {"weight_formats", m.weight_formats()},
                  {"decode_weight_bytes_batch1", db.weights(1)},
                  {"decode_fixed_bytes", db.fixed},
                  {"expert_bytes", db.per_expert},
                  {"moe_layers", db.moe_layers},
                  {"experts", db.experts},
                  {"top_k", db.top_k},
                  {"kv_bytes_per_token", m.kv_bytes_per_token()},
                  {"kv_cache_dtype", kv}};
  doc["prompt"] = prompt;
  doc["max_model_len"] = opt.max_model_len;
  doc["skinny_rows"] = skinny;
  doc["decode_kernels"] = decode_kernels;
  doc["programmatic_launch"] = tandem::kernels::programmatic_launch();
  doc["decode_steps"] = decode;
  doc["prefill_tok_s"] = prefill_tps;
  auto save = [&] {
    if (!json_path.empty()) std::ofstream(json_path) << doc.dump(1) << "\n";
  };
  save();
  std::printf("\n| batch | mode | decode tok/s | ms/step | floor tok/s | %% of floor |\n|---|---|---|---|---|---|\n");
  for (const bool eager : {false, true}) {
    if (modes.find(eager ? "eager" : "graphs") == std::string::npos) continue;
    m.set_enforce_eager(eager);
    for (int B : batches) {
      Decoder dec(m, B, prompt, tables, random_ids);
      auto one_step = [&](int i) { dec.step(prompt + i); };
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
      save();
    }
  }
  m.set_enforce_eager(false);
  doc["prefill_seqs"] = prompt_seqs;
  doc["group_prefill"] = group_prefill;
  doc["invariant_tokens"] = invariant_tokens;
  for (int len : prefills) {
    const bool long_one = len >= 8192;
    const double s = prefill_seconds(len, long_one ? 0 : 1, long_one ? 1 : prefill_runs, prompt_seqs);
    const double tokens = static_cast<double>(len) * prompt_seqs;
    std::printf("prefill: %d x %d tokens, %.1f ms, %.0f tokens/s%s\n", prompt_seqs, len, 1e3 * s, tokens / s,
                long_one ? " (one run, no warm-up)" : "");
    doc["prefill"].push_back({{"tokens", len}, {"seqs", prompt_seqs}, {"ms", 1e3 * s}, {"tok_s", tokens / s},
                              {"runs", long_one ? 1 : prefill_runs}, {"warmup", !long_one}});
    save();
  }
  for (const int profile_batch : profile > 0 ? profile_batches : std::vector<int>{}) {
    // Batch `profile_batch` from the benchmark's mean context: prefill `prompt`, decode `decode` / 2
    // steps, then profile `profile` steps eagerly and `profile` graph replays.
    Decoder dec(m, profile_batch, prompt, tables, random_ids);
    int pos = prompt;
    m.set_enforce_eager(false);
    for (int i = 0; i < decode / 2; ++i) dec.step(pos++);
    EventTimer timer;
    m.set_op_timer(&timer);
    m.set_enforce_eager(true);
    timer.queue_ahead = true;
    for (int i = 0; i < profile; ++i) dec.step(pos++), timer.end_step();
    const auto eager_ops = timer.ops;
    timer.ops.clear();
    m.set_enforce_eager(false);
    timer.queue_ahead = false;
    for (int i = 0; i < profile; ++i) dec.step(pos++), timer.end_step();
    const auto graph_ops = timer.ops;
    m.set_op_timer(nullptr);
    if (timer.failed_marks > 0)
      std::printf("warning: %d op marks dropped (CUDA could not create or record an event): the profile is incomplete\n",
                  timer.failed_marks);

    std::printf("\nProfile: batch %d, context %d..%d, %d eager steps (ops queued ahead, CUDA events between them), "
                "decode kernels %s; GB/s = bytes the op must move / its time\n\n",
                profile_batch, prompt + decode / 2, pos, profile, decode_kernels ? "on" : "off");
    nlohmann::json prof;
    prof["batch"] = profile_batch;
    prof["eager_ops"] = op_table(eager_ops, profile);
    std::printf("\nGraph replays (%d steps): ", profile);
    for (const auto& [op, o] : graph_ops) {
      std::printf("%s %.1f us/step; ", op.c_str(), o.us / profile);
      prof["graph_ops"][op] = o.us / profile;
    }
    const double floor_bytes =
        db.weights(profile_batch) + profile_batch * (pos - profile) * static_cast<double>(m.kv_bytes_per_token());
    std::printf("floor of this step: %.1f us (%.0f MB at %.0f GB/s)\n", 1e6 * floor_bytes / bw, floor_bytes / 1e6, bw / 1e9);
    prof["floor_us"] = 1e6 * floor_bytes / bw;
    doc["profile"] = prof;  // the last batch's (as with one --profile-batch); every batch's in "profiles"
    doc["profiles"].push_back(prof);
    save();
  }
  if (profile_prefill > 0) {
    // One prompt of profile_prefill tokens: a warm-up, then 3 steps with the op timer, queued ahead.
    (void)prefill_seconds(profile_prefill, 1, 1);
    EventTimer timer;
    m.set_op_timer(&timer);
    timer.queue_ahead = true;
    const int steps = 3;
    for (int i = 0; i < steps; ++i) (void)prefill_seconds(profile_prefill, 0, 1), timer.end_step();
    m.set_op_timer(nullptr);
    std::printf("\nPrefill profile: 1 x %d tokens, %d eager steps (ops queued ahead, CUDA events between them), decode "
                "kernels %s, invariant_tokens %d; GB/s = bytes the op must move / its time\n\n",
                profile_prefill, steps, decode_kernels ? "on" : "off", invariant_tokens);
    doc["prefill_profile"] = {{"tokens", profile_prefill}, {"ops", op_table(timer.ops, steps)}};
  }
  save();
  return 0;
}
