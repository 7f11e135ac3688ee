// A model that says its KV cache is on a device, as the CUDA model does, so the engine takes the
// device path (make_device_pool, one batched step() per scheduler step, a device drafter). Its
// "device" is a host pool and the CPU reference's forward, so that path runs, and is checked,
// without a GPU. Like the CUDA model it also
//   - keeps a recurrent state (glm5_next) in `state_slots` slots: the one PagedWork::state_slot
//     names, which two items of a step may not share, reset by a step that starts at token 0,
//     kept aside and restored for speculative rollback (keep_states / restore_states), and copied
//     to and from kept states for prefix caching (PagedWork::state_load before a step, state_save
//     after it);
//   - captures the residual stream after `capture_layers` for every token of a step, in the
//     items' order, when a drafter asks;
//   - counts the steps that read back only each row's sampled token (step_sample) and those that
//     read back the logits (step).
#pragma once
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tandem/model/model.hpp"
#include "tandem/model/paged_kv.hpp"

namespace tandem::engine::runtime::test {

class HostDeviceModel final : public model::Model {
 public:
  explicit HostDeviceModel(std::unique_ptr<model::Model> inner, int state_slots = 0)
      : Model(inner->config(), inner->comm()), inner_(std::move(inner)),
        states_(static_cast<size_t>(state_slots), std::vector<float>(static_cast<size_t>(inner_->kv_layout().state_floats))),
        kept_(states_) {}

  model::KvLayout kv_layout() const override { return inner_->kv_layout(); }
  bool kv_on_device() const override { return true; }
  tandem::Status make_device_pool(std::int32_t num_blocks, int block_size) override {
    auto p = model::PagedKvPool::create(kv_layout(), num_blocks, block_size);
    if (!p) return p.error();
    pool_ = std::move(p).value();
    return Ok{};
  }

  // Counts the steps sampled where the logits are (the engine's unconstrained steps) apart from
  // those that read the logits back.
  Result<std::vector<kernels::Sampled>> step_sample(std::span<const model::PagedWork> work, std::span<const kernels::SamplingParams> params,
                                                    std::span<const double> uniforms) override {
    ++sample_steps;
    picking_ = true;
    auto picks = Model::step_sample(work, params, uniforms);
    picking_ = false;
    return picks;
  }

  Result<std::vector<float>> step(std::span<const model::PagedWork> work) override {
    if (!picking_) ++logit_steps;
    largest_step = std::max(largest_step, work.size());
    std::vector<float> logits;
    std::set<int> in_step;
    captured.clear();
    for (const auto& w : work) {
      std::span<float> state;
      if (kv_layout().state_floats > 0) {
        if (w.state_slot < 0 || w.state_slot >= static_cast<int>(states_.size()) || !in_step.insert(w.state_slot).second)
          return Error{"HostDeviceModel: state slot " + std::to_string(w.state_slot) + " missing, out of range or shared"};
        auto& st = states_[static_cast<size_t>(w.state_slot)];
        if (w.start == 0) std::fill(st.begin(), st.end(), 0.f);
        state = st;
        slots_used.insert(w.state_slot);
      }
      if (w.state_load >= 0) {
        if (w.state_load >= static_cast<int>(snapshots_.size())) return Error{"HostDeviceModel: no kept state " + std::to_string(w.state_load)};
        std::copy(snapshots_[static_cast<size_t>(w.state_load)].begin(), snapshots_[static_cast<size_t>(w.state_load)].end(), state.begin());
        ++state_loads;
      }
      model::PagedKvSequence seq(*pool_, w.block_table, w.start, state);
      std::vector<std::int32_t> pos(w.tokens.size());
      std::vector<int> rows;
      for (size_t i = 0; i < pos.size(); ++i) {
        pos[i] = w.start + static_cast<std::int32_t>(i);
        if (w.all_logits || (w.logits && i + 1 == pos.size())) rows.push_back(static_cast<int>(i));
      }
      if (w.all_logits) ++verifications;
      model::HiddenCapture cap;
      cap.layers = capture_layers;
      auto l = inner_->forward(w.tokens, pos, seq, rows, capture_layers.empty() ? nullptr : &cap);
      if (!l) return l.error();
      if (w.state_save >= 0) {
        if (w.state_save >= static_cast<int>(snapshots_.size())) return Error{"HostDeviceModel: no kept state " + std::to_string(w.state_save)};
        snapshots_[static_cast<size_t>(w.state_save)].assign(state.begin(), state.end());
        ++state_saves;
      }
      logits.insert(logits.end(), l->begin(), l->end());
      captured.insert(captured.end(), cap.rows.begin(), cap.rows.end());
    }
    return logits;
  }

  bool restores_states() const override { return kv_layout().state_floats > 0 && !states_.empty(); }
  tandem::Status keep_states(std::span<const int> slots) override {
    for (int s : slots) {
      if (s < 0 || s >= static_cast<int>(states_.size())) return Error{"keep_states: no slot " + std::to_string(s)};
      kept_[static_cast<size_t>(s)] = states_[static_cast<size_t>(s)];
    }
    return Ok{};
  }
  tandem::Status restore_states(std::span<const int> slots) override {
    for (int s : slots) {
      if (s < 0 || s >= static_cast<int>(states_.size())) return Error{"restore_states: no slot " + std::to_string(s)};
      states_[static_cast<size_t>(s)] = kept_[static_cast<size_t>(s)];
      ++restores;
    }
    return Ok{};
  }

  bool snapshots_states() const override { return kv_layout().state_floats > 0 && !states_.empty(); }
  tandem::Status make_state_snapshots(int count) override {
    snapshots_.assign(static_cast<size_t>(count), std::vector<float>(static_cast<size_t>(kv_layout().state_floats)));
    return Ok{};
  }

  size_t largest_step = 0;        // items in the largest step() call
  int state_loads = 0, state_saves = 0;  // kept states copied into / out of slots
  int sample_steps = 0;           // steps asked for each row's sampled token (step_sample)
  int logit_steps = 0;            // steps asked for the rows' logits (step)
  int verifications = 0;          // items asking for every row's logits
  int restores = 0;               // slots put back by restore_states
  std::set<int> slots_used;       // state slots any step named
  std::vector<int> capture_layers;
  std::vector<float> captured;    // the last step's capture: tokens x (layers x hidden)

 protected:
  Result<std::vector<float>> hidden_states(std::span<const int32_t>, model::KvSequence&, model::HiddenCapture*) const override {
    return Error{"HostDeviceModel runs through step()"};
  }
  const float* lm_head() const override { return nullptr; }

 private:
  std::unique_ptr<model::Model> inner_;
  std::unique_ptr<model::PagedKvPool> pool_;
  std::vector<std::vector<float>> states_, kept_, snapshots_;
  bool picking_ = false;
};

}  // namespace tandem::engine::runtime::test
