// Embedding gather: out[t] = table[ids[t]] (rows of `hidden` entries). An id outside
// [0, vocab) gives a row of zeros on every back end (the engine refuses such ids before they get
// here; the kernel must still not read outside the table).
#pragma once
#include <cstdint>
#include <string>

#include "tandem/kernels/dtype.hpp"
#include "tandem/result.hpp"

namespace tandem::kernels {

void embedding_cpu(const float* table, int vocab, int hidden, const std::int32_t* ids, int n, float* out);

// CUDA back end on device buffers of type `t` (f32 or bf16 table and out; ids int32).
Status embedding_cuda(DType t, const void* table, int vocab, int hidden, const std::int32_t* ids, int n,
                           void* out, Stream stream = nullptr);

}  // namespace tandem::kernels
