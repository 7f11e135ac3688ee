// A pushdown machine over bytes that accepts exactly the JSON documents a Grammar allows, one byte
// at a time, and knows at every point how many bytes the shortest completion needs (min_close).
//
// The stack holds one frame per open value (object, key, array, string, number, literal). Each
// change to it is journaled, so a caller can try bytes and roll back cheaply (checkpoint /
// rollback): that is how the token mask walks the vocabulary's byte trie without copying states.
//
// What it accepts, beyond the schema: no whitespace before the top-level value and nothing after
// it; whitespace between tokens inside objects and arrays, at most 32 bytes in a row (pretty
// printing fits; a model cannot idle in whitespace); strings of valid UTF-8 without raw
// control characters, with escapes (\u escapes outside the surrogate range); numbers with at most
// 15 integer and 15 fraction digits and a 2-digit exponent (so every one parses to a finite
// double, and integers fit int64); at most 32 nested frames. Object keys of an object that
// declares properties are written without escapes (so a key is either a declared name or not,
// byte for byte).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar.hpp"

namespace tandem::engine::structured {

class JsonMachine {
 public:
  explicit JsonMachine(std::shared_ptr<const Grammar> grammar);
  // A copy of the state (not of the journal).
  JsonMachine(const JsonMachine& other);
  JsonMachine& operator=(const JsonMachine&) = delete;

  // Takes one byte, or returns false and leaves the state as it was.
  bool feed(unsigned char c);
  // All bytes or none.
  bool feed(std::string_view bytes);

  // Bytes of the shortest text that completes the document from here (0: complete now).
  int min_close() const;
  // The document is complete as it stands (a top-level number could still grow).
  bool accepting() const;
  // Complete, and no byte may follow.
  bool finished() const;
  // A shortest completing text (min_close() bytes); for messages and tests.
  std::string shortest_completion() const;

  // Journal marks: roll back to a checkpoint to undo every feed since. commit() forgets the
  // journal (call it after a feed that is kept, so the journal does not grow without end).
  std::size_t checkpoint() const { return journal_.size(); }
  void rollback(std::size_t mark);
  void commit() { journal_.clear(); }

  std::size_t depth() const { return stack_.size(); }
  // Inside a string (or an object key that is no declared name) between characters and escapes:
  // here any bytes without '"', '\\' or control characters, in valid UTF-8, stay in the string
  // and change min_close only by the continuation bytes they leave due. The mask's fast path.
  bool in_plain_string() const;

  enum class Kind : std::uint8_t { root, object, key, array, string, number, literal, tool_union };
  struct Frame {
    const Node* node = nullptr;
    const std::vector<std::string>* lits = nullptr;  // literal: texts matched; key: declared names
    std::uint64_t used = 0;    // object: declared properties written
    std::uint32_t lo = 0, hi = 0;  // literal / key: the live range of lits
    std::int32_t pos = 0;      // literal / key: bytes matched; tool_union: bytes of fixed text; number: digits
    std::int32_t cur = -1;     // object: property whose value comes (-1: undeclared); tool_union: chosen tool
    Kind kind = Kind::root;
    std::uint8_t phase = 0;
    std::uint8_t utf8_need = 0;  // string / key: continuation bytes still due
    std::uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // range of the next continuation byte
    std::uint8_t hex = 0;        // string / key: \u digits seen
    bool surrogate = false;      // the \u escape began with D: its second digit must be 0-7
    bool diverged = false;       // key: no declared name starts with what was written
    std::uint8_t ws = 0;         // object / array: whitespace bytes in the current run
  };

 private:
  struct Undo {
    enum class Op : std::uint8_t { modified, pushed, popped } op;
    std::uint32_t index;
    Frame old;
  };

  Frame& mut(std::size_t i);  // journals frame i, then gives it out for change
  void push(const Frame& f);
  Frame pop();
  bool step(unsigned char c);  // feed without the all-or-nothing rollback
  // One byte for the top frame t, by its kind. `ended`: a number or literal that ended before the
  // byte, which the enclosing frame reads next.
  enum class Byte : std::uint8_t { taken, refused, ended };
  bool object_byte(std::size_t t, unsigned char c);
  bool key_byte(std::size_t t, unsigned char c);
  bool array_byte(std::size_t t, unsigned char c);
  Byte number_byte(std::size_t t, unsigned char c);
  Byte literal_byte(std::size_t t, unsigned char c);
  bool union_byte(std::size_t t, unsigned char c);
  bool gap(std::size_t t);     // one whitespace byte in frame t's current run (false past the cap)
  bool start_value(const Node& node, unsigned char c);
  void child_done(const Frame& child);
  int contribution(std::size_t i) const;
  int key_cost(std::size_t i) const;
  int object_rest(const Frame& obj, std::uint64_t used) const;
  int object_entries(const Frame& obj) const;  // phase "after a comma": the cheapest way on
  bool key_available(const Frame& obj) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Frame> stack_;
  std::vector<Undo> journal_;
};

}  // namespace tandem::engine::structured
