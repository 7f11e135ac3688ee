// The GPU decoders' DeviceAllReduce (cuda_model.hpp) over a joined NcclCommunicator, whichever
// transport its rendezvous chose (NCCL, or host-staged over the TCP group for ranks on one GPU).
#pragma once
#include "tandem/comm/nccl_communicator.hpp"
#include "tandem/model/cuda_model.hpp"

namespace tandem::model {

class CommAllReduce final : public DeviceAllReduce {
 public:
  explicit CommAllReduce(comm::NcclCommunicator& group) : group_(group) {}
  Status all_reduce_sum(void* data, std::size_t count, kernels::DType type, kernels::Stream stream) override {
    if (type != kernels::DType::f32 && type != kernels::DType::bf16)
      return error("device all-reduce: only fp32 and bf16 buffers are summed");
    auto s = group_.all_reduce_sum_device(data, count, type == kernels::DType::bf16 ? comm::DeviceDType::bf16 : comm::DeviceDType::f32,
                                          stream);
    if (!s) return error(s.error().message);
    return Ok{};
  }
  bool capturable() const override { return !group_.host_staged(); }
  Status wait(kernels::Stream stream) override {
    auto s = group_.wait_device(stream);
    if (!s) return error(s.error().message);
    return Ok{};
  }

 private:
  comm::NcclCommunicator& group_;
};

}  // namespace tandem::model
