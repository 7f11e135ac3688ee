// The DFlash drafter's config and loading, and rollback of rejected drafts in the target's KV.
#include <doctest/doctest.h>

#include "../model/test_util.hpp"
#include "drafter_fixture.hpp"
#include "tandem/spec/acceptance.hpp"

using namespace tandem;
using spec::test::DemoPair;

namespace {

std::string config_error(nlohmann::json doc) {
  auto c = spec::parse_dflash_config(doc, "config.json");
  return c.ok() ? "" : c.error().message;
}

std::vector<std::int32_t> iota_positions(int from, int n) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(from + i);
  return p;
}

}  // namespace

TEST_CASE("a DFlash config is read from dflash_config or the top level; what is not implemented is refused by name") {
  DemoPair pair;
  nlohmann::json doc = pair.drafter_config;
  auto c = spec::parse_dflash_config(doc, "config.json");
  REQUIRE(c.ok());
  CHECK(c->block_size == 8);
  CHECK(c->mask_token_id == 639);
  CHECK(c->target_layer_ids == std::vector<int>{0, 1});

  // Older files: block_size and target_layer_ids at the top level.
  nlohmann::json old = doc;
  old.erase("dflash_config");
  old["block_size"] = 16;
  old["target_layer_ids"] = {1};
  old["dflash_config"] = {{"mask_token_id", 5}};
  c = spec::parse_dflash_config(old, "config.json");
  REQUIRE(c.ok());
  CHECK(c->block_size == 16);
  CHECK(c->target_layer_ids == std::vector<int>{1});

  auto with = [&](const std::string& key, nlohmann::json v) {
    nlohmann::json d = doc;
    d[key] = v;
    return config_error(d);
  };
  CHECK(with("layer_types", {"sliding_attention", "full_attention"}).find("sliding_attention") != std::string::npos);
  CHECK(with("attention_bias", true).find("attention_bias") != std::string::npos);
  CHECK(with("rope_scaling", {{"rope_type", "yarn"}}).find("yarn") != std::string::npos);
  CHECK(with("architectures", {"DFlash2DraftModel"}).find("DFlash2DraftModel") != std::string::npos);
  nlohmann::json no_mask = doc;
  no_mask["dflash_config"].erase("mask_token_id");
  CHECK(config_error(no_mask).find("mask_token_id") != std::string::npos);
}

TEST_CASE("the drafter loads with the target's embedding and head; mismatches and stray tensors are refused") {
  DemoPair pair;
  auto target = model::load_model(pair.target);
  REQUIRE(target.ok());
  auto d = spec::load_dflash(pair.drafter, pair.target, target.value()->config());
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error().message));
  CHECK(d.value()->max_draft() == 7);
  CHECK(d.value()->target_layers() == std::vector<int>{0, 1});

  SUBCASE("a target layer the target does not have") {
    auto cfg = model::test::read_json(pair.drafter / "config.json");
    cfg["dflash_config"]["target_layer_ids"] = {0, 5};
    model::test::write_json(pair.drafter / "config.json", cfg);
    auto bad = spec::load_dflash(pair.drafter, pair.target, target.value()->config());
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("target layer 5") != std::string::npos);
  }
  SUBCASE("a tensor DFlashDraftModel does not have (DFlash2's convolution)") {
    model::test::edit_header(pair.drafter / "model.safetensors", [](nlohmann::json& h) {
      h["layers.0.attention_conv.base_kernel"] = h["norm.weight"];
    });
    auto bad = spec::load_dflash(pair.drafter, pair.target, target.value()->config());
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.find("layers.0.attention_conv.base_kernel") != std::string::npos);
  }
}

TEST_CASE("a proposal depends on the context and not on scratch rows of an earlier proposal") {
  DemoPair pair;
  auto target = model::load_model(pair.target).value();
  auto d = spec::load_dflash(pair.drafter, pair.target, target->config()).value();
  const std::vector<std::int32_t> prompt = {11, 42, 7, 300, 5, 19};
  model::KvCache kv = target->new_cache();
  model::HiddenCapture cap;
  cap.layers = d->target_layers();
  REQUIRE(target->forward(prompt, iota_positions(0, 6), kv, {}, &cap).ok());
  CHECK(cap.rows.size() == 6u * 2u * 64u);
  const auto layout = d->context_layout();
  model::KvCache ctx(layout.n_layers, layout.row_width);
  REQUIRE(d->add_context(cap.rows, iota_positions(0, 6), ctx).ok());
  auto a = d->propose(ctx, 77, 6, 5);
  REQUIRE(a.ok());
  CHECK(a->size() == 5u * 640u);
  ctx.truncate(6);  // forget the scratch rows
  auto b = d->propose(ctx, 77, 6, 5);
  REQUIRE(b.ok());
  CHECK(a.value() == b.value());
  ctx.truncate(6);
  auto other = d->propose(ctx, 78, 6, 5);  // another anchor: another proposal
  REQUIRE(other.ok());
  CHECK(other.value() != a.value());
  ctx.truncate(5);
  CHECK_FALSE(d->propose(ctx, 77, 6, 5).ok());  // the anchor must sit right after the context
  CHECK_FALSE(d->propose(ctx, 77, 5, 8).ok());  // block 8: at most 7 proposals
}

TEST_CASE("verification with one wrong draft keeps the prefix, and the KV equals never having seen the rejected tokens") {
  DemoPair pair;
  auto target = model::load_model(pair.target).value();
  const std::vector<std::int32_t> prompt = {3, 141, 59, 265, 35, 89};
  auto greedy = model::greedy_generate(*target, prompt, 8).value();  // g0 .. g7
  const int P = static_cast<int>(prompt.size()), V = target->vocab_size();

  // Target state before the step: prompt and g0 have KV, g1 is the anchor (committed, no KV yet).
  model::KvCache spec_kv = target->new_cache();
  std::vector<std::int32_t> head = prompt;
  head.push_back(greedy[0]);
  REQUIRE(target->forward(head, iota_positions(0, P + 1), spec_kv, {}).ok());

  SUBCASE("drafts equal to the greedy continuation are all accepted, plus the bonus token") {
    const std::vector<std::int32_t> block = {greedy[1], greedy[2], greedy[3], greedy[4], greedy[5]};
    auto logits = target->forward(block, iota_positions(P + 1, 5), spec_kv, std::vector<int>{0, 1, 2, 3, 4});
    REQUIRE(logits.ok());
    const auto v = spec::accept_greedy(std::span(block).subspan(1), logits.value(), V);
    CHECK(v.accepted == 4);
    CHECK(v.next == greedy[6]);
  }
  SUBCASE("a wrong draft at position 2 stops acceptance there; after the rollback the cache is the plain one") {
    const std::vector<std::int32_t> block = {greedy[1], greedy[2], greedy[3], (greedy[4] + 1) % V, greedy[5]};
    auto logits = target->forward(block, iota_positions(P + 1, 5), spec_kv, std::vector<int>{0, 1, 2, 3, 4});
    REQUIRE(logits.ok());
    const auto v = spec::accept_greedy(std::span(block).subspan(1), logits.value(), V);
    CHECK(v.accepted == 2);
    CHECK(v.next == greedy[4]);  // the target's correction
    spec_kv.truncate(P + 1 + 1 + v.accepted);  // keep the anchor and the accepted drafts

    model::KvCache plain = target->new_cache();
    std::vector<std::int32_t> seen = prompt;
    seen.insert(seen.end(), greedy.begin(), greedy.begin() + 4);  // prompt, g0..g3
    REQUIRE(target->forward(seen, iota_positions(0, P + 4), plain, {}).ok());
    REQUIRE(plain.length() == spec_kv.length());
    for (int l = 0; l < plain.n_layers(); ++l)
      for (int t = 0; t < plain.length(); ++t)
        for (int i = 0; i < plain.row_width(); ++i)
          REQUIRE(std::as_const(spec_kv).row(l, t)[i] == doctest::Approx(std::as_const(plain).row(l, t)[i]).epsilon(1e-6));
    CHECK(std::vector<int>(spec_kv.positions().begin(), spec_kv.positions().end()) ==
          std::vector<int>(plain.positions().begin(), plain.positions().end()));
    // And decoding goes on from the correction exactly as plain decoding does.
    const std::int32_t next = v.next, pos = P + 4;
    const int row = 0;
    auto more = target->forward(std::span(&next, 1), std::span(&pos, 1), spec_kv, std::span(&row, 1));
    REQUIRE(more.ok());
    CHECK(kernels::argmax_cpu(more.value()).token == greedy[5]);
  }
}
