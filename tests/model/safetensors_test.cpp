// Safetensors reading and the half-precision conversions.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "tandem/model/safetensors.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;
namespace fs = std::filesystem;

TEST_CASE("bf16 and fp16 bit patterns convert exactly") {
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(bf16_to_f32(0xc020) == -2.5f);
  CHECK(bf16_to_f32(0x0000) == 0.0f);
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc100) == -2.5f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(std::isinf(f16_to_f32(0xfc00)));
  CHECK(std::isnan(f16_to_f32(0x7e00)));
}

TEST_CASE("a file with BF16, F16 and F32 tensors reads back as fp32") {
  const fs::path dir = fs::temp_directory_path() / "tandem-safetensors-test";
  fs::create_directories(dir);
  RawTensor bf{"BF16", {2}, {0x80, 0x3f, 0x20, 0xc0}};
  RawTensor hf{"F16", {1, 2}, {0x00, 0x3c, 0x01, 0x00}};
  write_safetensors(dir / "model.safetensors", {{"a", bf}, {"b", hf}, {"c", f32_tensor({3}, {0.5f, -1.f, 3.25f})}});
  auto ck = Checkpoint::open(dir);
  REQUIRE_MESSAGE(ck.ok(), (ck.ok() ? "" : ck.error().message));
  CHECK(ck->read("a", {2}).value() == std::vector<float>{1.0f, -2.5f});
  CHECK(ck->read("b", {1, 2}).value() == std::vector<float>{1.0f, std::ldexp(1.0f, -24)});
  CHECK(ck->read("c", {3}).value() == std::vector<float>{0.5f, -1.f, 3.25f});
  auto wrong = ck->read("c", {1, 3});
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message.find("has shape [3], expected [1, 3]") != std::string::npos);
  auto missing = ck->read("d", {3});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("missing tensor 'd'") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a header whose byte range does not match its dtype and shape is refused") {
  const fs::path dir = fs::temp_directory_path() / "tandem-safetensors-test2";
  fs::create_directories(dir);
  write_safetensors(dir / "model.safetensors", {{"c", f32_tensor({3}, {0.5f, -1.f, 3.25f})}});
  edit_header(dir / "model.safetensors", [](auto& h) { h["c"]["shape"] = {4}; });
  auto ck = Checkpoint::open(dir);
  REQUIRE_FALSE(ck.ok());
  CHECK(ck.error().message.find("do not hold F32 [4]") != std::string::npos);
  fs::remove_all(dir);
}

// Found while writing fuzz/safetensors_fuzz.cpp: the element count was a wrapping uint64 product,
// so a shape of 2^64 elements (here 2^32 x 2^32, or 2^63 x 2) "held" 0 bytes and was accepted,
// the 2^63 dimension turned negative in the int64 shape, and readers sized copies from it.
TEST_CASE("a shape whose element count overflows is refused, not wrapped to a small size") {
  const fs::path dir = fs::temp_directory_path() / "tandem-safetensors-test3";
  fs::create_directories(dir);
  struct Case {
    std::string dtype;
    nlohmann::json shape;
  };
  for (const Case& c : {Case{"F32", {4294967296ULL, 4294967296ULL}}, Case{"F8_E4M3", {9223372036854775808ULL, 2}},
                        Case{"BF16", {9223372036854775808ULL, 1}}}) {
    CAPTURE(c.dtype);
    write_safetensors(dir / "model.safetensors", {{"w", RawTensor{"F32", {0}, {}}}});
    edit_header(dir / "model.safetensors", [&c](auto& h) {
      h["w"]["dtype"] = c.dtype;
      h["w"]["shape"] = c.shape;
    });
    auto ck = Checkpoint::open(dir);
    REQUIRE_FALSE(ck.ok());
    CHECK(ck.error().message.find("malformed shape") != std::string::npos);
  }
  fs::remove_all(dir);
}
