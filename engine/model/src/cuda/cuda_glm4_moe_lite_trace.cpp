// The GLM decoder on CUDA (glm4_moe_lite's and glm4_moe's), the traced step (cuda_model.hpp's StepTrace): the step runs eagerly and,
// at each trace point the forward passes, the stream is drained and the value copied to the host.
// Slow by design and never inside a CUDA graph: it exists so that one GPU run can name the first
// layer and op where the device parts from the CPU reference (cuda_model_check --trace).
#include <cstring>

#include "tandem/model/cuda/cuda_decoder.hpp"
#include "tandem/kernels/dtype.hpp"
#include "tandem/kernels/cuda_check.hpp"

namespace tandem::model::cuda {

namespace {

// rows x width values (bf16 or fp32) with row stride ld (elements), widened to fp32.
Status copy_rows(std::vector<float>& to, const void* src, int rows, int width, long ld, bool bf16, cudaStream_t s) {
  const std::size_t el = bf16 ? 2 : 4;
  std::vector<unsigned char> raw(static_cast<std::size_t>(rows) * static_cast<std::size_t>(width) * el);
  FirstError err;
  err(TANDEM_CUDA_STATUS(cudaStreamSynchronize(s), "trace: the step"));
  if (rows > 0)
    err(TANDEM_CUDA_STATUS(cudaMemcpy2D(raw.data(), static_cast<std::size_t>(width) * el, src, static_cast<std::size_t>(ld) * el,
                                static_cast<std::size_t>(width) * el, static_cast<std::size_t>(rows), cudaMemcpyDeviceToHost),
                   "trace: copy"));
  if (!err.ok()) return err.status;
  to.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(width));
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (bf16) {
      std::uint16_t b = 0;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      to[i] = k::bf16_to_float(b);
    } else {
      std::memcpy(&to[i], raw.data() + 4 * i, 4);
    }
  }
  return {};
}

}  // namespace

Status GlmDecoderCuda::trace(TracePoint what, int layer, int T) {
  if (!trace_) return {};
  StepTrace& t = *trace_;
  const std::size_t layers = static_cast<std::size_t>(d_.num_hidden_layers);
  for (auto* v : {&t.latent, &t.after_attention, &t.after_ffn}) v->resize(layers);
  t.experts.resize(layers), t.expert_weights.resize(layers);
  t.tokens = T;
  switch (what) {
    case TracePoint::latent:
      return copy_rows(t.latent[static_cast<std::size_t>(layer)], fused_.as<std::uint16_t>() + q_rows_, T, width_, in_rows_, true,
                       stream_);
    case TracePoint::after_attention:
      trace_layer_ = layer;
      return copy_rows(t.after_attention[static_cast<std::size_t>(layer)], x_.get(), T, H_, H_, false, stream_);
    case TracePoint::after_ffn:
      return copy_rows(t.after_ffn[static_cast<std::size_t>(layer)], x_.get(), T, H_, H_, false, stream_);
    case TracePoint::routing: {
      // The MoE runs between its layer's after_attention and after_ffn points.
      const std::size_t l = static_cast<std::size_t>(trace_layer_);
      std::vector<float> ids;
      if (auto e = copy_rows(ids, expert_.get(), T, K_, K_, false, stream_); !e) return e;
      t.experts[l].resize(ids.size());
      for (std::size_t i = 0; i < ids.size(); ++i) std::memcpy(&t.experts[l][i], &ids[i], 4);  // int32 bits, as copied
      return copy_rows(t.expert_weights[l], weight_.get(), T, K_, K_, false, stream_);
    }
  }
  return {};
}

Result<StepTrace> GlmDecoderCuda::step_traced(std::span<const PagedWork> work) {
  // (A traced point inside a layer would be one slice's, not the layer's.)
  if (slices_ > 1) return error("step_traced: not with reduction groups (CudaOptions::reduction_groups)");
  StepTrace t;
  const bool eager = opt_.enforce_eager;
  opt_.enforce_eager = true, trace_ = &t, trace_layer_ = 0;
  auto logits = step(work);
  opt_.enforce_eager = eager, trace_ = nullptr;
  if (!logits) return logits.error();
  t.logits = std::move(logits).value();
  return t;
}

}  // namespace tandem::model::cuda
