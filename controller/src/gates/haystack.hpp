// The long-context gate's prompt: deterministic filler prose with one fact (the needle) hidden at
// a chosen depth, and the question that asks for it.
#pragma once
#include <string>

namespace tandem::gates {

struct Needle {
  std::string code;      // what the answer must contain, e.g. "QX-7391-LARK"
  std::string sentence;  // the fact as it sits in the text
  std::string question;  // asked after the text
};

// A code no filler sentence can contain (filler has no digits), different on every call.
Needle make_needle();

// `sentences` filler sentences (the same ones for the same count) with the needle's sentence
// inserted after the fraction `depth` (0..1) of them.
std::string haystack(int sentences, double depth, const Needle& needle);

}  // namespace tandem::gates
