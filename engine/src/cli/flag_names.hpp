// The command line's side of the settings' names. serve/ and the layers below name a setting in
// their messages by its field in backquotes (`max_model_len`), because they do not know how it was
// given; tandem-serve's operator typed a flag, so the messages they read name the flag.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

namespace tandem::engine {

// Replaces each `setting` whose flag (--setting with '-' for '_') is one of `app`'s options by that
// flag; other backquoted text is left as it is.
std::string name_flags(std::string_view message, const CLI::App& app);

}  // namespace tandem::engine
