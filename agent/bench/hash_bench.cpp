// tandem-hash-bench DIR: how fast a node hashes a tree, as the sha step and the stage source do
// (hash_paths: files in parallel, OpenSSL SHA-256), at 1 thread and at every count up to the
// machine's cores, plus SHA-256 of memory alone (the CPU's ceiling, no reads). A program that
// prints a table (and --json), not a test: numbers depend on the disk, the page cache and the load.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tandem/agent/hash_tree.hpp"
#include "tandem/agent/sha256.hpp"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU seconds this process has used (all threads): on a shared, loaded machine the wall-clock
// rate says how much CPU we got; bytes per CPU-second says how fast the code is.
double cpu_seconds() {
  rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// SHA-256 of `per_thread` bytes of memory on each of `threads` threads: GB/s in all.
double memory_rate(unsigned threads, std::size_t per_thread) {
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (unsigned i = 0; i < threads; ++i)
    ts.emplace_back([per_thread, i] {
      std::vector<char> buf(tandem::agent::kHashChunk, static_cast<char>('a' + i));
      tandem::agent::Sha256 h;
      for (std::size_t done = 0; done < per_thread; done += buf.size()) h.update(buf.data(), buf.size());
      (void)h.hex_final();
    });
  for (auto& t : ts) t.join();
  return static_cast<double>(per_thread) * threads / 1e9 / seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: tandem-hash-bench DIR [--json]\n"
                 "Hashes every file under DIR with the agent's hash_paths (no cache) at 1..N threads and\n"
                 "prints GB/s, beside SHA-256 of memory alone. Run it twice to see a warm page cache.\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string dir = argv[1];
  const bool as_json = argc > 2 && std::string(argv[2]) == "--json";
  char real[4096];
  if (!::realpath(dir.c_str(), real)) {
    std::cerr << "tandem-hash-bench: " << dir << ": no such directory\n";
    return 1;
  }
  auto root = tandem::agent::NodeRoot::open("/", {real});
  if (!root) {
    std::cerr << "tandem-hash-bench: " << root.error().text() << "\n";
    return 1;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  json rows = json::array();
  for (unsigned t = 1; t <= cores; ++t) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    auto r = tandem::agent::hash_paths(*root, {real}, tandem::agent::HashOptions{"", t, {}});
    const double secs = seconds_since(t0), cpu = cpu_seconds() - c0;
    if (!r) {
      std::cerr << "tandem-hash-bench: " << r.error().text() << "\n";
      return 1;
    }
    rows.push_back({{"threads", t}, {"files", r->digests.size()}, {"bytes", r->bytes_read}, {"seconds", secs},
                    {"gb_per_s", static_cast<double>(r->bytes_read) / 1e9 / secs},
                    {"cpu_seconds", cpu}, {"gb_per_cpu_s", static_cast<double>(r->bytes_read) / 1e9 / cpu},
                    {"memory_gb_per_s", memory_rate(t, std::size_t(512) << 20)}});
  }
  json out{{"dir", real}, {"cores", cores}, {"rows", rows}};
  if (as_json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-8s %-6s %-12s %-9s %-12s %-14s %s\n", "threads", "files", "bytes", "seconds", "tree GB/s",
              "GB/CPU-second", "memory GB/s");
  for (const auto& r : rows)
    std::printf("%-8u %-6zu %-12llu %-9.2f %-12.2f %-14.2f %.2f\n", r["threads"].get<unsigned>(), r["files"].get<std::size_t>(),
                r["bytes"].get<unsigned long long>(), r["seconds"].get<double>(), r["gb_per_s"].get<double>(),
                r["gb_per_cpu_s"].get<double>(), r["memory_gb_per_s"].get<double>());
  return 0;
}
