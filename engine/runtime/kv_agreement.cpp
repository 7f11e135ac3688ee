#include "kv_agreement.hpp"

#include <algorithm>
#include <vector>

namespace tandem::engine::runtime {

tandem::Result<std::int64_t> agree_kv_blocks(comm::Communicator& comm, std::int64_t mine, const std::function<void(const std::string&)>& log) {
  // The all-gather carries floats: a count as two parts below 2^20 and 2^24, each exact in a float.
  constexpr std::int64_t kLow = std::int64_t{1} << 20;
  if (mine < 1 || mine >= (std::int64_t{1} << 44)) return model::error("KV blocks: this rank's count " + std::to_string(mine) + " is out of range");
  const std::vector<float> parts{static_cast<float>(mine / kLow), static_cast<float>(mine % kLow)};
  auto all = comm.all_gather(parts);
  if (!all) return model::error("agreeing on the KV pool's size with the other ranks: " + all.error().message);
  if (all->size() != 2 * static_cast<std::size_t>(comm.size()))
    return model::error("agreeing on the KV pool's size: " + std::to_string(all->size()) + " values from " + std::to_string(comm.size()) +
                        " ranks, expected 2 each");
  std::int64_t least = mine;
  std::string each;
  for (int r = 0; r < comm.size(); ++r) {
    const auto n = static_cast<std::int64_t>((*all)[2 * static_cast<std::size_t>(r)]) * kLow +
                   static_cast<std::int64_t>((*all)[2 * static_cast<std::size_t>(r) + 1]);
    least = std::min(least, n);
    each += (r ? ", rank " : "rank ") + std::to_string(r) + " " + std::to_string(n);
  }
  if (log)
    log("KV pool: the ranks' flags allow " + each + " blocks; the group takes " + std::to_string(least) +
        " (rank 0's block tables address every rank's pool)");
  return least;
}

}  // namespace tandem::engine::runtime
