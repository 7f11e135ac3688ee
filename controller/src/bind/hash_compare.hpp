// The bind's last check before launch: every rank must run byte-identical engine, configs, model
// and drafter, and pinned files must have the digests the manifest pins. Input is each node's
// "sha" step evidence ({"files":{path:sha},"trees":{dir:{rel:sha}},"pins":[...]}); the result
// names every differing file and what each node has.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::ctl {

using nlohmann::json;

struct HashComparison {
  bool ok = true;
  std::size_t files_compared = 0;
  // [{"file", "reason", "digests": {node: sha256 | null}}], sorted by file
  json mismatches = json::array();
  // {file: {node: sha256 | null}} for every file compared: the report's hash table across ranks.
  json table = json::object();
  std::string summary() const;  // "3 files differ: /models/m/a.safetensors (rank0 1a2b.. vs rank1 3c4d..), ..."
  json to_json() const;
};

HashComparison compare_hashes(const std::map<std::string, json>& evidence_by_node);

}  // namespace tandem::ctl
