#include "haystack.hpp"

#include <array>
#include <cstdint>
#include <random>

namespace tandem::gates {

namespace {

// Plain, varied prose without digits: a model must read it, and cannot pattern-match the code.
constexpr std::array kSubjects{"The old lighthouse keeper", "A travelling botanist", "The river pilot", "Our neighbour",
                               "The village baker",        "A quiet archivist",     "The ferry captain", "An apprentice weaver",
                               "The mountain guide",       "A retired surveyor",    "The orchard owner", "A young cartographer"};
constexpr std::array kVerbs{"walked past",  "wrote a letter about", "painted",  "argued over",    "carefully measured",
                            "remembered",   "sang softly about",    "repaired", "photographed", "counted",
                            "described",    "forgot about"};
constexpr std::array kObjects{"the harbour wall at dusk", "a basket of winter pears", "the crooked stone bridge",
                              "the morning fog over the marsh", "an unfinished map of the coast",
                              "the bell tower and its pigeons", "a row of drying nets", "the last train of the evening",
                              "a field of late sunflowers", "the leaking roof of the mill", "a box of faded postcards",
                              "the market square after rain"};
constexpr std::array kTails{"while the wind turned cold.", "before anyone else was awake.", "and nobody asked why.",
                            "as the tide went out.", "with more patience than usual.", "and then went home for supper.",
                            "because it seemed important at the time.", "under a sky the colour of slate."};

// splitmix64: the same sentence for the same index on every machine.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string sentence(std::uint64_t i) {
  const std::uint64_t h = mix(i);
  return std::string(kSubjects[h % kSubjects.size()]) + " " + kVerbs[(h >> 8) % kVerbs.size()] + " " +
         kObjects[(h >> 16) % kObjects.size()] + " " + kTails[(h >> 24) % kTails.size()];
}

}  // namespace

Needle make_needle() {
  static constexpr std::array kWords{"LARK", "OTTER", "CEDAR", "FLINT", "HERON", "MAPLE", "QUARTZ", "WREN"};
  std::random_device rd;
  std::mt19937_64 g((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  std::string letters;
  for (int i = 0; i < 2; ++i) letters += static_cast<char>('A' + g() % 26);
  const std::string code = letters + "-" + std::to_string(1000 + g() % 9000) + "-" + kWords[g() % kWords.size()];
  return {code, "The access code for the north vault is " + code + ".",
          "What is the access code for the north vault? Answer with the code only."};
}

std::string haystack(int sentences, double depth, const Needle& needle) {
  const int at = static_cast<int>(depth * sentences);
  std::string out;
  out.reserve(static_cast<std::size_t>(sentences) * 80 + 200);
  for (int i = 0; i <= sentences; ++i) {
    if (i == at) out += needle.sentence + " ";
    if (i < sentences) {
      out += sentence(static_cast<std::uint64_t>(i));
      out += (i % 6 == 5) ? "\n\n" : " ";
    }
  }
  return out;
}

}  // namespace tandem::gates
