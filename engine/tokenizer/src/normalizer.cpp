#include "normalizer.hpp"

#include <nlohmann/json.hpp>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

namespace tandem::tokenizer {
namespace {

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<Normalizer::Form>> Normalizer::parse(const nlohmann::json& spec, const std::string& where) {
  std::vector<Form> forms;
  if (spec.is_null()) return forms;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return Error{where + ": expected an object with a string \"type\""};
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "NFC") forms.push_back(Form::NFC);
  else if (type == "NFD") forms.push_back(Form::NFD);
  else if (type == "NFKC") forms.push_back(Form::NFKC);
  else if (type == "NFKD") forms.push_back(Form::NFKD);
  else if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array()) {
      return Error{where + ".normalizers: expected an array"};
    }
    std::size_t i = 0;
    for (const auto& inner : spec["normalizers"]) {
      auto sub = parse(inner, where + ".normalizers[" + std::to_string(i++) + "]");
      if (!sub) return sub.error();
      forms.insert(forms.end(), sub->begin(), sub->end());
    }
  } else {
    return Error{where + ": normalizer type \"" + type +
                 "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence of those)"};
  }
  return forms;
}

Result<Normalizer> Normalizer::from_json(const nlohmann::json& spec) {
  auto forms = parse(spec, "normalizer");
  if (!forms) return forms.error();
  Normalizer n;
  n.steps_ = std::move(forms.value());
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  // ASCII is invariant under every normalization form: skip ICU for the common case.
  if (steps_.empty() || is_ascii(text)) return std::string(text);
  std::string current(text);
  for (const Form form : steps_) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (form) {
      case Form::NFC: n = icu::Normalizer2::getNFCInstance(status); break;
      case Form::NFD: n = icu::Normalizer2::getNFDInstance(status); break;
      case Form::NFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
      case Form::NFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
    }
    if (U_FAILURE(status) || n == nullptr) continue;  // ICU data missing: leave the text as is
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(current.size()));
    n->normalizeUTF8(0, icu::StringPiece(current.data(), static_cast<int32_t>(current.size())), sink, nullptr, status);
    if (U_SUCCESS(status)) current = std::move(out);
  }
  return current;
}

}  // namespace tandem::tokenizer
