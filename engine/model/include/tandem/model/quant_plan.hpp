// Which projections a back end that computes on quantised weights (the CUDA model) keeps quantised,
// decided from how the checkpoint stores them (kernels/quant_weights.hpp has the formats). The CPU
// path dequantises everything on reading (Checkpoint::read); the CUDA model uploads a projection's
// quantised bytes and scales as they are when plan_projection says so, and dequantises to bf16
// otherwise. A projection is one or more checkpoint tensors the model stacks by rows (q_a | kv_a,
// gate | up, every expert of a layer): kept quantised only when every part is quantised in one
// format and the kernels take its inputs (a multiple of 16); else dense, with the reason.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/model/result.hpp"
#include "tandem/model/safetensors.hpp"

namespace tandem::model {

enum class WeightFormat { dense, fp8_block, nvfp4 };
const char* weight_format_name(WeightFormat f);

// One checkpoint tensor as stored, for a weight of logical shape [out][in].
struct StoredWeight {
  WeightFormat format = WeightFormat::dense;
  std::string name;
  std::int64_t out = 0, in = 0;
  const TensorInfo* data = nullptr;   // the weight (float dtype, fp8 bytes, or packed nibbles)
  const TensorInfo* scale = nullptr;  // fp8: <name>_scale_inv (F32 or BF16) [ceil(out/128)][ceil(in/128)];
                                      // nvfp4: <name>_scale (F8_E4M3) [out][in/16]
  float global_scale = 1.f;           // nvfp4: <name>_scale_2
};

// `name`'s format (detected as Checkpoint::read detects it) with its shape and its scales' shapes
// and dtypes checked; a dense tensor's shape is checked, its dtype is left to Checkpoint::read.
Result<StoredWeight> stored_weight(const Checkpoint& ck, const std::string& name, std::int64_t out, std::int64_t in);

struct ProjectionPart {
  std::string name;
  std::int64_t out = 0, in = 0;
};

struct ProjectionPlan {
  WeightFormat format = WeightFormat::dense;  // what the model keeps on the device
  std::vector<StoredWeight> parts;            // in the order asked for
  std::string why_dense;                      // set when some part is quantised but the whole is kept dense
};

// Errors: a part that is missing or malformed (stored_weight's errors).
Result<ProjectionPlan> plan_projection(const Checkpoint& ck, const std::vector<ProjectionPart>& parts);

}  // namespace tandem::model
