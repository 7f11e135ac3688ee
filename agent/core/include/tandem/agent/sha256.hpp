// SHA-256 with OpenSSL EVP, streamed in 1 MiB chunks so a 100 GiB shard never sits in memory.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tandem/agent/error.hpp"
#include "tandem/sha256.hpp"

namespace tandem::agent {

constexpr std::size_t kHashChunk = 1 << 20;

using tandem::sha256_hex;  // bytes in memory: common/include/tandem/sha256.hpp

// A running SHA-256 (OpenSSL EVP, so SHA-NI where the CPU has it), for bytes that arrive in
// pieces: a staged file is hashed as its chunks are written, never read back.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t n);
  void reset();  // back to the hash of nothing
  std::string hex_final();  // once; the object is spent afterwards

 private:
  void* ctx_;  // EVP_MD_CTX, kept out of the header
};

// Called after each chunk: bytes of this file hashed so far, and the size of the chunk just read.
using ChunkFn = std::function<void(std::uint64_t done, std::uint64_t chunk)>;
Result<std::string> sha256_file(const std::string& path, const ChunkFn& on_chunk = {});

// Does /proc/cpuinfo list the CPU's SHA-256 instructions (x86 sha_ni, arm64 sha2)? OpenSSL uses
// them on its own when present; benches report it, since without them a core hashes ~4x slower.
bool cpu_has_sha_extensions();

}  // namespace tandem::agent
