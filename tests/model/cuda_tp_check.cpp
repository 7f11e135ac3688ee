// The CUDA decoder split over tensor-parallel ranks against itself at one rank, on the same device
// (engine/bench/gpu-tp.sh runs it: one process per rank, two ranks sharing one GPU through the
// host-staged transport). Each run decodes the same batch greedily:
//   --ranks 1 [--groups N] --out F  TP1, plain or computing as N ranks do (CudaOptions::
//                                   reduction_groups): writes every step's logits and tokens to F
//                                   (and, with --reference, its teacher-forced pass to F.forced)
//   --ranks 2 --rank R --port P     TP2
// With --reference F (plain TP1's run; every rank reads it), two passes:
//     teacher-forced            fed F's tokens, so every row is comparable: relative error
//                               max|ours - F| / max|F| per row within the CUDA bar (1e-2, as
//                               cuda_model_check holds the device to), and each row's greedy token
//                               F's, except where F's top two are within the bar (a near-tie: TP2
//                               adds the ranks' partial sums in another order than plain TP1)
//     free-running              its own greedy tokens: how many equal F's (reported)
// With --identical G (a run in the matching mode: TP1 with --groups 2 for TP2, or the same mode
// eagerly for a run with graphs): the free-running tokens and logits equal G's bit for bit, and the
// teacher-forced ones G.forced's where both ran one.
// --eager 0 replays CUDA graphs for decode steps (at one rank, or over NCCL; the host-staged
// all-reduce cannot be captured, so its ranks stay eager). Both times the decode step at batch 1
// and 16 and, at TP > 1, the device all-reduce itself at the sizes a step sums (hidden rows,
// logits rows), into --timing (JSON). Exit 0: all checks passed; 1: one failed; 2: could not run;
// 77: no CUDA device. --time 0 leaves the timing out.
// --hold S then keeps decoding fresh batches for S seconds (after a line "decoding until killed" on
// stderr): gpu-tp.sh kills one rank with -9 there, and the other must end within seconds with an
// error naming the lost peer (exit 3).
// Models with a recurrent state (glm5_next) get state slot b for sequence b of a batch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "tandem/comm/nccl_communicator.hpp"
#include "tandem/model/comm_all_reduce.hpp"
#include "tandem/model/cuda_model.hpp"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model, out, reference, identical, timing, transport = "host";
  int ranks = 1, rank = 0, port = 0, steps = 12, batch = 4, time = 1, hold = 0;  // --time 0: checks only (memcheck)
  int groups = 1, eager = 1;
};

struct Run {
  std::vector<float> logits;           // every step's rows, [steps + 1][batch][vocab]
  std::vector<std::int32_t> tokens;    // the greedy choice of each row
};

int argmax(const float* row, int n) { return static_cast<int>(std::max_element(row, row + n) - row); }

// A batch of sequences, each in its own blocks; prefill then greedy decode steps.
class Batch {
 public:
  Batch(model::CudaModel& m, int batch, int first_block, int blocks_each) : m_(m), tokens_(static_cast<std::size_t>(batch)) {
    const int V = m.vocab_size();
    for (int b = 0; b < batch; ++b) {
      auto& t = tokens_[static_cast<std::size_t>(b)];
      for (int i = 0; i < 5 + b % 4; ++i) t.push_back((13 * i + 7 * b + 1) % V);
      std::vector<std::int32_t> table;
      for (int k = 0; k < blocks_each; ++k) table.push_back(first_block + b * blocks_each + k);
      tables_.push_back(table);
    }
  }
  // One step: the whole prompt (first call) or the last token of each sequence; rows [batch, V].
  // The next tokens are the rows' greedy choices, or forced[b] (teacher forcing).
  tandem::Result<std::vector<float>> step(const std::int32_t* forced = nullptr) {
    std::vector<model::PagedWork> work;
    for (std::size_t b = 0; b < tokens_.size(); ++b) {
      const auto& t = tokens_[b];
      const int start = started_ ? static_cast<int>(t.size()) - 1 : 0;
      work.push_back({std::span<const std::int32_t>(t).subspan(static_cast<std::size_t>(start)), start, tables_[b], true,
                      static_cast<int>(b)});
    }
    started_ = true;
    auto rows = m_.step(work);
    if (!rows) return rows;
    const int V = m_.vocab_size();
    for (std::size_t b = 0; b < tokens_.size(); ++b)
      tokens_[b].push_back(forced ? forced[b] : argmax(rows->data() + b * static_cast<std::size_t>(V), V));
    return rows;
  }

 private:
  model::CudaModel& m_;
  std::vector<std::vector<std::int32_t>> tokens_, tables_;
  bool started_ = false;
};

bool write_run(const std::string& path, const Run& r) {
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t n = r.logits.size(), t = r.tokens.size();
  f.write(reinterpret_cast<const char*>(&n), 8).write(reinterpret_cast<const char*>(&t), 8);
  f.write(reinterpret_cast<const char*>(r.logits.data()), static_cast<std::streamsize>(n * 4));
  f.write(reinterpret_cast<const char*>(r.tokens.data()), static_cast<std::streamsize>(t * 4));
  return static_cast<bool>(f);
}

bool read_run(const std::string& path, Run& r) {
  std::ifstream f(path, std::ios::binary);
  std::uint64_t n = 0, t = 0;
  if (!f.read(reinterpret_cast<char*>(&n), 8) || !f.read(reinterpret_cast<char*>(&t), 8) || n > (1ull << 32) || t > (1ull << 24)) return false;
  r.logits.resize(n), r.tokens.resize(t);
  f.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(n * 4));
  f.read(reinterpret_cast<char*>(r.tokens.data()), static_cast<std::streamsize>(t * 4));
  return static_cast<bool>(f);
}

// How many of a's rows (of `width` entries, or tokens at width 1) equal b's exactly (== per entry:
// a rank's logits are 0 + x after the vocabulary gather, so -0 and +0 compare equal).
template <class T>
std::size_t rows_equal(const std::vector<T>& a, const std::vector<T>& b, std::size_t width) {
  std::size_t same = 0;
  for (std::size_t r = 0; r * width < std::min(a.size(), b.size()); ++r)
    same += std::equal(a.begin() + static_cast<long>(r * width), a.begin() + static_cast<long>((r + 1) * width),
                       b.begin() + static_cast<long>(r * width));
  return same;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

// long-function: a TP check script, read top to bottom: flags, rank group, load, checked runs, then timing.
int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--out") a.out = v;
    else if (k == "--reference") a.reference = v;
    else if (k == "--identical") a.identical = v;
    else if (k == "--groups") a.groups = std::stoi(v);
    else if (k == "--eager") a.eager = std::stoi(v);
    else if (k == "--timing") a.timing = v;
    else if (k == "--transport") a.transport = v;
    else if (k == "--ranks") a.ranks = std::stoi(v);
    else if (k == "--rank") a.rank = std::stoi(v);
    else if (k == "--port") a.port = std::stoi(v);
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--time") a.time = std::stoi(v);
    else if (k == "--hold") a.hold = std::stoi(v);
    else return std::fprintf(stderr, "unknown flag %s\n", k.c_str()), 2;
  }
  if (auto there = model::cuda_model_available(); !there) return std::printf("skip: %s\n", there.error().text().c_str()), 77;
  if (a.model.empty()) return std::fprintf(stderr, "--model DIR is required\n"), 2;
  const std::string me = "rank " + std::to_string(a.rank) + "/" + std::to_string(a.ranks);

  comm::SingleRank alone;
  std::unique_ptr<comm::NcclCommunicator> group;
  if (a.ranks > 1) {
    comm::NcclOptions o;
    o.control.rank = a.rank, o.control.size = a.ranks, o.control.master_port = a.port;
    o.control.rendezvous_timeout = std::chrono::seconds(60), o.control.peer_timeout = std::chrono::seconds(10);
    o.control.fingerprint = "cuda_tp_check " + a.model;
    o.control.log = [me](const std::string& line) { std::fprintf(stderr, "[%s] %s\n", me.c_str(), line.c_str()); };
    auto t = comm::parse_device_transport(a.transport);
    if (!t) return std::fprintf(stderr, "--transport auto|nccl|host\n"), 2;
    o.transport = *t;
    auto g = comm::make_nccl_communicator(o);
    if (!g) return std::fprintf(stderr, "%s: %s\n", me.c_str(), g.error().message.c_str()), 2;
    group = std::move(g).value();
  }
  comm::Communicator& comm = group ? static_cast<comm::Communicator&>(*group) : alone;

  model::CudaOptions opt;
  opt.max_num_seqs = 16, opt.max_num_batched_tokens = 256, opt.max_model_len = 256;
  opt.enforce_eager = a.eager != 0;  // (host-staged collectives cannot be captured: those ranks run eagerly)
  opt.reduction_groups = a.ranks == 1 ? a.groups : 1;
  auto loaded = model::load_cuda_model(a.model, opt, comm);
  if (!loaded) return std::fprintf(stderr, "%s: loading %s: %s\n", me.c_str(), a.model.c_str(), loaded.error().message.c_str()), 2;
  model::CudaModel& m = *loaded.value();
  std::unique_ptr<model::CommAllReduce> ar;
  if (group) {
    if (auto s = group->rendezvous(); !s) return std::fprintf(stderr, "%s: %s\n", me.c_str(), s.error().message.c_str()), 2;
    ar = std::make_unique<model::CommAllReduce>(*group);
    m.set_all_reduce(ar.get());
  }
  const int V = m.vocab_size(), H = m.config().decoder().hidden_size, L = m.config().decoder().num_hidden_layers;
  constexpr int kBlock = 16, kBlocksEach = 256 / kBlock, kMaxBatch = 16;
  // Blocks for the checked batch (twice: forced and free-running) and the two timed ones (1 and 16).
  if (auto s = m.make_device_pool((2 * a.batch + 1 + kMaxBatch) * kBlocksEach, kBlock); !s)
    return std::fprintf(stderr, "%s: %s\n", me.c_str(), s.error().message.c_str()), 2;

  Run ref;
  if (!a.reference.empty() && (!read_run(a.reference, ref) || ref.tokens.size() != static_cast<std::size_t>((a.steps + 1) * a.batch) ||
                               ref.logits.size() != ref.tokens.size() * static_cast<std::size_t>(V)))
    return std::fprintf(stderr, "%s: the reference %s does not match this run's shape\n", me.c_str(), a.reference.c_str()), 2;
  // The checked runs: free-running, then (with a reference) fed the reference's tokens.
  auto decode = [&](bool forced, int first_block) -> tandem::Result<Run> {
    Run run;
    Batch batch(m, a.batch, first_block, kBlocksEach);
    for (int s = 0; s <= a.steps; ++s) {
      auto rows = batch.step(forced ? ref.tokens.data() + static_cast<std::size_t>(s * a.batch) : nullptr);
      if (!rows) return model::error("step " + std::to_string(s) + ": " + rows.error().message);
      run.logits.insert(run.logits.end(), rows->begin(), rows->end());
      for (std::size_t b = 0; b < static_cast<std::size_t>(a.batch); ++b)
        run.tokens.push_back(argmax(rows->data() + b * static_cast<std::size_t>(V), V));
    }
    return run;
  };
  auto free_run = decode(false, 0);
  if (!free_run) return std::fprintf(stderr, "%s: %s\n", me.c_str(), free_run.error().message.c_str()), 2;
  const Run& run = free_run.value();

  int failures = 0;
  nlohmann::json result = {{"model", a.model}, {"ranks", a.ranks}, {"transport", group ? group->transport() : "none (one rank)"},
                           {"batch", a.batch}, {"steps", a.steps}, {"reduction_groups", a.ranks > 1 ? a.ranks : a.groups},
                           {"graphs", !a.eager && (!group || !group->host_staged())}};
  if (a.rank == 0 && !a.out.empty() && !write_run(a.out, run)) return std::fprintf(stderr, "cannot write %s\n", a.out.c_str()), 2;
  Run forced;
  if (!a.reference.empty()) {
    auto forced_run = decode(true, a.batch * kBlocksEach);
    if (!forced_run) return std::fprintf(stderr, "%s: teacher-forced: %s\n", me.c_str(), forced_run.error().message.c_str()), 2;
    forced = std::move(forced_run).value();
    if (a.rank == 0 && !a.out.empty() && !write_run(a.out + ".forced", forced))
      return std::fprintf(stderr, "cannot write %s.forced\n", a.out.c_str()), 2;
    constexpr double kBar = 1e-2;
    double worst = 0;
    std::size_t agree = 0, near_ties = 0;
    const std::size_t rows = forced.tokens.size();
    for (std::size_t r = 0; r < rows; ++r) {
      const float* ours = forced.logits.data() + r * static_cast<std::size_t>(V);
      const float* theirs = ref.logits.data() + r * static_cast<std::size_t>(V);
      double diff = 0, scale = 0;
      for (int v = 0; v < V; ++v) {
        diff = std::max(diff, static_cast<double>(std::fabs(ours[v] - theirs[v])));
        scale = std::max(scale, static_cast<double>(std::fabs(theirs[v])));
      }
      worst = std::max(worst, scale > 0 ? diff / scale : diff);
      if (forced.tokens[r] == ref.tokens[r]) {
        ++agree;
      } else {
        std::vector<float> sorted(theirs, theirs + V);
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        const bool tie = (sorted[0] - sorted[1]) <= kBar * scale;
        near_ties += tie;
        if (a.rank == 0)
          std::printf("  note row %zu (step %zu, sequence %zu): TP2 token %d, TP1 token %d; TP1's top two %.4g apart, %s\n", r,
                      r / static_cast<std::size_t>(a.batch), r % static_cast<std::size_t>(a.batch), forced.tokens[r], ref.tokens[r],
                      static_cast<double>(sorted[0] - sorted[1]), tie ? "a near-tie (within the bar)" : "NOT a near-tie");
      }
    }
    std::size_t same = 0;
    for (std::size_t i = 0; i < run.tokens.size(); ++i) same += run.tokens[i] == ref.tokens[i];
    const bool logits_ok = worst <= kBar, tokens_ok = agree + near_ties == rows;
    if (a.rank == 0) {
      std::printf("  %s logits (teacher-forced): worst relative error %.3e vs TP1 over %zu rows (bar 1e-2)\n", logits_ok ? "ok  " : "FAIL",
                  worst, rows);
      std::printf("  %s greedy token per row (teacher-forced): %zu of %zu TP1's, %zu other(s) at TP1 near-ties\n",
                  tokens_ok ? "ok  " : "FAIL", agree, rows, near_ties);
      std::printf("  note free-running greedy: %zu of %zu tokens identical to TP1\n", same, run.tokens.size());
    }
    failures += !logits_ok + !tokens_ok;
    result["worst_relative_error"] = worst, result["rows"] = rows, result["rows_greedy_agree"] = agree;
    result["rows_near_tie"] = near_ties, result["free_running_identical"] = same, result["tokens"] = run.tokens.size();
    result["logits_ok"] = logits_ok, result["tokens_ok"] = tokens_ok;
  }
  if (!a.identical.empty()) {
    // Bit for bit against the run in the matching mode: free-running, then teacher-forced.
    Run same_free, same_forced;
    if (!read_run(a.identical, same_free) || same_free.tokens.size() != run.tokens.size() || same_free.logits.size() != run.logits.size())
      return std::fprintf(stderr, "%s: %s does not match this run's shape\n", me.c_str(), a.identical.c_str()), 2;
    const bool with_forced = !forced.tokens.empty();
    if (with_forced && (!read_run(a.identical + ".forced", same_forced) || same_forced.tokens.size() != forced.tokens.size() ||
                        same_forced.logits.size() != forced.logits.size()))
      return std::fprintf(stderr, "%s: %s.forced does not match this run's shape\n", me.c_str(), a.identical.c_str()), 2;
    const std::size_t rows = run.tokens.size(), v = static_cast<std::size_t>(V);
    const std::size_t free_tokens = rows_equal(run.tokens, same_free.tokens, 1), free_logits = rows_equal(run.logits, same_free.logits, v);
    const std::size_t forced_tokens = with_forced ? rows_equal(forced.tokens, same_forced.tokens, 1) : 0;
    const std::size_t forced_logits = with_forced ? rows_equal(forced.logits, same_forced.logits, v) : 0;
    const bool ok = free_tokens == rows && free_logits == rows && (!with_forced || (forced_tokens == rows && forced_logits == rows));
    if (a.rank == 0) {
      std::printf("  %s bit-identical to %s: free-running tokens %zu / %zu, logit rows %zu / %zu", ok ? "ok  " : "FAIL",
                  a.identical.c_str(), free_tokens, rows, free_logits, rows);
      if (with_forced) std::printf("; teacher-forced tokens %zu / %zu, logit rows %zu / %zu", forced_tokens, rows, forced_logits, rows);
      std::printf("\n");
    }
    failures += !ok;
    result["identical_to"] = a.identical, result["identical_ok"] = ok, result["identical_free_tokens"] = free_tokens;
    result["identical_free_logit_rows"] = free_logits, result["identical_forced"] = with_forced;
    result["identical_forced_tokens"] = forced_tokens, result["identical_forced_logit_rows"] = forced_logits;
  }

  // Timing: decode steps at batch 1 and 16 (fresh sequences past a prefill), and the collectives.
  int first = 2 * a.batch * kBlocksEach;
  for (int B : a.time ? std::vector<int>{1, kMaxBatch} : std::vector<int>{}) {
    Batch t(m, B, first, kBlocksEach);
    first += B * kBlocksEach;
    // The prefill, and a first decode step (which captures the graph of this batch when graphs are on).
    for (int w = 0; w < 2; ++w)
      if (auto r = t.step(); !r) return std::fprintf(stderr, "%s: timing warm-up: %s\n", me.c_str(), r.error().message.c_str()), 2;
    constexpr int kSteps = 30;
    const auto t0 = Clock::now();
    for (int s = 0; s < kSteps; ++s)
      if (auto r = t.step(); !r) return std::fprintf(stderr, "%s: timing step: %s\n", me.c_str(), r.error().message.c_str()), 2;
    const double step_ms = ms_since(t0) / kSteps;
    nlohmann::json j = {{"decode_step_ms", step_ms}};
    if (group) {
      // The sums one decode step of B tokens makes: the embedding rows (bf16) and two per layer
      // (fp32, hidden wide), and the logits rows (fp32, vocabulary wide).
      void* dev = nullptr;
      const std::size_t hidden = static_cast<std::size_t>(B) * static_cast<std::size_t>(H), logits = static_cast<std::size_t>(B) * static_cast<std::size_t>(V);
      if (cudaMalloc(&dev, logits * 4 + hidden * 4) != cudaSuccess) return std::fprintf(stderr, "%s: cudaMalloc\n", me.c_str()), 2;
      cudaMemset(dev, 0, logits * 4 + hidden * 4);
      auto time = [&](std::size_t n, kernels::DType type) -> double {
        constexpr int kCalls = 100;
        const auto c0 = Clock::now();
        for (int c = 0; c < kCalls; ++c)
          if (auto s = ar->all_reduce_sum(dev, n, type, m.stream()); !s) return -1;
        return ms_since(c0) / kCalls;
      };
      const double h32 = time(hidden, kernels::DType::f32), h16 = time(hidden, kernels::DType::bf16), lg = time(logits, kernels::DType::f32);
      cudaFree(dev);
      if (h32 < 0 || h16 < 0 || lg < 0) return std::fprintf(stderr, "%s: timing the all-reduce failed\n", me.c_str()), 2;
      j["all_reduce_hidden_f32_ms"] = h32, j["all_reduce_hidden_bf16_ms"] = h16, j["all_reduce_logits_ms"] = lg;
      j["all_reduces_per_step"] = 2 * L + 2;
      j["all_reduce_ms_per_step"] = h16 + 2.0 * L * h32 + lg;
    }
    result["batch_" + std::to_string(B)] = j;
    std::printf("  %s batch %d: decode step %.3f ms%s\n", me.c_str(), B, step_ms,
                group ? (", all-reduce per step " + std::to_string(j["all_reduce_ms_per_step"].get<double>()) + " ms").c_str() : "");
  }
  if (a.rank == 0 && !a.timing.empty()) std::ofstream(a.timing) << result.dump(2) << "\n";
  if (a.hold > 0) {
    std::fprintf(stderr, "[%s] decoding until killed (at most %d s)\n", me.c_str(), a.hold);
    const auto t0 = Clock::now();
    while (ms_since(t0) < a.hold * 1000.0) {
      Batch b(m, a.batch, 0, kBlocksEach);
      for (int s = 0; s <= a.steps; ++s)
        if (auto r = b.step(); !r) {
          std::fprintf(stderr, "[%s] decoding ended after %.1f s: %s\n", me.c_str(), ms_since(t0) / 1000.0, r.error().message.c_str());
          return 3;
        }
    }
  }
  return failures ? 1 : 0;
}
