// tandem-hash-bench DIR: how fast a node hashes a tree, as the sha step and the stage source do
// (hash_paths: files in parallel, largest first, OpenSSL SHA-256), at 1, 2, 4, ... threads up to
// the machine's cores; the largest file alone (SHA-256 is sequential within a file: one core's
// rate is that file's ceiling); and SHA-256 of memory alone (the CPU's ceiling, no reads). A
// program that prints a table (and --json), not a test: numbers depend on the disk, the page cache
// and the load. --make N:MIB first writes N files of MIB MiB of pseudo-random bytes into DIR;
// --json-out FILE writes the same run's JSON beside the printed table.
#include <openssl/crypto.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
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

// N files of `mib` MiB each (part-K.bin), written in parallel from a fast PRNG: incompressible
// bytes without waiting on /dev/urandom.
bool make_tree(const std::string& dir, unsigned n, unsigned mib) {
  ::mkdir(dir.c_str(), 0755);
  std::vector<std::thread> ts;
  std::atomic<bool> ok{true};
  std::atomic<unsigned> next{0};
  const unsigned workers = std::min(n, std::max(1u, std::thread::hardware_concurrency()));
  for (unsigned w = 0; w < workers; ++w)
    ts.emplace_back([&] {
      std::vector<std::uint64_t> buf((4u << 20) / 8);
      for (unsigned k; (k = next++) < n;) {
        std::mt19937_64 g(k + 1);
        std::FILE* f = std::fopen((dir + "/part-" + std::to_string(k) + ".bin").c_str(), "wb");
        if (!f) { ok = false; return; }
        for (unsigned done = 0; done < mib; done += 4) {
          for (auto& x : buf) x = g();
          const std::size_t bytes = std::min<std::size_t>(buf.size() * 8, static_cast<std::size_t>(mib - done) << 20);
          if (std::fwrite(buf.data(), 1, bytes, f) != bytes) ok = false;
        }
        if (std::fclose(f) != 0) ok = false;
      }
    });
  for (auto& t : ts) t.join();
  return ok;
}

std::string largest_file(const std::string& dir, std::uint64_t& size) {
  std::string best;
  size = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.file_size() >= size) size = e.file_size(), best = e.path().string();
  return best;
}

// SHA-256 of the largest file alone: the rate one big model shard is hashed at, whatever the threads.
tandem::Result<json> one_file_rate(const std::string& dir) {
  std::uint64_t big_size = 0;
  const std::string big = largest_file(dir, big_size);
  const auto t0 = Clock::now();
  auto d = tandem::agent::sha256_file(big);
  const double big_secs = seconds_since(t0);
  if (!d) return d.error();
  return json{{"path", big}, {"bytes", big_size}, {"seconds", big_secs}, {"gb_per_s", static_cast<double>(big_size) / 1e9 / big_secs}};
}

// The human-readable form of the bench's JSON: one row per thread count, then the largest file alone.
void print_table(const json& out) {
  const json& rows = out["rows"];
  const json& one = out["one_file"];
  const unsigned cores = out["cores"].get<unsigned>();
  std::printf("%u cores, SHA extensions %s, %s\n", cores, out["sha_extensions"].get<bool>() ? "yes" : "no",
              out["openssl"].get<std::string>().c_str());
  std::printf("%-8s %-6s %-12s %-9s %-12s %-14s %s\n", "threads", "files", "bytes", "seconds", "tree GB/s",
              "GB/CPU-second", "memory GB/s");
  for (const auto& r : rows)
    std::printf("%-8u %-6zu %-12llu %-9.2f %-12.2f %-14.2f %.2f\n", r["threads"].get<unsigned>(), r["files"].get<std::size_t>(),
                r["bytes"].get<unsigned long long>(), r["seconds"].get<double>(), r["gb_per_s"].get<double>(),
                r["gb_per_cpu_s"].get<double>(), r["memory_gb_per_s"].get<double>());
  std::printf("one file alone (SHA-256 is sequential within a file): %llu bytes in %.2f s, %.2f GB/s\n",
              one["bytes"].get<unsigned long long>(), one["seconds"].get<double>(), one["gb_per_s"].get<double>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: tandem-hash-bench DIR [--make N:MIB] [--json | --json-out FILE]\n"
                 "Hashes every file under DIR with the agent's hash_paths (no cache) at 1, 2, 4, ... threads\n"
                 "up to the cores, then the largest file alone, and prints GB/s beside SHA-256 of memory.\n"
                 "--make N:MIB writes N files of MIB MiB into DIR first; --json-out also writes the JSON to\n"
                 "FILE beside the table. Run it twice for a warm page cache.\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string dir = argv[1];
  bool as_json = false;
  std::string json_out;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    unsigned n = 0, mib = 0;
    if (a == "--json") as_json = true;
    else if (a == "--json-out" && i + 1 < argc) json_out = argv[++i];
    else if (a == "--make" && i + 1 < argc && std::sscanf(argv[++i], "%u:%u", &n, &mib) == 2 && n > 0 && mib > 0) {
      if (!make_tree(dir, n, mib)) {
        std::cerr << "tandem-hash-bench: cannot write the tree under " << dir << ": " << std::strerror(errno) << "\n";
        return 1;
      }
    } else {
      std::cerr << "tandem-hash-bench: unknown or malformed argument '" << a << "' (--make wants N:MIB)\n";
      return 2;
    }
  }
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
  std::vector<unsigned> counts;
  for (unsigned t = 1; t < cores; t *= 2) counts.push_back(t);
  counts.push_back(cores);
  json rows = json::array();
  for (unsigned t : counts) {
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
  auto one = one_file_rate(real);
  if (!one) {
    std::cerr << "tandem-hash-bench: " << one.error().text() << "\n";
    return 1;
  }
  json out{{"dir", real}, {"cores", cores}, {"sha_extensions", tandem::agent::cpu_has_sha_extensions()},
           {"openssl", OpenSSL_version(OPENSSL_VERSION)}, {"rows", rows}, {"one_file", *one}};
  if (!json_out.empty()) {
    std::FILE* f = std::fopen(json_out.c_str(), "w");
    const std::string text = out.dump(2) + "\n";
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
      std::cerr << "tandem-hash-bench: cannot write " << json_out << "\n";
      return 1;
    }
  }
  if (as_json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  print_table(out);
  return 0;
}
