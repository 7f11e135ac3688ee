// Builds a Tokenizer from tokenizer.json (and optionally tokenizer_config.json). Every refusal
// names the file, the key, and what was expected there.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "byte_level.hpp"
#include "config.hpp"
#include "impl.hpp"
#include "json_fields.hpp"

namespace tandem::tokenizer {
namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{path.string() + ": cannot open for reading"};
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (!in.good() && !in.eof()) return Error{path.string() + ": read failed"};
  return buffer.str();
}

Result<AddedToken> parse_added_token(const nlohmann::json& t, const std::string& where) {
  if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
      t["id"].get<int64_t>() >= kMaxTokenId || !t.contains("content") || !t["content"].is_string()) {
    return Error{where + ": expected {\"id\": integer 0.." + std::to_string(kMaxTokenId - 1) + ", \"content\": string, ...}"};
  }
  AddedToken tok;
  tok.id = static_cast<int32_t>(t["id"].get<int64_t>());
  tok.content = t["content"].get<std::string>();
  auto special = bool_field(t, "special", false, where);
  if (!special) return special.error();
  tok.special = special.value();
  auto normalized = bool_field(t, "normalized", !tok.special, where);  // HF's default
  auto lstrip = bool_field(t, "lstrip", false, where);
  auto rstrip = bool_field(t, "rstrip", false, where);
  auto single_word = bool_field(t, "single_word", false, where);
  for (const auto* f : {&normalized, &lstrip, &rstrip, &single_word}) {
    if (!*f) return f->error();
  }
  tok.normalized = normalized.value();
  tok.lstrip = lstrip.value();
  tok.rstrip = rstrip.value();
  tok.single_word = single_word.value();
  return tok;
}

// Only the ByteLevel decoder (alone or as the sole member of a Sequence) fits byte-level BPE.
Result<bool> decoder_is_byte_level(const nlohmann::json& spec) {
  if (spec.is_null()) return false;
  if (!spec.is_object()) return Error{"decoder: expected an object or null"};
  auto type_field = string_field(spec, "type", std::string(), "decoder");
  if (!type_field) return type_field.error();
  const std::string& type = type_field.value();
  if (type == "ByteLevel") return true;
  if (type == "Sequence" && spec.contains("decoders") && spec["decoders"].is_array() && spec["decoders"].size() == 1) {
    return decoder_is_byte_level(spec["decoders"][0]);
  }
  return Error{"decoder: type \"" + type + "\" is not supported (supported: ByteLevel, or null)"};
}

Result<std::unique_ptr<Tokenizer::Impl>> build(const nlohmann::json& root) {
  if (!root.is_object()) return Error{"expected a JSON object at the top level"};
  const auto model_it = root.find("model");
  if (model_it == root.end()) return Error{"model: missing (expected the tokenizer model object)"};
  auto model = Bpe::from_json(*model_it);
  if (!model) return model.error();
  auto normalizer = Normalizer::from_json(root.value("normalizer", nlohmann::json()));
  if (!normalizer) return normalizer.error();
  auto pre = PreTokenizer::from_json(root.value("pre_tokenizer", nlohmann::json()));
  if (!pre) return pre.error();
  auto post = PostProcessor::from_json(root.value("post_processor", nlohmann::json()));
  if (!post) return post.error();
  auto byte_level_decoder = decoder_is_byte_level(root.value("decoder", nlohmann::json()));
  if (!byte_level_decoder) return byte_level_decoder.error();

  auto impl = std::unique_ptr<Tokenizer::Impl>(new Tokenizer::Impl{
      std::move(normalizer.value()), std::move(pre.value()), std::move(model.value()), std::move(post.value()),
      {}, {}, {}, {}, {}, {}, {}});

  for (const auto& [token, id] : impl->model.vocab()) {
    const auto i = static_cast<std::size_t>(id);
    if (i >= impl->id_to_token.size()) impl->id_to_token.resize(i + 1);
    impl->id_to_token[i] = token;
  }
  const auto added = root.find("added_tokens");
  if (added != root.end() && !added->is_null()) {
    if (!added->is_array()) return Error{"added_tokens: expected an array"};
    std::size_t n = 0;
    for (const auto& t : *added) {
      auto tok = parse_added_token(t, "added_tokens[" + std::to_string(n++) + "]");
      if (!tok) return tok.error();
      // HF's rule: content the model vocabulary already has keeps the vocabulary's id.
      if (const auto v = impl->model.vocab().find(tok->content); v != impl->model.vocab().end()) tok->id = v->second;
      const auto i = static_cast<std::size_t>(tok->id);
      if (i >= impl->id_to_token.size()) impl->id_to_token.resize(i + 1);
      impl->id_to_token[i] = tok->content;
      if (impl->special.size() < impl->id_to_token.size()) impl->special.resize(impl->id_to_token.size());
      impl->special[i] = tok->special;
      impl->added_ids.insert_or_assign(tok->content, tok->id);
      if (tok->normalized) {
        impl->normalized_added.add(impl->normalizer.apply(tok->content), tok.value());
      } else {
        impl->raw_added.add(tok->content, tok.value());
      }
    }
  }
  impl->special.resize(impl->id_to_token.size());
  // The post-processor's ids are written into every encoding: each must name a token.
  for (const auto* ids : {&impl->post_processor.prefix, &impl->post_processor.suffix}) {
    for (const int32_t id : *ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= impl->id_to_token.size()) {
        return Error{"post_processor: special token id " + std::to_string(id) + " is not in the vocabulary (" +
                     std::to_string(impl->id_to_token.size()) + " ids)"};
      }
    }
  }
  impl->id_bytes.reserve(impl->id_to_token.size());
  for (const auto& token : impl->id_to_token) {
    impl->id_bytes.push_back(byte_level_decoder.value() ? byte_level::decode_token(token) : token);
  }
  if (const auto unk = model_it->find("unk_token"); unk != model_it->end() && unk->is_string()) {
    if (const auto it = impl->model.vocab().find(unk->get<std::string>()); it != impl->model.vocab().end()) {
      impl->special_ids.unk = it->second;
    }
  }
  return impl;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                                       std::string_view origin) {
  const nlohmann::json root = nlohmann::json::parse(tokenizer_json, nullptr, false);
  if (root.is_discarded()) return Error{std::string(origin) + ": not valid JSON"};
  auto impl = build(root);
  if (!impl) return impl.error().with_context(std::string(origin));
  if (!config_json.empty()) {
    auto applied = apply_tokenizer_config(*impl.value(), config_json, "tokenizer_config.json");
    if (!applied) return applied.error();
  }
  return Tokenizer(std::move(impl.value()));
}

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& tokenizer_json,
                                  const std::filesystem::path& tokenizer_config_json) {
  auto text = read_file(tokenizer_json);
  if (!text) return text.error();
  auto tok = from_json(text.value(), {}, tokenizer_json.string());
  if (!tok || tokenizer_config_json.empty()) return tok;
  auto config = read_file(tokenizer_config_json);
  if (!config) return config.error();
  auto applied = apply_tokenizer_config(*tok->impl_, config.value(), tokenizer_config_json.string());
  if (!applied) return applied.error();
  return tok;
}

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& tokenizer_json) {
  const auto config = tokenizer_json.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  return load(tokenizer_json, std::filesystem::exists(config, ec) ? config : std::filesystem::path());
}

}  // namespace tandem::tokenizer
