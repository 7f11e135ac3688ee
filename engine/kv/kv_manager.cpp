#include "kv_manager.hpp"

#include <cstdio>
#include <stdexcept>

namespace tandem::engine::kv {

StateSlots::StateSlots(std::int32_t num_slots) : num_slots_(num_slots) {
  for (std::int32_t s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<std::int32_t> StateSlots::acquire() {
  if (free_.empty()) return std::nullopt;
  auto s = free_.back();
  free_.pop_back();
  return s;
}

void StateSlots::release(std::int32_t slot) { free_.push_back(slot); }

KvManager::KvManager(std::int32_t num_blocks, int block_size, bool prefix_cache, std::int32_t state_slots,
                     int state_snapshots)
    : pool_(num_blocks, block_size),
      states_(state_slots),
      prefix_cache_(prefix_cache),
      recurrent_(state_snapshots >= 0),
      snapshots_(prefix_cache ? state_snapshots : 0) {}

std::optional<int> KvManager::admit(SeqId id, std::span<const Token> prompt, bool use_prefix_cache) {
  // Invariant: sequence ids come from the engine's own counter, never from a request.
  if (seqs_.count(id)) throw std::logic_error("KvManager: sequence admitted twice");
  Seq seq;
  if (states_.num_slots() > 0) {
    seq.state_slot = states_.acquire();
    if (!seq.state_slot) return std::nullopt;
  }
  seq.cacheable = prefix_cache_ && use_prefix_cache;
  // A sequence that bypasses the cache neither reads nor publishes: its blocks stay private.
  if (seq.cacheable && !prompt.empty()) {
    const size_t bs = static_cast<size_t>(block_size());
    const size_t usable = (prompt.size() - 1) / bs;  // keep >= 1 token to compute
    std::vector<std::uint64_t> chain(usable);
    for (size_t i = 0; i < usable; ++i) chain[i] = BlockPool::chain_hash(i ? chain[i - 1] : 0, prompt.subspan(i * bs, bs));
    for (size_t i = 0; i < usable; ++i) {
      auto b = pool_.lookup(chain[i], prompt.subspan(i * bs, bs));
      if (!b) break;
      seq.blocks.push_back(*b);
      seq.hashes.push_back(chain[i]);
    }
    if (recurrent_) cut_to_kept_state(seq, prompt, chain);
    seq.written = static_cast<int>(seq.blocks.size() * bs);
    // The prompt's last boundary: a later prompt that extends this one (the next turn of a chat,
    // an agent's next call) starts from there.
    const int last = static_cast<int>(usable * bs);
    if (recurrent_ && snapshots_.capacity() > 0 && last > seq.written &&
        !snapshots_.contains(chain[usable - 1], prompt.first(static_cast<size_t>(last))))
      seq.state_boundary = last;
  }
  int cached = seq.written;
  seqs_.emplace(id, std::move(seq));
  return cached;
}

void KvManager::cut_to_kept_state(Seq& seq, std::span<const Token> prompt, const std::vector<std::uint64_t>& chain) {
  const size_t bs = static_cast<size_t>(block_size());
  size_t k = seq.blocks.size();
  for (; k > 0; --k)
    if ((seq.state_load = snapshots_.acquire(chain[k - 1], prompt.first(k * bs)))) break;
  // Release in reverse, as release() does, so the tail of a prefix is evicted before its head.
  while (seq.blocks.size() > k) {
    pool_.release(seq.blocks.back());
    seq.blocks.pop_back();
    seq.hashes.pop_back();
  }
}

std::optional<int> KvManager::take_state_load(SeqId id) {
  Seq& s = seqs_.at(id);
  if (!s.state_load || s.state_loading) return std::nullopt;
  s.state_loading = true;
  return s.state_load;
}

std::optional<int> KvManager::begin_state_save(SeqId id) {
  Seq& s = seqs_.at(id);
  if (s.state_boundary == 0 || s.state_save) return std::nullopt;
  s.state_save = snapshots_.reserve();
  if (!s.state_save) s.state_boundary = 0;  // every copy in use: this admission keeps none
  return s.state_save;
}

void KvManager::drop_state_pins(Seq& s) {
  if (s.state_load) snapshots_.unpin(*s.state_load);
  if (s.state_save) snapshots_.abandon(*s.state_save);
  s.state_load.reset();
  s.state_save.reset();
  s.state_loading = false;
}

std::int32_t KvManager::blocks_needed(SeqId id, int n) const {
  const Seq& s = seqs_.at(id);
  const std::int64_t need_tokens = s.written + n;
  const std::int64_t need_blocks = (need_tokens + block_size() - 1) / block_size();
  const std::int64_t extra = need_blocks - static_cast<std::int64_t>(s.blocks.size());
  return extra > 0 ? static_cast<std::int32_t>(extra) : 0;
}

bool KvManager::reserve(SeqId id, int n) {
  const std::int32_t extra = blocks_needed(id, n);
  if (extra > pool_.num_available()) return false;
  Seq& s = seqs_.at(id);
  for (std::int32_t i = 0; i < extra; ++i) s.blocks.push_back(*pool_.allocate());
  return true;
}

void KvManager::advance(SeqId id, std::span<const Token> tokens, int new_len) {
  Seq& s = seqs_.at(id);
  // Invariant: the scheduler advances only within what reserve() granted and the tokens it holds.
  if (new_len > static_cast<int>(s.blocks.size()) * block_size() || new_len > static_cast<int>(tokens.size()))
    throw std::logic_error("KvManager: advance beyond reserved blocks or known tokens");
  s.written = new_len;
  // The step that read the kept state has run: the copy may be replaced from now on.
  if (s.state_loading) {
    snapshots_.unpin(*s.state_load);
    s.state_load.reset();
    s.state_loading = false;
  }
  if (!s.cacheable) return;
  const size_t bs = static_cast<size_t>(block_size());
  const size_t full = static_cast<size_t>(new_len) / bs;
  while (s.hashes.size() < full) {
    const size_t i = s.hashes.size();
    auto chunk = tokens.subspan(i * bs, bs);
    const std::uint64_t h = BlockPool::chain_hash(i ? s.hashes[i - 1] : 0, chunk);
    pool_.publish(s.blocks[i], h, chunk);
    s.hashes.push_back(h);
  }
  // The step that ended at the boundary has written its copy of the state (scheduler: a save
  // stops the chunk there, so no step passes the boundary without ending on it).
  if (s.state_save && new_len >= s.state_boundary) {
    const auto blocks = static_cast<size_t>(s.state_boundary) / bs;
    snapshots_.commit(*s.state_save, s.hashes[blocks - 1], tokens.first(static_cast<size_t>(s.state_boundary)));
    s.state_save.reset();
    s.state_boundary = 0;  // once per admission
  }
}

void KvManager::trim(SeqId id) {
  Seq& s = seqs_.at(id);
  const size_t keep = static_cast<size_t>((s.written + block_size() - 1) / block_size());
  while (s.blocks.size() > keep) {
    pool_.release(s.blocks.back());
    s.blocks.pop_back();
  }
}

void KvManager::release(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Release in reverse so the tail of a prefix is evicted before its head.
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) pool_.release(*b);
  if (it->second.state_slot) states_.release(*it->second.state_slot);
  drop_state_pins(it->second);
  seqs_.erase(it);
}

namespace {
std::string with_commas(std::int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}
}  // namespace

PoolSize size_pool(const KvGeometry& g, std::uint64_t budget_bytes, int max_model_len) {
  PoolSize p;
  p.block_size = g.block_size;
  p.max_model_len = max_model_len;
  const std::uint64_t per_token =
      static_cast<std::uint64_t>(g.num_layers) * static_cast<std::uint64_t>(g.elems_per_token) *
      static_cast<std::uint64_t>(g.bytes_per_elem);
  const std::uint64_t per_block = per_token * static_cast<std::uint64_t>(g.block_size);
  if (per_block == 0) return p;
  p.num_blocks = static_cast<std::int64_t>(budget_bytes / per_block);
  p.tokens = p.num_blocks * g.block_size;
  if (max_model_len > 0) p.requests_at_max_len = static_cast<double>(p.tokens) / max_model_len;
  return p;
}

std::string PoolSize::describe() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", requests_at_max_len);
  return "KV pool: " + with_commas(tokens) + " tokens in " + with_commas(num_blocks) + " blocks of " +
         std::to_string(block_size) + ", " + buf + " requests at max-model-len " + std::to_string(max_model_len);
}

}  // namespace tandem::engine::kv
