// Everything a loaded tokenizer holds; built by load.cpp, used by tokenizer.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "added_tokens.hpp"
#include "bpe.hpp"
#include "normalizer.hpp"
#include "post_processor.hpp"
#include "pre_tokenizer.hpp"
#include "string_map.hpp"
#include "tandem/tokenizer/tokenizer.hpp"

namespace tandem::tokenizer {

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Bpe model;
  PostProcessor post_processor;
  AddedTokenMatcher raw_added;         // added tokens with normalized=false: matched on input text
  AddedTokenMatcher normalized_added;  // normalized=true: matched after normalization
  TokenIdMap added_ids;                // content -> id, consulted before the model vocab

  std::vector<std::string> id_to_token;  // token string per id ("" for holes)
  std::vector<std::string> id_bytes;     // what the decoder turns each id into
  std::vector<bool> special;
  SpecialTokenIds special_ids;
};

}  // namespace tandem::tokenizer
