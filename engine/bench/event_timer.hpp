// CUDA events between a CUDA model's op marks (OpTimer): where a step's device time goes.
// tandem-bench-cuda --profile and tandem_spec_bench --probe (decode vs verification steps) use it.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tandem/model/cuda_model.hpp"

namespace tandem::bench {

// The model's op marks as CUDA events; after a step, the time between a mark and the one before it
// is charged to the later mark's op. With queue_ahead, "start" first parks the stream behind a host
// function that sleeps, so the whole eager step is queued before the GPU starts on it.
class EventTimer final : public model::OpTimer {
 public:
  struct Op {
    int calls = 0;
    double us = 0, bytes = 0;
    int order = 0;
  };
  bool queue_ahead = false;
  int failed_marks = 0;  // marks dropped because CUDA could not create or record an event

  ~EventTimer() override {
    for (auto e : events_) cudaEventDestroy(e);
  }
  void mark(const char* op, double bytes, kernels::Stream stream) override {
    auto* st = reinterpret_cast<cudaStream_t>(stream);
    if (queue_ahead && std::string(op) == "start")
      cudaLaunchHostFunc(st, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }, nullptr);
    // A failed event would leave a hole in the step's timeline: drop the mark, count the failure.
    if (used_ == events_.size()) {
      cudaEvent_t e;
      if (cudaEventCreate(&e) != cudaSuccess) return void(++failed_marks);
      events_.push_back(e);
    }
    if (cudaEventRecord(events_[used_], st) != cudaSuccess) return void(++failed_marks);
    ++used_;
    marks_.push_back({op, bytes});
  }
  // After the step's last mark and a synchronisation: fold its marks into the totals.
  void end_step() {
    cudaDeviceSynchronize();
    for (std::size_t i = 1; i < used_; ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events_[i - 1], events_[i]);
      auto [it, fresh] = ops.try_emplace(marks_[i].first);
      if (fresh) it->second.order = static_cast<int>(ops.size());
      it->second.calls += 1, it->second.us += 1e3 * ms, it->second.bytes += marks_[i].second;
    }
    used_ = 0;
    marks_.clear();
  }
  std::map<std::string, Op> ops;

 private:
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
  std::vector<std::pair<std::string, double>> marks_;
};

}  // namespace tandem::bench
