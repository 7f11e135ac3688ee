#include "tandem/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <span>
#include <optional>
#include <thread>
#include <vector>

#include "tandem/kernels/cuda_check.hpp"
#include "tandem/kernels/dtype.hpp"

namespace tandem::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) s += " (" + std::string(last) + ")";
  }
  return s;
}

ncclDataType_t nccl_type(DeviceDType t) { return t == DeviceDType::bf16 ? ncclBfloat16 : ncclFloat32; }

std::string uuid_text(const float* bytes) {
  std::string s;
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(bytes[i]));
    s += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return "GPU-" + s;
}

std::string seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

class NcclGroup final : public NcclCommunicator {
 public:
  NcclGroup(NcclOptions o, std::unique_ptr<TcpCommunicator> control)
      : o_(std::move(o)), control_(std::move(control)) {}

  ~NcclGroup() override {
    if (pinned_) cudaFreeHost(pinned_);
    if (!comm_) return;
    // A healthy group finalises (flushes what was issued); a broken one is aborted, which never
    // waits for the peer that is gone.
    if (!broken_ && ncclCommFinalize(comm_) == ncclInProgress) (void)wait_async("finalize", o_.control.peer_timeout);
    if (comm_) ncclCommAbort(comm_);
  }

  Status rendezvous() override {
    if (comm_ || host_) return Ok{};
    if (broken_) return *broken_;
    if (auto s = TANDEM_CUDA_STATUS(cudaSetDevice(o_.device), "CUDA device " + std::to_string(o_.device)); !s) return s;
    if (auto s = control_->rendezvous(); !s) return s.error();
    if (auto s = choose_transport(); !s) return s;
    if (host_) return Ok{};
    std::vector<std::uint8_t> id(sizeof(ncclUniqueId));
    if (o_.control.rank == 0) {
      ncclUniqueId uid;
      if (ncclResult_t r = ncclGetUniqueId(&uid); r != ncclSuccess) return Error{"NCCL unique id: " + nccl_text(r, nullptr)};
      std::memcpy(id.data(), &uid, sizeof uid);
    }
    if (auto s = control_->broadcast(id, o_.control.peer_timeout); !s)
      return Error{"handing out the NCCL unique id: " + s.error().message};
    if (id.size() != sizeof(ncclUniqueId)) return Error{"rank 0 sent an NCCL unique id of the wrong size"};
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof uid);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so a missing peer is a timeout here, not a hang inside NCCL
    ncclResult_t r = ncclCommInitRankConfig(&comm_, o_.control.size, uid, o_.control.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) return fail("NCCL init: " + nccl_text(r, comm_));
    if (auto s = wait_async("NCCL init of rank " + std::to_string(o_.control.rank) + " of " +
                                std::to_string(o_.control.size),
                            o_.init_timeout);
        !s)
      return s.error();
    transport_ = "NCCL " + nccl_version() + " (distinct GPUs)";
    log("device all-reduce: " + transport_);
    return Ok{};
  }

  bool host_staged() const override { return host_; }
  std::string transport() const override { return transport_; }

  int rank() const override { return o_.control.rank; }
  int size() const override { return o_.control.size; }
  int device() const override { return o_.device; }

  Status all_reduce_sum(std::span<float> data) override {
    if (broken_) return *broken_;
    if (data.empty() || size() == 1) return Ok{};
    if (host_) return control_->all_reduce_sum(data);
    float* dev = nullptr;
    if (auto s = TANDEM_CUDA_STATUS(cudaMalloc(&dev, data.size_bytes()), "all-reduce staging buffer"); !s) return s;
    Status s = [&]() -> Status {
      if (auto c = TANDEM_CUDA_STATUS(cudaMemcpy(dev, data.data(), data.size_bytes(), cudaMemcpyHostToDevice), "all-reduce: copy to device");
          !c)
        return c;
      if (auto st = all_reduce_sum_device(dev, data.size(), DeviceDType::f32, nullptr); !st) return st;
      if (auto c = TANDEM_CUDA_STATUS(cudaMemcpy(data.data(), dev, data.size_bytes(), cudaMemcpyDeviceToHost), "all-reduce: copy from device");
          !c)
        return c;
      return Ok{};
    }();
    cudaFree(dev);
    return s;
  }

  Result<std::vector<float>> all_gather(std::span<const float> mine) override {
    if (broken_) return *broken_;
    return control_->all_gather(mine);
  }

  Status broadcast(std::vector<std::uint8_t>& message, std::chrono::milliseconds wait) override {
    if (broken_) return *broken_;
    return control_->broadcast(message, wait);
  }

  Status all_reduce_sum_device(void* data, std::size_t count, DeviceDType dtype, void* stream) override {
    if (broken_) return *broken_;
    if (size() == 1 || count == 0) return Ok{};
    auto st = static_cast<cudaStream_t>(stream);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (auto c = TANDEM_CUDA_STATUS(cudaStreamIsCapturing(st, &capture), "all-reduce"); !c) return c;
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    if (host_ && capturing) return Error{"all-reduce: the host-staged transport cannot be captured in a CUDA graph (run eagerly)"};
    if (host_) return host_collective("all-reduce", data, nullptr, count, dtype, st);
    if (!comm_) return Error{"all-reduce before the group was joined (rendezvous)"};
    ncclResult_t r = ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, comm_, st);
    if (r != ncclSuccess && r != ncclInProgress) return fail("all-reduce: " + nccl_text(r, comm_));
    // Captured: nothing runs until a replay (the stream cannot be queried now); the non-blocking
    // communicator only has to finish enqueuing.
    if (capturing) return wait_async("capturing an all-reduce", o_.control.peer_timeout);
    return wait_stream("all-reduce", st);
  }

  Status wait_device(void* stream) override {
    if (broken_) return *broken_;
    auto st = static_cast<cudaStream_t>(stream);
    if (host_ || !comm_) return TANDEM_CUDA_STATUS(cudaStreamSynchronize(st), "device step");
    return wait_stream("device step", st);
  }

  Status all_gather_device(const void* send, void* recv, std::size_t count, DeviceDType dtype, void* stream) override {
    if (broken_) return *broken_;
    auto st = static_cast<cudaStream_t>(stream);
    if (size() == 1) {
      const std::size_t bytes = count * (dtype == DeviceDType::bf16 ? 2 : 4);
      if (auto c = TANDEM_CUDA_STATUS(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, st), "all-gather"); !c) return c;
      return wait_stream("all-gather", st);
    }
    if (host_) return host_collective("all-gather", const_cast<void*>(send), recv, count, dtype, st);
    if (!comm_) return Error{"all-gather before the group was joined (rendezvous)"};
    ncclResult_t r = ncclAllGather(send, recv, count, nccl_type(dtype), comm_, st);
    if (r != ncclSuccess && r != ncclInProgress) return fail("all-gather: " + nccl_text(r, comm_));
    return wait_stream("all-gather", st);
  }

 private:
  void log(const std::string& line) const {
    if (o_.control.log) o_.control.log(line);
  }

  // Every rank's GPU UUID and wish over the TCP group; the same decision on every rank.
  Status choose_transport() {
    cudaDeviceProp prop{};
    if (auto c = TANDEM_CUDA_STATUS(cudaGetDeviceProperties(&prop, o_.device), "reading CUDA device " + std::to_string(o_.device) + "'s UUID");
        !c)
      return fail(std::move(c).error());
    constexpr std::size_t kWidth = 17;  // 16 UUID bytes, then the transport asked for
    std::vector<float> mine(kWidth);
    for (int i = 0; i < 16; ++i) mine[static_cast<std::size_t>(i)] = static_cast<float>(static_cast<unsigned char>(prop.uuid.bytes[i]));
    mine[16] = static_cast<float>(static_cast<int>(o_.transport));
    auto all = control_->all_gather(mine);
    if (!all) return fail("exchanging GPU UUIDs: " + all.error().message);
    const std::vector<float>& v = all.value();
    if (v.size() != kWidth * static_cast<std::size_t>(size())) return fail("exchanging GPU UUIDs: a rank sent the wrong size");
    auto row = [&](int r) { return v.data() + kWidth * static_cast<std::size_t>(r); };
    std::string shared;
    bool want_host = false, want_nccl = false;
    for (int r = 0; r < size(); ++r) {
      want_host = want_host || row(r)[16] == static_cast<float>(static_cast<int>(DeviceTransport::host_staged));
      want_nccl = want_nccl || row(r)[16] == static_cast<float>(static_cast<int>(DeviceTransport::nccl));
      for (int q = 0; q < r && shared.empty(); ++q)
        if (std::equal(row(r), row(r) + 16, row(q)))
          shared = "ranks " + std::to_string(q) + " and " + std::to_string(r) + " share " + uuid_text(row(r));
    }
    if (want_host && want_nccl) return fail("the ranks disagree on the device transport: one asked for nccl, another for host");
    if (!shared.empty() && want_nccl)
      return fail("`tp_transport` nccl, but " + shared + ": NCCL refuses two ranks on one GPU (use host or auto)");
    if (shared.empty() && !want_host) return Ok{};
    host_ = true;
    transport_ = "host-staged over the TCP group (" + (want_host ? std::string("asked for") : shared) +
                 "; a test transport: eager steps, a TCP round trip per collective)";
    log("device all-reduce: " + transport_);
    return Ok{};
  }

  // Device -> pinned host, the TCP group's sum or gather, host -> device; synchronous on `st`.
  Status host_collective(const char* what, void* data, void* gathered, std::size_t count, DeviceDType dtype, cudaStream_t st) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone)
      return Error{std::string("host-staged ") + what + " inside a CUDA graph capture: the host-staged transport runs eager steps"};
    const std::size_t elem = dtype == DeviceDType::bf16 ? 2 : 4, bytes = count * elem;
    if (bytes > pinned_bytes_) {
      if (pinned_) cudaFreeHost(pinned_);
      pinned_ = nullptr, pinned_bytes_ = 0;
      if (auto c = TANDEM_CUDA_STATUS(cudaMallocHost(&pinned_, bytes), std::string(what) + ": pinned buffer"); !c) return fail(std::move(c).error());
      pinned_bytes_ = bytes;
    }
    if (auto c = TANDEM_CUDA_STATUS(cudaMemcpyAsync(pinned_, data, bytes, cudaMemcpyDeviceToHost, st), std::string(what) + ": copy to host"); !c)
      return fail(std::move(c).error());
    if (auto c = TANDEM_CUDA_STATUS(cudaStreamSynchronize(st), what); !c) return fail(std::move(c).error());
    std::vector<float> widened;
    std::span<float> values(static_cast<float*>(pinned_), count);
    if (dtype == DeviceDType::bf16) {
      widened.resize(count);
      const auto* b = static_cast<const std::uint16_t*>(pinned_);
      for (std::size_t i = 0; i < count; ++i)
        widened[i] = kernels::bf16_to_float(b[i]);  // the device's conversions, exactly
      values = widened;
    }
    std::vector<float> out;
    if (gathered) {
      auto g = control_->all_gather(values);
      if (!g) return fail(std::string(what) + ": " + g.error().message);
      out = std::move(g).value();
    } else {
      if (auto s = control_->all_reduce_sum(values); !s) return fail(std::string(what) + ": " + s.error().message);
    }
    const std::span<const float> result = gathered ? std::span<const float>(out) : std::span<const float>(values);
    void* dst = gathered ? gathered : data;
    const void* src = result.data();
    std::vector<std::uint16_t> narrowed;
    if (dtype == DeviceDType::bf16) {
      narrowed.resize(result.size());
      for (std::size_t i = 0; i < result.size(); ++i) narrowed[i] = kernels::bf16_from_float(result[i]);
      src = narrowed.data();
    }
    // Pageable sources (the gather's, the bf16 ones) copy synchronously; the pinned one is waited for.
    if (auto c = TANDEM_CUDA_STATUS(cudaMemcpyAsync(dst, src, result.size() * elem, cudaMemcpyHostToDevice, st), std::string(what) + ": copy to device");
        !c)
      return fail(std::move(c).error());
    if (auto c = TANDEM_CUDA_STATUS(cudaStreamSynchronize(st), what); !c) return fail(std::move(c).error());
    return Ok{};
  }

  Status fail(const std::string& message) { return fail(Error{message}); }
  Status fail(Error error) {
    if (!broken_) broken_ = std::move(error);
    if (comm_) ncclCommAbort(comm_), comm_ = nullptr;
    return *broken_;
  }

  // Polls NCCL's async state until the pending operation left ncclInProgress, or `limit` passed.
  Status wait_async(const std::string& what, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return fail(what + ": " + nccl_text(r, comm_));
      if (state == ncclSuccess) return Ok{};
      if (state != ncclInProgress) return fail(what + ": " + nccl_text(state, comm_));
      if (Clock::now() > deadline)
        return fail(what + " did not finish within " + seconds(limit) + " (a rank is missing or unreachable)");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Waits for the collective just enqueued: NCCL's async errors (a peer lost) and the stream's
  // completion, at most peer_timeout. Spinning on cudaStreamQuery keeps a decode step's latency low;
  // the yield keeps it from starving the rank's other threads.
  Status wait_stream(const std::string& what, cudaStream_t stream) {
    const auto deadline = Clock::now() + o_.control.peer_timeout;
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return fail(what + ": " + nccl_text(r, comm_));
      if (state != ncclSuccess && state != ncclInProgress)
        return fail(what + ": a peer rank failed or left: " + nccl_text(state, comm_));
      if (state == ncclSuccess) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return Ok{};
        if (e != cudaErrorNotReady) return fail(TANDEM_CUDA_STATUS(e, what).error());
      }
      if (Clock::now() > deadline)
        return fail(what + " did not finish within " + seconds(o_.control.peer_timeout) + " (a peer rank is gone or stalled)");
      if (spins > 1000) std::this_thread::yield();
    }
  }

  NcclOptions o_;
  std::unique_ptr<TcpCommunicator> control_;
  ncclComm_t comm_ = nullptr;
  std::optional<Error> broken_;
  bool host_ = false;
  std::string transport_ = "not joined";
  void* pinned_ = nullptr;  // the host-staged collectives' buffer (grows to the largest)
  std::size_t pinned_bytes_ = 0;
};

}  // namespace

std::string NcclCommunicator::nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

bool nccl_built() { return true; }

int cuda_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Result<std::unique_ptr<NcclCommunicator>> make_nccl_communicator(const NcclOptions& options) {
  const int devices = cuda_device_count();
  if (devices == 0) return Error{"NCCL: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, driver)"};
  if (options.device < 0 || options.device >= devices)
    return Error{"NCCL: CUDA device " + std::to_string(options.device) + " does not exist (this process sees " +
                 std::to_string(devices) + ")"};
  auto control = make_tcp_communicator(options.control);
  if (!control) return control.error();
  return std::unique_ptr<NcclCommunicator>(std::make_unique<NcclGroup>(options, std::move(control).value()));
}

Result<std::unique_ptr<NcclCommunicator>> connect_nccl(const NcclOptions& options) {
  auto group = make_nccl_communicator(options);
  if (!group) return group.error();
  if (auto s = group.value()->rendezvous(); !s) return s.error();
  return group;
}

}  // namespace tandem::comm
