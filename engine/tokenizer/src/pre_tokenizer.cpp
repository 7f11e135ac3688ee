#include "pre_tokenizer.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "byte_level.hpp"
#include "json_fields.hpp"

namespace tandem::tokenizer {
namespace {

// GPT-2's word pattern, what ByteLevel splits with when its use_regex is true (the default).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

// long-function: one branch per pre-tokenizer type tokenizer.json may name (Sequence, Split, Digits,
// ByteLevel), each checking its own fields.
Result<std::vector<PreTokenizer::Step>> PreTokenizer::parse(const nlohmann::json& spec, const std::string& where) {
  std::vector<Step> steps;
  if (spec.is_null()) return steps;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return Error{where + ": expected an object with a string \"type\""};
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array()) {
      return Error{where + ".pretokenizers: expected an array"};
    }
    std::size_t i = 0;
    for (const auto& inner : spec["pretokenizers"]) {
      auto sub = parse(inner, where + ".pretokenizers[" + std::to_string(i++) + "]");
      if (!sub) return sub.error();
      for (auto& s : sub.value()) steps.push_back(std::move(s));
    }
    return steps;
  }
  if (type == "Split") {
    Step step;
    const auto pattern = spec.find("pattern");
    const bool is_regex = pattern != spec.end() && pattern->is_object() && pattern->contains("Regex") &&
                          (*pattern)["Regex"].is_string();
    const bool is_string = pattern != spec.end() && pattern->is_object() && pattern->contains("String") &&
                           (*pattern)["String"].is_string();
    if (!is_regex && !is_string) {
      return Error{where + ".pattern: expected {\"Regex\": \"...\"} or {\"String\": \"...\"}"};
    }
    auto re = Regex::compile((*pattern)[is_regex ? "Regex" : "String"].get<std::string>(), !is_regex);
    if (!re) return re.error().with_context(where + ".pattern");
    step.regex.push_back(std::move(re.value()));
    auto behavior_field = string_field(spec, "behavior", "Isolated", where);
    if (!behavior_field) return behavior_field.error();
    const std::string& behavior = behavior_field.value();
    if (behavior == "Removed") step.behavior = Behavior::Removed;
    else if (behavior == "Isolated") step.behavior = Behavior::Isolated;
    else if (behavior == "MergedWithPrevious") step.behavior = Behavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = Behavior::MergedWithNext;
    else if (behavior == "Contiguous") step.behavior = Behavior::Contiguous;
    else return Error{where + ".behavior: unknown split behavior \"" + behavior + "\""};
    auto invert = bool_field(spec, "invert", false, where);
    if (!invert) return invert.error();
    step.invert = invert.value();
    steps.push_back(std::move(step));
    return steps;
  }
  if (type == "Digits") {
    Step step;
    auto individual_field = bool_field(spec, "individual_digits", false, where);
    if (!individual_field) return individual_field.error();
    const bool individual = individual_field.value();
    auto re = Regex::compile("\\p{N}");
    if (!re) return re.error().with_context(where);
    step.regex.push_back(std::move(re.value()));
    step.behavior = individual ? Behavior::Isolated : Behavior::Contiguous;
    steps.push_back(std::move(step));
    return steps;
  }
  if (type == "ByteLevel") {
    auto use_regex = bool_field(spec, "use_regex", true, where);
    auto add_prefix_space = bool_field(spec, "add_prefix_space", true, where);
    if (!use_regex) return use_regex.error();
    if (!add_prefix_space) return add_prefix_space.error();
    if (use_regex.value()) {
      Step split_step;
      auto re = Regex::compile(kGpt2Pattern);
      if (!re) return re.error().with_context(where);
      split_step.regex.push_back(std::move(re.value()));
      split_step.add_prefix_space = add_prefix_space.value();
      steps.push_back(std::move(split_step));
    } else if (add_prefix_space.value()) {
      Step prefix_only;  // a Split with no regex: only the prefix space
      prefix_only.add_prefix_space = true;
      steps.push_back(std::move(prefix_only));
    }
    Step map_step;
    map_step.kind = Step::Kind::ByteLevel;
    steps.push_back(std::move(map_step));
    return steps;
  }
  return Error{where + ": pre_tokenizer type \"" + type +
               "\" is not supported (supported: Split, ByteLevel, Digits, Sequence)"};
}

Result<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& spec) {
  auto steps = parse(spec, "pre_tokenizer");
  if (!steps) return steps.error();
  PreTokenizer p;
  p.steps_ = std::move(steps.value());
  return p;
}

void PreTokenizer::split(std::size_t index, std::string_view text, const WordSink& sink) const {
  const Step& step = steps_[index];
  std::string prefixed;
  if (step.add_prefix_space && !text.starts_with(' ')) {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  auto emit = [&](std::size_t begin, std::size_t end) {
    if (end > begin) run(index + 1, text.substr(begin, end - begin), sink);
  };
  if (step.regex.empty()) {
    emit(0, text.size());
    return;
  }
  const Regex& regex = step.regex.front();
  // Isolated and Removed need no look-back: stream them straight from the matcher.
  if (step.behavior == Behavior::Isolated || step.behavior == Behavior::Removed) {
    const bool keep_gaps = step.behavior == Behavior::Isolated || step.invert;
    const bool keep_matches = step.behavior == Behavior::Isolated || !step.invert;
    std::size_t last = 0;
    regex.for_each_match(text, [&](Span m) {
      if (keep_gaps) emit(last, m.begin);
      if (keep_matches) emit(m.begin, m.end);
      last = m.end;
    });
    if (keep_gaps) emit(last, text.size());
    return;
  }
  // Spans of the whole text, alternately gaps and matches (after `invert`, matches are the gaps).
  struct Part { std::size_t begin, end; bool match; };
  std::vector<Part> parts;
  std::size_t last = 0;
  regex.for_each_match(text, [&](Span m) {
    if (m.begin > last) parts.push_back({last, m.begin, step.invert});
    parts.push_back({m.begin, m.end, !step.invert});
    last = m.end;
  });
  if (last < text.size()) parts.push_back({last, text.size(), step.invert});

  // Merge rules as HF defines them: a match joins its neighbour only when that neighbour is not
  // itself a match; Contiguous joins runs of matches.
  std::vector<Part> merged;
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::Removed:
    case Behavior::Isolated:
      break;  // streamed above
    case Behavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !merged.empty()) merged.back().end = p.end;
        else merged.push_back(p);
        previous_match = p.match;
      }
      break;
    case Behavior::MergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !merged.empty()) merged.back().begin = it->begin;
        else merged.push_back(*it);
        previous_match = it->match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    case Behavior::Contiguous:
      for (const Part& p : parts) {
        if (p.match == previous_match && !merged.empty()) merged.back().end = p.end;
        else merged.push_back(p);
        previous_match = p.match;
      }
      break;
  }
  for (const Part& p : merged) emit(p.begin, p.end);
}

void PreTokenizer::run(std::size_t index, std::string_view text, const WordSink& sink) const {
  if (text.empty()) return;
  if (index == steps_.size()) {
    sink(text);
    return;
  }
  if (steps_[index].kind == Step::Kind::ByteLevel) {
    std::string mapped;
    mapped.reserve(text.size() * 2);
    byte_level::encode(text, mapped);
    run(index + 1, mapped, sink);
    return;
  }
  split(index, text, sink);
}

void PreTokenizer::apply(std::string_view text, const WordSink& sink) const { run(0, text, sink); }

}  // namespace tandem::tokenizer
