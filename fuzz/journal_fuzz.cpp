// tandemd's journal replay at start-up: the input is written as <state>/journal.jsonl and opened
// as the agent opens it after a crash. Torn last lines are cut off, corrupt earlier lines refused;
// the records that replay must answer the queries the undo path makes, and blob references in
// their data must parse or be refused, never throw.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <spdlog/spdlog.h>

#include "fuzz_check.hpp"
#include "tandem/agent/journal.hpp"

namespace {

const std::filesystem::path& state_dir() {
  static const std::filesystem::path d = [] {
    auto p = std::filesystem::temp_directory_path() / ("tandem-fuzz-journal-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    std::atexit([] { std::filesystem::remove_all(state_dir()); });
    return p;
  }();
  return d;
}

}  // namespace

// A torn line is logged as a warning; at thousands of runs a second the log is only noise.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = state_dir() / tandem::agent::Journal::kFileName;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) {
      std::perror("writing the fuzz input");
      std::abort();
    }
  }
  auto j = tandem::agent::Journal::open(state_dir().string());
  if (!j) return 0;
  const auto& journal = *j.value();
  // Replay keeps whole lines only: what is left on disk is exactly the records' lines.
  tandem::fuzz::check(std::filesystem::file_size(path) <= size, "replay made the journal longer");
  for (const auto& id : journal.ops_to_undo()) {
    (void)journal.records_for(id);
    (void)journal.last(id, tandem::agent::Phase::applied);
  }
  for (const auto& r : journal.records()) {
    (void)r.to_json().dump();
    if (r.data.is_object())
      for (const auto& [key, value] : r.data.items()) (void)tandem::agent::BlobRef::from_json(value);
  }
  return 0;
}
