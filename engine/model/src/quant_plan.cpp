// Projection formats for back ends that keep quantised weights quantised (quant_plan.hpp).
#include "tandem/model/quant_plan.hpp"

#include <cstring>

#include "tandem/kernels/quant_weights.hpp"

namespace tandem::model {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::fp8_block: return "fp8 (128x128 blocks)";
    case WeightFormat::nvfp4: return "NVFP4";
    case WeightFormat::dense: break;
  }
  return "dense";
}

Result<StoredWeight> stored_weight(const Checkpoint& ck, const std::string& name, std::int64_t out, std::int64_t in) {
  StoredWeight w;
  w.name = name, w.out = out, w.in = in;
  w.data = ck.find(name);
  if (!w.data) return error("missing tensor '" + name + "' (expected shape " + shape_str({out, in}) + ")");
  const TensorInfo& t = *w.data;
  if (t.dtype == "F8_E4M3" && ck.has(name + "_scale_inv")) {
    w.format = WeightFormat::fp8_block;
    if (t.shape != std::vector<int64_t>{out, in})
      return error(t.file + ": fp8 tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str({out, in}));
    const int64_t b = kernels::kFp8Block;
    const std::vector<int64_t> want{(out + b - 1) / b, (in + b - 1) / b};
    w.scale = ck.find(name + "_scale_inv");
    if ((w.scale->dtype != "F32" && w.scale->dtype != "BF16") || w.scale->shape != want)
      return error(w.scale->file + ": fp8 block scales '" + w.scale->name + "' are " + w.scale->dtype + " " +
                   shape_str(w.scale->shape) + ", expected F32 or BF16 " + shape_str(want));
    return w;
  }
  if (t.dtype == "U8" && ck.has(name + "_scale") && ck.has(name + "_scale_2")) {
    w.format = WeightFormat::nvfp4;
    if (in % kernels::kNvfp4Group != 0 || t.shape != std::vector<int64_t>{out, in / 2})
      return error(t.file + ": NVFP4 tensor '" + name + "' has packed shape " + shape_str(t.shape) + ", expected " +
                   shape_str({out, in / 2}) + " for weights " + shape_str({out, in}) + " (inputs a multiple of 16)");
    w.scale = ck.find(name + "_scale");
    const std::vector<int64_t> want{out, in / kernels::kNvfp4Group};
    if (w.scale->dtype != "F8_E4M3" || w.scale->shape != want)
      return error(w.scale->file + ": NVFP4 scales '" + w.scale->name + "' are " + w.scale->dtype + " " +
                   shape_str(w.scale->shape) + ", expected F8_E4M3 " + shape_str(want));
    const TensorInfo* g = ck.find(name + "_scale_2");
    if (g->dtype != "F32" || g->nbytes != 4)
      return error(g->file + ": NVFP4 global scale '" + g->name + "' must be one F32 (is " + g->dtype + " " +
                   shape_str(g->shape) + ")");
    std::memcpy(&w.global_scale, g->data, 4);
    return w;
  }
  if (t.shape != std::vector<int64_t>{out, in})
    return error(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str({out, in}));
  return w;
}

Result<ProjectionPlan> plan_projection(const Checkpoint& ck, const std::vector<ProjectionPart>& parts) {
  ProjectionPlan plan;
  for (const ProjectionPart& p : parts) {
    auto w = stored_weight(ck, p.name, p.out, p.in);
    if (!w) return w.error();
    plan.parts.push_back(std::move(w.value()));
  }
  if (plan.parts.empty()) return plan;
  const StoredWeight& first = plan.parts.front();
  bool any_quantised = false;
  for (const StoredWeight& w : plan.parts) any_quantised = any_quantised || w.format != WeightFormat::dense;
  if (!any_quantised) return plan;
  for (const StoredWeight& w : plan.parts) {
    if (w.format != first.format) {
      plan.why_dense = "'" + first.name + "' is " + weight_format_name(first.format) + " but '" + w.name + "' is " +
                       weight_format_name(w.format) + " (the parts of one projection must share a format)";
      return plan;
    }
    if (w.in % 16 != 0) {
      plan.why_dense = "'" + w.name + "' has " + std::to_string(w.in) + " inputs (the quantised kernels need a multiple of 16)";
      return plan;
    }
  }
  plan.format = first.format;
  return plan;
}

}  // namespace tandem::model
