#include "rank_messages.hpp"

#include <cstring>

namespace tandem::engine::runtime {

namespace {

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void put(const std::vector<std::int32_t>& v) {
    put(static_cast<std::uint32_t>(v.size()));
    const auto* p = reinterpret_cast<const std::uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(std::int32_t));
  }
  std::vector<std::uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> b) : b_(b) {}
  template <class T>
  bool get(T& v) {
    if (b_.size() - at_ < sizeof v) return false;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return true;
  }
  bool get(std::vector<std::int32_t>& v) {
    std::uint32_t n = 0;
    if (!get(n) || (b_.size() - at_) / sizeof(std::int32_t) < n) return false;
    v.resize(n);
    std::memcpy(v.data(), b_.data() + at_, n * sizeof(std::int32_t));
    at_ += n * sizeof(std::int32_t);
    return true;
  }
  bool get_rest(std::string& s) {
    s.assign(reinterpret_cast<const char*>(b_.data() + at_), b_.size() - at_);
    at_ = b_.size();
    return true;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::span<const std::uint8_t> b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<std::uint8_t> encode(const RankMessage& m) {
  Writer w;
  w.put(static_cast<std::uint8_t>(m.op));
  switch (m.op) {
    case RankOp::pool:
      w.put(m.num_blocks);
      w.put(m.block_size);
      w.put(m.state_snapshots);
      break;
    case RankOp::forward:
      w.put(m.start);
      w.put(m.logit_rows);
      w.put(m.state_slot);
      w.put(m.state_load);
      w.put(m.state_save);
      w.put(m.state_op);
      w.put(m.tokens);
      w.put(m.table);
      break;
    case RankOp::device_step:
      w.put(static_cast<std::uint32_t>(m.items.size()));
      for (const StepItem& it : m.items) {
        w.put(it.start);
        w.put(it.state_slot);
        w.put(it.state_load);
        w.put(it.state_save);
        w.put(it.logits);
        w.put(it.all_logits);
        w.put(it.tokens);
        w.put(it.table);
      }
      w.put(m.keep_states);
      w.put(m.restore_states);
      break;
    case RankOp::shutdown:
      w.out.insert(w.out.end(), m.reason.begin(), m.reason.end());
      break;
    case RankOp::heartbeat: break;
  }
  return std::move(w.out);
}

tandem::Result<RankMessage> decode(std::span<const std::uint8_t> bytes) {
  Reader r(bytes);
  RankMessage m;
  std::uint8_t op = 0;
  if (!r.get(op)) return model::error("rank message: empty");
  m.op = static_cast<RankOp>(op);
  bool ok = true;
  switch (m.op) {
    case RankOp::pool: ok = r.get(m.num_blocks) && r.get(m.block_size) && r.get(m.state_snapshots); break;
    case RankOp::forward:
      ok = r.get(m.start) && r.get(m.logit_rows) && r.get(m.state_slot) && r.get(m.state_load) && r.get(m.state_save) &&
           r.get(m.state_op) && r.get(m.tokens) && r.get(m.table) && m.logit_rows >= 0 &&
           static_cast<size_t>(m.logit_rows) <= m.tokens.size() && m.state_op <= static_cast<std::uint8_t>(StateOp::restore);
      break;
    case RankOp::device_step: {
      std::uint32_t n = 0;
      ok = r.get(n) && n <= bytes.size();  // each item takes bytes: a count past them is malformed
      for (std::uint32_t i = 0; ok && i < n; ++i) {
        StepItem it;
        ok = r.get(it.start) && r.get(it.state_slot) && r.get(it.state_load) && r.get(it.state_save) && r.get(it.logits) && r.get(it.all_logits) && r.get(it.tokens) && r.get(it.table);
        m.items.push_back(std::move(it));
      }
      ok = ok && r.get(m.keep_states) && r.get(m.restore_states);
      break;
    }
    case RankOp::shutdown: ok = r.get_rest(m.reason); break;
    case RankOp::heartbeat: break;
    default: return model::error("rank message: unknown operation " + std::to_string(op) + " (the ranks run different builds?)");
  }
  if (!ok || !r.done()) return model::error("rank message: malformed (" + std::to_string(bytes.size()) + " bytes)");
  return m;
}

}  // namespace tandem::engine::runtime
