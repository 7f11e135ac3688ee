// The DFlash drafter on the GPU (tandem_spec_cuda, built with the CUDA back end): the same math as
// the CPU drafter (dflash_drafter.cpp; notes in engine/spec_decode/README.md) on the CUDA kernels
// (cuBLASLt GEMMs, RMSNorm, rotary, SiLU-and-mul, paged attention), batched over sequences, reading
// the target's captured hidden states and sharing its embedding and LM head on the device.
#pragma once
#include <filesystem>
#include <memory>

#include "tandem/model/cuda_model.hpp"
#include "tandem/spec/device_drafter.hpp"

namespace tandem::spec {

struct DFlashCudaOptions {
  int max_num_seqs = 256;             // sequences per proposal
  int max_num_batched_tokens = 2048;  // tokens per target step (context rows per add_context)
  int max_model_len = 0;              // sizes block tables; 0: the target's max_position_embeddings
  bool enforce_eager = false;         // true: proposals never replay CUDA graphs
};

// Loads <drafter_dir> (config.json + safetensors) onto the target's device and turns on the
// target's capture of the drafter's layers (CudaModel::set_capture). `target` must outlive it.
// Refused by name: drafters with input_embedding_scale / output_multiplier other than 1 or a
// logit soft cap (the CPU drafter has them; no published DFlash drafter uses them).
tandem::Result<std::unique_ptr<DeviceDrafter>> load_dflash_cuda(const std::filesystem::path& drafter_dir,
                                                               model::CudaModel& target, const DFlashCudaOptions& options);

}  // namespace tandem::spec
