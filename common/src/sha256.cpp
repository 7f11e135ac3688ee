#include "tandem/sha256.hpp"

#include <openssl/evp.h>

namespace tandem {

std::string hex_lower(const unsigned char* bytes, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // One-shot EVP_Digest fails only when OpenSSL cannot allocate; an empty string then never
  // equals a real digest, so every comparison with it fails closed.
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) return {};
  return hex_lower(md, len);
}

}  // namespace tandem
