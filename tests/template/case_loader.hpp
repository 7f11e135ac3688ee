// Loads tests/template/cases/cases.json and goldens.json and renders one case with tandem's engine
// the same way the reference scripts do.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tandem/template/chat_template.hpp"

namespace tandem::tmpl::testing {

using ojson = nlohmann::ordered_json;

std::string read_text(const std::string& path);
const ojson& cases();                 // the "cases" array
const ojson& goldens();               // name -> expected text
std::string case_dir();               // tests/template/cases
std::string templates_dir();          // tests/template/templates
std::string template_source(const ojson& c);  // inline or from templates/ (not the qwen3 ones)
ChatRequest chat_request(const ojson& c);
// Renders a context-mode or chat-mode case; the error text ("ERROR: ...") on failure.
std::string render_case(const ojson& c, const ChatTemplate* given = nullptr);

}  // namespace tandem::tmpl::testing
