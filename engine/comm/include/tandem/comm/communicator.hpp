// What tensor-parallel ranks need from each other, and nothing more:
//   all_reduce_sum  partial results of row-parallel layers (attention output, MLP down, embedding)
//   all_gather      the vocabulary-parallel logits
//   broadcast       the head's instructions to its workers (what to run next, heartbeats)
// Every call is collective: each rank makes the same calls in the same order. A call that fails
// (a peer exited, a link went quiet past its timeout) leaves the communicator broken: every later
// call returns the same error at once, so a lost rank ends the group instead of hanging it.
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/result.hpp"

namespace tandem::comm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Element-wise sum over the ranks, in place. Every rank ends with the same bits: the sum is
  // made once, in rank order, and handed out.
  virtual Status all_reduce_sum(std::span<float> data) = 0;
  // Every rank's `mine` (sizes may differ per rank), concatenated in rank order.
  virtual Result<std::vector<float>> all_gather(std::span<const float> mine) = 0;
  // Rank 0's `message` to every rank (others' `message` is replaced). A non-root waits at most
  // `wait` for it: an idle worker hears heartbeats, so silence past `wait` means the head is gone.
  virtual Status broadcast(std::vector<std::uint8_t>& message, std::chrono::milliseconds wait) = 0;
};

// The group of one: every collective is the identity.
class SingleRank final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status all_reduce_sum(std::span<float>) override { return Ok{}; }
  Result<std::vector<float>> all_gather(std::span<const float> mine) override {
    return std::vector<float>(mine.begin(), mine.end());
  }
  Status broadcast(std::vector<std::uint8_t>&, std::chrono::milliseconds) override { return Ok{}; }
};

}  // namespace tandem::comm
