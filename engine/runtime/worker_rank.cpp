#include "worker_rank.hpp"

#include <functional>
#include <memory>
#include <span>
#include <vector>
#include <algorithm>

#include "kv_agreement.hpp"
#include "rank_messages.hpp"
#include "tandem/model/paged_kv.hpp"

namespace tandem::engine::runtime {

using model::error;

namespace {

// A CPU worker's part of each sequence's recurrent state (glm5_next), in the slots the head names:
// zeroed when a sequence starts at token 0, kept aside before a verification and put back before
// its rollback's forward (StateOp), loaded from and kept in the prefix copies, all as the head does
// with its own part. Slots and copies are bounded by what a head can name (max_num_seqs, the
// copies it announced), so a malformed message cannot make this rank allocate without limit.
class WorkerStates {
 public:
  explicit WorkerStates(long floats) : floats_(static_cast<size_t>(floats)) {}
  void set_copies(int n) { copies_.assign(static_cast<size_t>(std::max(n, 0)), {}); }

  tandem::Result<std::span<float>> before_forward(const RankMessage& m) {
    if (floats_ == 0) return std::span<float>();
    if (m.state_slot < 0 || m.state_slot >= kMaxSlots) return error("recurrent state slot " + std::to_string(m.state_slot) + " out of range");
    const auto i = static_cast<size_t>(m.state_slot);
    if (live_.size() <= i) live_.resize(i + 1), kept_.resize(i + 1);
    auto& live = live_[i];
    if (live.size() != floats_ || m.start == 0) live.assign(floats_, 0.f);
    const auto op = static_cast<StateOp>(m.state_op);
    if (op == StateOp::keep) kept_[i] = live;
    if (op == StateOp::restore) {
      if (kept_[i].size() != floats_) return error("restoring recurrent state slot " + std::to_string(i) + ", which was never kept");
      live = kept_[i];
    }
    if (m.state_load >= 0) {
      if (static_cast<size_t>(m.state_load) >= copies_.size() || copies_[static_cast<size_t>(m.state_load)].size() != floats_)
        return error("resuming from kept recurrent state " + std::to_string(m.state_load) + ", which this rank does not hold");
      live = copies_[static_cast<size_t>(m.state_load)];
    }
    if (m.state_save >= 0 && static_cast<size_t>(m.state_save) >= copies_.size())
      return error("keeping recurrent state " + std::to_string(m.state_save) + ": the pool message announced " +
                   std::to_string(copies_.size()));
    return std::span<float>(live);
  }
  void after_forward(const RankMessage& m) {
    if (floats_ > 0 && m.state_save >= 0) copies_[static_cast<size_t>(m.state_save)] = live_[static_cast<size_t>(m.state_slot)];
  }

 private:
  static constexpr int kMaxSlots = 4096;  // tandem-serve's --max-num-seqs limit
  size_t floats_;
  std::vector<std::vector<float>> live_, kept_, copies_;
};

// The head's pool message: this rank's block count agreed with the group, then the pool on the
// device (null returned) or a host pool of fp32 rows (returned), and a device model's kept states.
tandem::Result<std::unique_ptr<model::PagedKvPool>> make_pools(model::Model& model, const WorkerOptions& o, const RankMessage& msg,
                                                               const std::function<void(const std::string&)>& log) {
  std::int64_t mine = msg.num_blocks;
  if (o.own_kv_blocks) {
    auto own = o.own_kv_blocks(msg.block_size);
    if (!own) return error("sizing this rank's KV pool: " + own.error().message);
    mine = own.value();
  }
  auto agreed = agree_kv_blocks(model.comm(), mine, log);
  if (!agreed) return agreed.error();
  const auto blocks = static_cast<std::int32_t>(agreed.value());
  if (model.kv_on_device()) {
    if (auto s = model.make_device_pool(blocks, msg.block_size); !s) return error("the device KV pool: " + s.error().message);
    log("KV pool: " + std::to_string(blocks) + " blocks of " + std::to_string(msg.block_size) + " tokens on the device");
    if (msg.state_snapshots > 0)
      if (auto s = model.make_state_snapshots(msg.state_snapshots); !s)
        return error("the kept recurrent states for prefix caching: " + s.error().message);
    return std::unique_ptr<model::PagedKvPool>();
  }
  auto p = model::PagedKvPool::create(model.kv_layout(), blocks, msg.block_size);
  if (!p) return error("the KV pool: " + p.error().message);
  log("KV pool: " + std::to_string(blocks) + " blocks of " + std::to_string(msg.block_size) + " tokens (" +
      std::to_string(p.value()->bytes() >> 20) + " MiB of fp32 rows on this rank)");
  return std::move(p).value();
}

}  // namespace

tandem::Status run_worker_rank(model::Model& model, const WorkerOptions& o) {
  const std::function<void(const std::string&)> log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  comm::Communicator& comm = model.comm();
  std::unique_ptr<model::PagedKvPool> pool;
  bool pooled = false;  // a device model's pool
  WorkerStates states(model.kv_layout().state_floats);
  std::int64_t forwards = 0;
  while (true) {
    std::vector<std::uint8_t> bytes;
    if (auto s = comm.broadcast(bytes, o.head_silence); !s) return error("lost rank 0: " + s.error().message);
    auto msg = decode(bytes);
    if (!msg) return msg.error();
    switch (msg->op) {
      case RankOp::heartbeat: break;
      case RankOp::shutdown:
        log("rank 0 is shutting down (" + msg->reason + "); " + std::to_string(forwards) + " forwards run");
        return tandem::Ok{};
      case RankOp::pool: {
        if (!model.kv_on_device()) states.set_copies(msg->state_snapshots);
        auto made = make_pools(model, o, *msg, log);
        if (!made) return made.error();
        pool = std::move(made).value();
        pooled = !pool;
        break;
      }
      case RankOp::device_step: {
        if (!pooled) return error("rank 0 asked for a device step before sizing the KV pool");
        std::vector<model::PagedWork> work;
        for (const StepItem& it : msg->items) {
          model::PagedWork w;
          w.tokens = it.tokens, w.start = it.start, w.block_table = it.table, w.logits = it.logits != 0;
          w.state_slot = it.state_slot, w.all_logits = it.all_logits != 0;
          w.state_load = it.state_load, w.state_save = it.state_save;
          work.push_back(w);
        }
        // A DFlash verification on a recurrent model: this rank's part of the states, as the head's.
        if (!msg->keep_states.empty())
          if (auto s = model.keep_states(msg->keep_states); !s) return error("keeping states before step " + std::to_string(forwards + 1) + ": " + s.error().message);
        if (!msg->restore_states.empty())
          if (auto s = model.restore_states(msg->restore_states); !s)
            return error("restoring states before step " + std::to_string(forwards + 1) + ": " + s.error().message);
        // The logits are rank 0's to sample; this rank's part was its collectives.
        if (auto s = model.step(work); !s) return error("step " + std::to_string(forwards + 1) + ": " + s.error().message);
        ++forwards;
        break;
      }
      case RankOp::forward: {
        if (!pool) return error("rank 0 asked for a forward before sizing the KV pool");
        const int n = static_cast<int>(msg->tokens.size());
        if (n == 0) return error("rank 0 asked for a forward of no tokens");
        auto state = states.before_forward(*msg);
        if (!state) return error("forward " + std::to_string(forwards + 1) + ": " + state.error().message);
        model::PagedKvSequence seq(*pool, msg->table, msg->start, state.value());
        std::vector<std::int32_t> positions(static_cast<size_t>(n));
        for (int t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = msg->start + t;
        std::vector<int> rows;
        for (int r = n - msg->logit_rows; r < n; ++r) rows.push_back(r);
        auto logits = model.forward(msg->tokens, positions, seq, rows);
        if (!logits) return error("forward " + std::to_string(forwards + 1) + ": " + logits.error().message);
        states.after_forward(*msg);
        ++forwards;
        break;
      }
    }
  }
}

}  // namespace tandem::engine::runtime
