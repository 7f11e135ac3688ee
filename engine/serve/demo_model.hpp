// `tandem-serve --write-demo-model DIR`: a tiny glm4_moe_lite model with seeded random weights, in
// Hugging Face format, so that a fresh install (manifests/local.yaml) binds and serves before any
// trained model is around. Its text is gibberish by construction; the point is the plumbing.
#pragma once
#include <filesystem>

#include "tandem/model/result.hpp"

namespace tandem::engine::serve {

// Writes config.json, generation_config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json and chat_template.jinja into `dir` (created when missing). The same seed
// gives the same bytes on every machine.
tandem::Status write_demo_model(const std::filesystem::path& dir, unsigned long long seed = 20240601);

}  // namespace tandem::engine::serve
