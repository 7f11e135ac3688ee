// Pool sizing from the flags: element size per --kv-cache-dtype, the start-up line, and the
// refusal of a pool that cannot hold one max-model-len sequence.
#include <doctest/doctest.h>

#include "pool_plan.hpp"

using namespace tandem::engine::runtime;

TEST_CASE("--kv-cache-dtype sets the bytes per cached element; auto follows the checkpoint") {
  CHECK(kv_bytes_per_elem("bfloat16", "").value() == 2);
  CHECK(kv_bytes_per_elem("fp8_e4m3", "").value() == 1);
  CHECK(kv_bytes_per_elem("fp8", "").value() == 1);
  CHECK(kv_bytes_per_elem("auto", "float32").value() == 4);
  CHECK(kv_bytes_per_elem("auto", "bfloat16").value() == 2);
  CHECK(kv_bytes_per_elem("auto", "").value() == 2);
  auto bad = kv_bytes_per_elem("int3", "");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("int3") != std::string::npos);
}

TEST_CASE("the pool line from --kv-cache-memory") {
  PoolFlags f;
  f.kv_cache_dtype = "bfloat16";
  f.block_size = 16;
  f.max_model_len = 4096;
  f.kv_cache_memory = 12288ull * 2 * 64 * 2;  // 12,288 tokens of 2 layers x 64 elements x 2 bytes
  auto p = plan_pool(tandem::model::KvLayout{2, 64}, f);
  REQUIRE(p.ok());
  CHECK(p->describe() == "KV pool: 12,288 tokens in 768 blocks of 16, 3.00 requests at max-model-len 4096");
  f.kv_cache_dtype = "fp8_e4m3";  // half the bytes per element: twice the tokens
  CHECK(plan_pool(tandem::model::KvLayout{2, 64}, f)->tokens == 24576);
}

TEST_CASE("a pool smaller than one max-model-len sequence is an error that says what to change") {
  PoolFlags f;
  f.kv_cache_dtype = "bfloat16";
  f.block_size = 16;
  f.max_model_len = 4096;
  f.kv_cache_memory = 4095ull * 2 * 64 * 2;
  auto p = plan_pool(tandem::model::KvLayout{2, 64}, f);
  REQUIRE_FALSE(p.ok());
  CHECK(p.error().message.find("`max_model_len` 4096") != std::string::npos);
  CHECK(p.error().message.find("`kv_cache_memory`") != std::string::npos);
}

TEST_CASE("without --kv-cache-memory the CPU pool takes the utilization share of system memory") {
  auto b = cpu_kv_budget(0.0);
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message.find("`gpu_memory_utilization`") != std::string::npos);
  auto whole = cpu_kv_budget(1.0);  // everything not in use now
  if (whole.ok()) CHECK(whole.value() > 0);
}
