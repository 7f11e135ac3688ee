// A build without the CUDA back end (no nvcc found): the NCCL communicator is not in it, and saying
// so is the whole behaviour: `--device cuda` and TP over NCCL fail with this message at start.
#include "tandem/comm/nccl_communicator.hpp"

namespace tandem::comm {

std::string NcclCommunicator::nccl_version() { return "not built"; }
bool nccl_built() { return false; }
int cuda_device_count() { return 0; }

Result<std::unique_ptr<NcclCommunicator>> make_nccl_communicator(const NcclOptions&) {
  return Error{"NCCL: this tandem-serve was built without the CUDA back end (no nvcc at configure time)"};
}

Result<std::unique_ptr<NcclCommunicator>> connect_nccl(const NcclOptions& options) { return make_nccl_communicator(options); }

}  // namespace tandem::comm
