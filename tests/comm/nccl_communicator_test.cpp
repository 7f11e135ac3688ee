// The NCCL communicator, one process per rank as on two nodes (each child process picks its GPU;
// the test process itself never initialises CUDA, so forking stays safe). What runs depends on the
// machine: without a GPU only the refusal is checked and the rest says why it is skipped; one GPU
// runs the group of one and the missing-peer timeout; two GPUs run TP2 sums and a rank killed
// mid-step.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tandem/comm/nccl_communicator.hpp"

#if TANDEM_HAVE_NCCL
#include <cuda_runtime.h>
#endif

using namespace tandem::comm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Runs `body` in a child process; returns its exit status (the child's own exit code, or 128+signal)
// and what it wrote to the pipe `report` (one line for the parent to show).
struct Child {
  pid_t pid = -1;
  int report_fd = -1;
};

Child spawn(const std::function<int(int report_fd)>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    _exit(body(fds[1]));
  }
  close(fds[1]);
  return {pid, fds[0]};
}

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  close(fd);
  return s;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void say(int fd, const std::string& s) {
  std::string line = s + "\n";
  (void)!write(fd, line.data(), line.size());
}

// How many GPUs a fresh process sees (asked in a child, so this process stays CUDA-free).
int gpus() {
  static int n = [] {
    Child c = spawn([](int) { return cuda_device_count(); });
    read_all(c.report_fd);
    return wait_exit(c.pid);
  }();
  return n;
}

NcclOptions options(int rank, int size, int port, int device) {
  NcclOptions o;
  o.control.rank = rank;
  o.control.size = size;
  o.control.master_addr = "127.0.0.1";
  o.control.master_port = port;
  o.control.rendezvous_timeout = 20s;
  o.control.peer_timeout = 10s;
  o.control.fingerprint = "nccl-test";
  o.device = device;
  o.init_timeout = 60s;
  return o;
}

#if TANDEM_HAVE_NCCL
std::vector<float> rank_values(int rank, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(static_cast<float>(i + 1) * static_cast<float>(rank + 1));
  return v;
}

// Rank `rank` of a TP group: joins, sums rank_values on the device, checks the result against the
// host sum, then does `after(comm)`. Exit 0 when all went as expected; the pipe says what did not.
int run_rank(int rank, int size, int port, int report, const std::function<int(NcclCommunicator&)>& after) {
  NcclOptions o = options(rank, size, port, rank);
  if (rank == 0) o.control.on_listening = [report](int p) { say(report, "port " + std::to_string(p)); };
  auto c = connect_nccl(o);
  if (!c) return say(report, "connect: " + c.error().message), 10;
  const int n = 1 << 16;
  std::vector<float> host = rank_values(rank, n), expect(static_cast<size_t>(n), 0.f);
  for (int r = 0; r < size; ++r) {
    auto v = rank_values(r, n);
    for (int i = 0; i < n; ++i) expect[static_cast<size_t>(i)] += v[static_cast<size_t>(i)];
  }
  float* dev = nullptr;
  cudaMalloc(&dev, n * sizeof(float));
  cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  if (auto s = (*c)->all_reduce_sum_device(dev, n, DeviceDType::f32, nullptr); !s)
    return say(report, "all-reduce: " + s.error().message), 11;
  cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(dev);
  for (int i = 0; i < n; ++i)
    if (std::fabs(host[static_cast<size_t>(i)] - expect[static_cast<size_t>(i)]) > 1e-5f)
      return say(report, "sum differs at " + std::to_string(i)), 12;
  std::vector<float> h = rank_values(rank, 100);
  if (auto s = (*c)->all_reduce_sum(h); !s) return say(report, "host all-reduce: " + s.error().message), 13;
  say(report, "summed");
  return after(**c);
}
#endif

}  // namespace

TEST_CASE("NCCL communicator: a rank with no usable GPU is refused with the reason") {
  if (gpus() > 0) {
    Child c = spawn([](int report) {
      auto r = connect_nccl(options(0, 1, 0, 99));
      if (r) return 1;
      say(report, r.error().message);
      return 0;
    });
    const std::string msg = read_all(c.report_fd);
    CHECK(wait_exit(c.pid) == 0);
    CHECK_MESSAGE(msg.find("CUDA device 99 does not exist") != std::string::npos, msg);
    return;
  }
  auto r = connect_nccl(options(0, 1, 0, 0));
  REQUIRE_FALSE(r.ok());
  const std::string& msg = r.error().message;
  CHECK_MESSAGE((msg.find("no CUDA device is visible") != std::string::npos ||
                 msg.find("built without the CUDA back end") != std::string::npos),
                msg);
}

#if TANDEM_HAVE_NCCL
TEST_CASE("NCCL communicator, one GPU: the group of one, and a rank whose peer never comes") {
  if (gpus() < 1) {
    MESSAGE("skipped: no CUDA device here (runs on the GPU machine: deploy/gpu-check.sh)");
    return;
  }
  Child one = spawn([](int report) { return run_rank(0, 1, 0, report, [](NcclCommunicator&) { return 0; }); });
  const std::string out = read_all(one.report_fd);
  CHECK_MESSAGE(wait_exit(one.pid) == 0, out);
  CHECK(out.find("summed") != std::string::npos);

  // Rank 0 of two, alone: the rendezvous gives up at its deadline and says so.
  const auto t0 = Clock::now();
  Child alone = spawn([](int report) {
    NcclOptions o = options(0, 2, 0, 0);
    o.control.rendezvous_timeout = 2s;
    auto c = connect_nccl(o);
    if (c) return 1;
    say(report, c.error().message);
    return 0;
  });
  const std::string why = read_all(alone.report_fd);
  CHECK(wait_exit(alone.pid) == 0);
  CHECK_MESSAGE(why.find("rendezvous timed out") != std::string::npos, why);
  CHECK(Clock::now() - t0 < 15s);
}

TEST_CASE("NCCL communicator, two GPUs: TP2 sums agree; a rank killed mid-run ends the other quickly") {
  if (gpus() < 2) {
    MESSAGE("skipped: needs 2 CUDA devices, this machine has " << gpus() << " (the nvidia-h200-x2 machine runs it)");
    return;
  }
  // Rank 1 sums once, then dies without a word (as kill -9 of a node's rank would).
  // Rank 0 sums once, then keeps summing: its next collective must fail within peer_timeout.
  Child head = spawn([](int report) {
    return run_rank(0, 2, 0, report, [report](NcclCommunicator& c) {
      float* dev = nullptr;
      cudaMalloc(&dev, 1024 * sizeof(float));
      const auto t0 = Clock::now();
      for (int i = 0; i < 1000; ++i) {
        if (auto s = c.all_reduce_sum_device(dev, 1024, DeviceDType::f32, nullptr); !s) {
          const auto secs = std::chrono::duration<double>(Clock::now() - t0).count();
          say(report, "lost peer after " + std::to_string(secs) + " s: " + s.error().message);
          // Broken for good: the next call fails at once with the same error.
          return c.all_reduce_sum_device(dev, 1024, DeviceDType::f32, nullptr).ok() ? 21 : 0;
        }
        std::this_thread::sleep_for(50ms);
      }
      return 20;
    });
  });
  // The port rank 0 listens on comes first on its pipe.
  std::string first;
  for (char ch; read(head.report_fd, &ch, 1) == 1 && ch != '\n';) first += ch;
  REQUIRE(first.starts_with("port "));
  const int port = std::stoi(first.substr(5));
  Child worker = spawn([port](int report) {
    return run_rank(1, 2, port, report, [](NcclCommunicator&) {
      std::this_thread::sleep_for(500ms);
      raise(SIGKILL);
      return 0;
    });
  });
  const std::string worker_out = read_all(worker.report_fd);
  CHECK_MESSAGE(wait_exit(worker.pid) == 128 + SIGKILL, worker_out);
  const auto t0 = Clock::now();
  const std::string head_out = read_all(head.report_fd);
  CHECK_MESSAGE(wait_exit(head.pid) == 0, head_out);
  CHECK(head_out.find("summed") != std::string::npos);
  CHECK(head_out.find("lost peer after") != std::string::npos);
  CHECK(Clock::now() - t0 < 30s);
}
#endif
