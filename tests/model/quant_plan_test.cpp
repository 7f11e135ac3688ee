// Which projections a quantised checkpoint's CUDA model keeps quantised (quant_plan.hpp), checked
// without a GPU on the fixtures rewritten as fp8 and NVFP4 checkpoints store them
// (engine/bench/quantized_checkpoint.hpp): formats detected, fused parts planned together, a part
// the kernels cannot take or a mixed projection kept dense with its reason, malformed scales named;
// and the reference the GPU check compares against (bf16_checkpoint.hpp's write_rounded): tensors
// kept quantised exactly dequantised, the others rounded to bf16.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "bf16_checkpoint.hpp"
#include "quantized_checkpoint.hpp"
#include "tandem/kernels/dtype.hpp"
#include "tandem/model/model.hpp"
#include "tandem/model/quant_plan.hpp"
#include "test_util.hpp"

using namespace tandem::model;
using namespace tandem::model::test;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system's temporary one, removed at the end.
struct TempDir {
  explicit TempDir(const std::string& tag) : path(fs::temp_directory_path() / ("tandem-quant-plan-" + tag)) {
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

Checkpoint open_quantized(const std::string& fixture, bench::QuantizeAs as, const TempDir& dir) {
  int n = 0;
  const std::string e = bench::write_quantized(fixture_dir(fixture), dir.path, as, &n);
  REQUIRE_MESSAGE(e.empty(), e);
  CHECK(n > 10);
  auto ck = Checkpoint::open(dir.path);
  REQUIRE_MESSAGE(ck.ok(), (ck.ok() ? "" : ck.error().message));
  return std::move(ck.value());
}

ProjectionPlan plan(const Checkpoint& ck, const std::vector<ProjectionPart>& parts) {
  auto p = plan_projection(ck, parts);
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
  return p.value();
}

// glm4_moe_lite fixture: hidden 64, q_lora 48, kv_lora 32 + rope 8, 8 experts of width 32, one shared.
const std::string kAttn = "model.layers.1.self_attn.";
const std::string kMlp = "model.layers.1.mlp.";

}  // namespace

TEST_CASE("fp8 checkpoint: the attention's fused input projection and the experts plan as fp8, LM head and router stay dense") {
  TempDir dir("fp8");
  const Checkpoint ck = open_quantized("glm4_moe_lite", bench::QuantizeAs::fp8_block, dir);
  const auto w_in = plan(ck, {{kAttn + "q_a_proj.weight", 48, 64}, {kAttn + "kv_a_proj_with_mqa.weight", 40, 64}});
  CHECK(w_in.format == WeightFormat::fp8_block);
  REQUIRE(w_in.parts.size() == 2);
  CHECK(w_in.parts[1].scale->name == kAttn + "kv_a_proj_with_mqa.weight_scale_inv");
  CHECK(w_in.why_dense.empty());
  std::vector<ProjectionPart> experts;
  for (int e = 0; e < 8; ++e) experts.push_back({kMlp + "experts." + std::to_string(e) + ".down_proj.weight", 64, 32});
  CHECK(plan(ck, experts).format == WeightFormat::fp8_block);
  // What fp8 checkpoints keep in bf16 stays dense (the writer copies it as it is).
  CHECK(plan(ck, {{"lm_head.weight", 384, 64}}).format == WeightFormat::dense);
  CHECK(plan(ck, {{kMlp + "gate.weight", 8, 64}}).format == WeightFormat::dense);
  CHECK(plan(ck, {{"lm_head.weight", 384, 64}}).why_dense.empty());
}

TEST_CASE("a projection of quantised and dense parts is kept dense, and says why") {
  TempDir dir("mixed");
  const Checkpoint ck = open_quantized("glm4_moe_lite", bench::QuantizeAs::nvfp4, dir);
  const auto p = plan(ck, {{kAttn + "o_proj.weight", 64, 64}, {"lm_head.weight", 384, 64}});
  CHECK(p.format == WeightFormat::dense);
  CHECK(p.parts[0].format == WeightFormat::nvfp4);
  CHECK(p.parts[0].global_scale > 0.f);
  CHECK_MESSAGE(p.why_dense.find("'lm_head.weight' is dense") != std::string::npos, p.why_dense);
}

TEST_CASE("fp8 experts whose inputs are not a multiple of 16 are kept dense (variant: expert width 24)") {
  TempDir dir("variant-fp8");
  const Checkpoint ck = open_quantized("glm4_moe_lite_variant", bench::QuantizeAs::fp8_block, dir);
  const std::string mp = "model.layers.1.mlp.experts.0.";
  const auto p = plan(ck, {{mp + "gate_proj.weight", 24, 64}, {mp + "down_proj.weight", 64, 24}});
  CHECK(p.format == WeightFormat::dense);
  CHECK_MESSAGE(p.why_dense.find("has 24 inputs") != std::string::npos, p.why_dense);
  // NVFP4 cannot store them at all: the writer leaves them unquantised, so the experts are mixed.
  TempDir dir4("variant-nvfp4");
  const Checkpoint ck4 = open_quantized("glm4_moe_lite_variant", bench::QuantizeAs::nvfp4, dir4);
  const auto p4 = plan(ck4, {{mp + "gate_proj.weight", 24, 64}, {mp + "down_proj.weight", 64, 24}});
  CHECK(p4.format == WeightFormat::dense);
  CHECK_MESSAGE(p4.why_dense.find("is dense") != std::string::npos, p4.why_dense);
}

TEST_CASE("malformed quantised tensors are refused naming the tensor") {
  TempDir dir("bad");
  { const Checkpoint ck = open_quantized("glm4_moe_lite", bench::QuantizeAs::fp8_block, dir); }
  edit_header(dir.path / "model.safetensors", [&](nlohmann::json& h) {
    auto& s = h[kAttn + "o_proj.weight_scale_inv"];  // F32 [1, 1]: the same 4 bytes as BF16 [1, 2]
    s["dtype"] = "BF16";
    s["shape"] = {1, 2};
  });
  auto ck = Checkpoint::open(dir.path);
  REQUIRE(ck.ok());
  auto p = plan_projection(ck.value(), {{kAttn + "o_proj.weight", 64, 64}});
  REQUIRE_FALSE(p.ok());
  CHECK_MESSAGE(p.error().message.find("fp8 block scales '" + kAttn + "o_proj.weight_scale_inv' are BF16 [1, 2], expected F32 or BF16 [1, 1]") !=
                    std::string::npos,
                p.error().message);
  auto shape = plan_projection(ck.value(), {{kAttn + "q_b_proj.weight", 96, 64}});  // stored [96, 48]
  REQUIRE_FALSE(shape.ok());
  CHECK_MESSAGE(shape.error().message.find("has shape [96, 48], expected [96, 64]") != std::string::npos, shape.error().message);
  auto missing = plan_projection(ck.value(), {{kAttn + "nope.weight", 1, 16}});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("missing tensor") != std::string::npos);
}

TEST_CASE("the GPU check's reference: quantised tensors dequantised and rounded to bf16, scales dropped") {
  TempDir dir("ref"), ref("ref-out");
  const Checkpoint ck = open_quantized("glm4_moe_lite", bench::QuantizeAs::nvfp4, dir);
  const std::string name = kAttn + "o_proj.weight";
  REQUIRE(bench::write_rounded(dir.path, ref.path));
  auto out = Checkpoint::open(ref.path);
  REQUIRE(out.ok());
  CHECK_FALSE(out->has(name + "_scale"));
  CHECK_FALSE(out->has(name + "_scale_2"));
  auto c = ck.read(name, {64, 64}), d = out->read(name, {64, 64});
  REQUIRE((c.ok() && d.ok()));
  int changed = 0;
  for (size_t i = 0; i < c->size(); ++i) {
    CHECK(d.value()[i] == tandem::kernels::round_bf16(c.value()[i]));
    changed += d.value()[i] != c.value()[i];
  }
  CHECK(changed > 0);  // NVFP4 values times an fp8 scale times the global scale are rarely bf16 values
  // The routers stay as they are (fp32 on the device too), and the copy loads as a plain model.
  auto r0 = ck.read(kMlp + "gate.weight", {8, 64}), r1 = out->read(kMlp + "gate.weight", {8, 64});
  REQUIRE((r0.ok() && r1.ok()));
  CHECK(r0.value() == r1.value());
  auto m = load_model(ref.path);
  CHECK_MESSAGE(m.ok(), (m.ok() ? "" : m.error().message));
}

TEST_CASE("tandem-quantize writes experts fused into 3-D tensors one tensor per expert, as from the per-expert layout") {
  // The fixture with layer 1's experts fused (transformers' in-memory layout): [E, 2I, H], [E, H, I].
  TempDir fused("fused"), from_fused("from-fused"), from_split("from-split");
  fs::create_directories(fused.path);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> all;
  for (const auto& e : fs::directory_iterator(fixture_dir("glm4_moe_lite")))
    if (e.path().extension() == ".safetensors" && e.path().filename().string().starts_with("model")) all.merge(read_all(e.path()));
  const int E = 8, I = 32, H = 64;
  std::vector<float> gate_up, down;
  for (int e = 0; e < E; ++e) {
    const std::string ep = kMlp + "experts." + std::to_string(e) + ".";
    for (const char* n : {"gate_proj.weight", "up_proj.weight"}) {
      auto& v = all.at(ep + n).second;
      gate_up.insert(gate_up.end(), v.begin(), v.end());
      all.erase(ep + n);
    }
    auto& d = all.at(ep + "down_proj.weight").second;
    down.insert(down.end(), d.begin(), d.end());
    all.erase(ep + "down_proj.weight");
  }
  std::map<std::string, RawTensor> out;
  for (const auto& [name, t] : all) out[name] = f32_tensor(t.first, t.second);
  out[kMlp + "experts.gate_up_proj"] = f32_tensor({E, 2 * I, H}, gate_up);
  out[kMlp + "experts.down_proj"] = f32_tensor({E, H, I}, down);
  write_safetensors(fused.path / "model.safetensors", out);
  fs::copy_file(fixture_dir("glm4_moe_lite") / "config.json", fused.path / "config.json");
  REQUIRE(bench::write_quantized(fused.path, from_fused.path, bench::QuantizeAs::nvfp4).empty());
  REQUIRE(bench::write_quantized(fixture_dir("glm4_moe_lite"), from_split.path, bench::QuantizeAs::nvfp4).empty());
  auto a = Checkpoint::open(from_fused.path), b = Checkpoint::open(from_split.path);
  REQUIRE((a.ok() && b.ok()));
  CHECK_FALSE(a->has(kMlp + "experts.gate_up_proj"));
  for (const std::string n : {"experts.3.up_proj.weight", "experts.7.down_proj.weight", "experts.0.gate_proj.weight_scale"}) {
    const TensorInfo* x = a->find(kMlp + n);
    const TensorInfo* y = b->find(kMlp + n);
    REQUIRE_MESSAGE((x && y), n);
    CHECK(x->dtype == y->dtype);
    CHECK(x->shape == y->shape);
    REQUIRE(x->nbytes == y->nbytes);
    CHECK(std::memcmp(x->data, y->data, x->nbytes) == 0);
  }
}
