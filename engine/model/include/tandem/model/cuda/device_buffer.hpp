// Owning device allocations and their upload from a checkpoint: a tensor already stored in bf16
// is copied as it is (from the memory map), anything else is converted on the host first.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/kernels/dtype.hpp"
#include "tandem/model/safetensors.hpp"
#include "tandem/kernels/cuda_check.hpp"
#include "tandem/model/shard.hpp"

namespace tandem::model::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_, bytes_ = o.bytes_;
      o.p_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Ok, or why not (the size in the message).
  Status allocate(std::size_t bytes, const std::string& what) {
    reset();
    if (bytes == 0) return {};
    if (auto e = TANDEM_CUDA_STATUS(cudaMalloc(&p_, bytes),
                                    "cannot allocate " + std::to_string(bytes >> 20) + " MiB of device memory for " + what);
        !e) {
      (void)cudaGetLastError();
      p_ = nullptr;
      return e;
    }
    bytes_ = bytes;
    return {};
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr, bytes_ = 0;
  }
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return p_ == nullptr; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Fills device buffers from a checkpoint, remembering the first error and the bytes uploaded.
class Uploader {
 public:
  explicit Uploader(const Checkpoint& ck) : ck_(ck) {}

  // `count` bf16 entries at element `at` of dst from tensor `name` of `shape` (count = its size).
  void bf16(DeviceBuffer& dst, std::size_t at, const std::string& name, const std::vector<int64_t>& shape) {
    if (!status_) return;
    const TensorInfo* t = ck_.find(name);
    if (t && t->dtype == "BF16" && t->shape == shape) {
      put(dst, at * 2, t->data, t->nbytes, name);
      return;
    }
    auto v = ck_.read(name, shape);
    if (!v) return fail(v.error());
    bf16_from(dst, at, v.value(), name);
  }
  // A tensor-parallel rank's slice (shard.hpp): rows [r.begin, r.end) of the first dimension (of a
  // 3-D tensor, whole [*, ...] slabs), or columns [c.begin, c.end) of a 2-D tensor. A bf16 tensor's
  // rows are copied straight from the memory map; anything else is read whole (one tensor at a
  // time, never the checkpoint) and sliced on the host.
  void bf16_rows(DeviceBuffer& dst, std::size_t at, const std::string& name, const std::vector<int64_t>& shape, Range r) {
    if (!status_ || !slice_fits(name, shape, 0, r)) return;
    const TensorInfo* t = ck_.find(name);
    const std::size_t row = shape.empty() || shape[0] == 0 ? 0 : elements(shape) / static_cast<std::size_t>(shape[0]);
    if (t && t->dtype == "BF16" && t->shape == shape) {
      put(dst, at * 2, t->data + static_cast<std::size_t>(r.begin) * row * 2,
          static_cast<std::size_t>(r.size()) * row * 2, name);
      return;
    }
    auto v = ck_.read(name, shape);
    if (!v) return fail(v.error());
    bf16_from(dst, at, std::vector<float>(v->begin() + static_cast<long>(row * static_cast<std::size_t>(r.begin)),
                                          v->begin() + static_cast<long>(row * static_cast<std::size_t>(r.end))),
              name);
  }
  void bf16_cols(DeviceBuffer& dst, std::size_t at, const std::string& name, const std::vector<int64_t>& shape, Range c) {
    if (!status_) return;
    if (shape.size() != 2) return fail(Error{"uploading columns of " + name + ": not a 2-D tensor"});
    if (!slice_fits(name, shape, 1, c)) return;
    auto v = ck_.read(name, shape);
    if (!v) return fail(v.error());
    std::vector<float> out(static_cast<std::size_t>(shape[0]) * static_cast<std::size_t>(c.size()));
    for (int64_t i = 0; i < shape[0]; ++i)
      std::copy(v->begin() + i * shape[1] + c.begin, v->begin() + i * shape[1] + c.end, out.begin() + i * c.size());
    bf16_from(dst, at, out, name);
  }
  void bf16_from(DeviceBuffer& dst, std::size_t at, const std::vector<float>& v, const std::string& what) {
    std::vector<std::uint16_t> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = kernels::bf16_from_float(v[i]);
    put(dst, at * 2, h.data(), h.size() * 2, what);
  }
  void f32(DeviceBuffer& dst, const std::string& name, const std::vector<int64_t>& shape) {
    if (!status_) return;
    auto v = ck_.read(name, shape);
    if (!v) return fail(v.error());
    put(dst, 0, v->data(), v->size() * 4, name);
  }
  // Rows [r.begin, r.end) of the first dimension in fp32, at element `at` of dst (a
  // tensor-parallel rank's slice of a vector or of a matrix's rows).
  void f32_rows(DeviceBuffer& dst, std::size_t at, const std::string& name, const std::vector<int64_t>& shape, Range r) {
    if (!status_ || !slice_fits(name, shape, 0, r)) return;
    auto v = ck_.read(name, shape);
    if (!v) return fail(v.error());
    const std::size_t row = shape.empty() || shape[0] == 0 ? 0 : elements(shape) / static_cast<std::size_t>(shape[0]);
    put(dst, at * 4, v->data() + row * static_cast<std::size_t>(r.begin), row * static_cast<std::size_t>(r.size()) * 4, name);
  }
  // The tensor's values rounded to bf16 (the model's weight precision), stored as fp32 for a kernel
  // that wants fp32 operands.
  void f32_as_bf16(DeviceBuffer& dst, const std::string& name, const std::vector<int64_t>& shape) {
    if (!status_) return;
    auto v = ck_.read(name, shape);
    if (!v) return fail(v.error());
    for (auto& x : *v) x = kernels::round_bf16(x);
    put(dst, 0, v->data(), v->size() * 4, name);
  }
  void fail(Status s) {
    if (status_ && !s) status_ = std::move(s);
  }
  const Error& error() const { return status_.error(); }  // only when !ok()
  bool ok() const { return status_.ok(); }
  const Checkpoint& checkpoint() const { return ck_; }

 private:
  static std::size_t elements(const std::vector<int64_t>& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
  // A slice past the tensor's end would read beyond its bytes (of the memory map, or of the vector
  // read): an error naming the tensor instead. A bad range means a shard split that disagrees
  // with the shape passed, which only a loader's mistake makes.
  bool slice_fits(const std::string& name, const std::vector<int64_t>& shape, std::size_t dim, Range r) {
    if (dim < shape.size() && r.begin >= 0 && r.begin <= r.end && r.end <= shape[dim]) return true;
    fail(Error{
        "uploading " + name + ": slice [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") of dimension " +
        std::to_string(dim) + " is outside " +
        (dim < shape.size() ? "[0, " + std::to_string(shape[dim]) + ")" : std::string("the tensor's dimensions"))});
    return false;
  }
  void put(DeviceBuffer& dst, std::size_t byte_at, const void* src, std::size_t n, const std::string& what) {
    if (byte_at + n > dst.bytes()) return fail(Error{"uploading " + what + ": it does not fit its device buffer"});
    fail(TANDEM_CUDA_STATUS(cudaMemcpy(static_cast<char*>(dst.get()) + byte_at, src, n, cudaMemcpyHostToDevice), "uploading " + what));
  }
  const Checkpoint& ck_;
  Status status_;
};

}  // namespace tandem::model::cuda
