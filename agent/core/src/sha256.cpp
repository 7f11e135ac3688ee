#include "tandem/agent/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <vector>

namespace tandem::agent {
namespace {

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxFree>;

Result<Ctx> new_ctx(const std::string& what) {
  Ctx c(EVP_MD_CTX_new());
  if (!c || EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr) != 1) return plain_error(what, "OpenSSL SHA-256 init failed");
  return c;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_) EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::update(const void* data, std::size_t n) {
  if (ctx_) EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n);
}
void Sha256::reset() {
  if (ctx_) EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
std::string Sha256::hex_final() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!ctx_ || EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n) != 1) return {};
  return hex_lower(md, n);
}

Result<std::string> sha256_file(const std::string& path, const ChunkFn& on_chunk) {
  auto c = new_ctx(path);
  if (!c) return c.error();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error(path, "cannot open for hashing");
  // SHA-256 is sequential within a file, so a cold multi-GiB shard is read and hashed in turn on
  // one thread. Asking the kernel for the next window while this one is hashed keeps the disk
  // busy meanwhile (the hash no longer waits for each read); on a warm page cache it costs nothing.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr std::uint64_t kAhead = 32ull << 20;
  std::uint64_t advised = 0;
  std::vector<char> buf(kHashChunk);
  std::uint64_t done = 0;
  for (;;) {
    if (done + kAhead / 2 >= advised) {
      ::posix_fadvise(fd, static_cast<off_t>(advised), static_cast<off_t>(kAhead), POSIX_FADV_WILLNEED);
      advised += kAhead;
    }
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      auto e = sys_error(path, "read failed while hashing");
      ::close(fd);
      return e;
    }
    if (n == 0) break;
    EVP_DigestUpdate(c->get(), buf.data(), static_cast<size_t>(n));
    done += static_cast<std::uint64_t>(n);
    if (on_chunk) on_chunk(done, static_cast<std::uint64_t>(n));
  }
  ::close(fd);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(c->get(), md, &len) != 1) return plain_error(path, "OpenSSL SHA-256 final failed");
  return hex_lower(md, len);
}

bool cpu_has_sha_extensions() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0)  // x86: sha_ni; arm64: sha2
      return line.find(" sha_ni") != std::string::npos || line.find(" sha2") != std::string::npos;
  return false;
}

}  // namespace tandem::agent
