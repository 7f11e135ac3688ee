// A rule on which tokens may come next (structured output: a JSON document, a tool call's
// arguments). The engine calls mask() on the request's logits just before sampling and advance()
// with the sampled token right after, both on its worker thread; when finished() turns true after
// an advance, the request ends there (finish reason stop). engine/structured has the JSON one.
#pragma once
#include <cstdint>
#include <span>

namespace tandem::engine::runtime {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -infinity.
  virtual void mask(std::span<float> logits) = 0;
  virtual void advance(std::int32_t token) = 0;
  // The output is complete: nothing more may be generated.
  virtual bool finished() const = 0;
};

}  // namespace tandem::engine::runtime
