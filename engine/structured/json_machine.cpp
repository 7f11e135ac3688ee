#include "json_machine.hpp"

#include <algorithm>

namespace tandem::engine::structured {

namespace {

constexpr std::size_t kMaxFrames = 32;
constexpr int kInf = 1 << 29;
constexpr int kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 2;
constexpr std::uint8_t kMaxWhitespaceRun = 32;

// Phases of each frame kind.
enum : std::uint8_t { kRootValue = 0, kRootDone = 1 };
enum : std::uint8_t { kObjOpen = 0, kObjKey = 1, kObjColon = 2, kObjValue = 3, kObjAfter = 4, kObjComma = 5 };
enum : std::uint8_t { kArrOpen = 0, kArrValue = 1, kArrAfter = 2, kArrComma = 3 };
enum : std::uint8_t { kStrChars = 0, kStrEscape = 1, kStrHex = 2 };
enum : std::uint8_t { kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits };
enum : std::uint8_t { kUPrefix = 0, kUName = 1, kUMiddle = 2, kUArgs = 3, kUClose = 4 };

const std::vector<std::string> kBooleans = {"false", "true"};
const std::vector<std::string> kNullText = {"null"};
const int kPrefixLen = static_cast<int>(std::string_view(kUnionPrefix).size());
const int kMiddleLen = static_cast<int>(std::string_view(kUnionMiddle).size());

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Narrows the sorted range [lo, hi) of texts sharing `pos` leading bytes to those whose next byte
// is c; false when none is.
bool narrow(const std::vector<std::string>& lits, std::uint32_t& lo, std::uint32_t& hi, std::int32_t pos,
            unsigned char c) {
  const auto p = static_cast<std::size_t>(pos);
  auto has = [&](std::uint32_t i) { return lits[i].size() > p && static_cast<unsigned char>(lits[i][p]) == c; };
  std::uint32_t a = lo;
  while (a < hi && !has(a)) ++a;
  if (a == hi) return false;
  std::uint32_t b = a;
  while (b < hi && has(b)) ++b;
  lo = a;
  hi = b;
  return true;
}

enum class StrStep { ok, close, reject };

// One byte of a string body (after the opening quote): UTF-8 checked, escapes parsed.
StrStep string_byte(JsonMachine::Frame& f, unsigned char c, bool allow_escape) {
  if (f.utf8_need > 0) {
    if (c < f.utf8_lo || c > f.utf8_hi) return StrStep::reject;
    --f.utf8_need;
    f.utf8_lo = 0x80;
    f.utf8_hi = 0xBF;
    return StrStep::ok;
  }
  switch (f.phase) {
    case kStrEscape:
      if (c == 'u') {
        f.phase = kStrHex;
        f.hex = 0;
        return StrStep::ok;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        f.phase = kStrChars;
        return StrStep::ok;
      }
      return StrStep::reject;
    case kStrHex:
      if (!is_hex(c)) return StrStep::reject;
      // \uD800-\uDFFF are UTF-16 surrogates: alone they are not characters (strict parsers refuse them).
      if (f.hex == 0) f.surrogate = (c == 'd' || c == 'D');
      else if (f.hex == 1 && f.surrogate && c >= '8') return StrStep::reject;
      if (++f.hex == 4) f.phase = kStrChars;
      return StrStep::ok;
    default:
      break;
  }
  if (c == '"') return StrStep::close;
  if (c == '\\') {
    if (!allow_escape) return StrStep::reject;
    f.phase = kStrEscape;
    return StrStep::ok;
  }
  if (c < 0x20) return StrStep::reject;
  if (c < 0x80) return StrStep::ok;
  // UTF-8 lead bytes, with the ranges that rule out overlong forms, surrogates and > U+10FFFF.
  if (c >= 0xC2 && c <= 0xDF) {
    f.utf8_need = 1;
  } else if (c == 0xE0) {
    f.utf8_need = 2;
    f.utf8_lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    f.utf8_need = 2;
  } else if (c == 0xED) {
    f.utf8_need = 2;
    f.utf8_hi = 0x9F;
  } else if (c == 0xF0) {
    f.utf8_need = 3;
    f.utf8_lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    f.utf8_need = 3;
  } else if (c == 0xF4) {
    f.utf8_need = 3;
    f.utf8_hi = 0x8F;
  } else {
    return StrStep::reject;
  }
  return StrStep::ok;
}

// Bytes to close a string from here: finish the character or escape, then the quote.
int string_rest(const JsonMachine::Frame& f) {
  if (f.utf8_need > 0) return f.utf8_need + 1;
  if (f.phase == kStrEscape) return 2;
  if (f.phase == kStrHex) return 4 - f.hex + 1;
  return 1;
}

bool number_accepting(std::uint8_t phase) {
  return phase == kNumZero || phase == kNumInt || phase == kNumFrac || phase == kNumExpDigits;
}

}  // namespace

JsonMachine::JsonMachine(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  stack_.reserve(kMaxFrames + 2);  // frames are referenced across pushes: never reallocate
  Frame root;
  root.kind = Kind::root;
  root.node = &grammar_->nodes[static_cast<std::size_t>(grammar_->root)];
  stack_.push_back(root);
}

JsonMachine::JsonMachine(const JsonMachine& other) : grammar_(other.grammar_) {
  stack_.reserve(kMaxFrames + 2);
  stack_ = other.stack_;
}

JsonMachine::Frame& JsonMachine::mut(std::size_t i) {
  journal_.push_back({Undo::Op::modified, static_cast<std::uint32_t>(i), stack_[i]});
  return stack_[i];
}

void JsonMachine::push(const Frame& f) {
  stack_.push_back(f);
  journal_.push_back({Undo::Op::pushed, static_cast<std::uint32_t>(stack_.size() - 1), Frame{}});
}

JsonMachine::Frame JsonMachine::pop() {
  Frame f = stack_.back();
  stack_.pop_back();
  journal_.push_back({Undo::Op::popped, static_cast<std::uint32_t>(stack_.size()), f});
  return f;
}

void JsonMachine::rollback(std::size_t mark) {
  while (journal_.size() > mark) {
    const Undo& u = journal_.back();
    switch (u.op) {
      case Undo::Op::modified: stack_[u.index] = u.old; break;
      case Undo::Op::pushed: stack_.pop_back(); break;
      case Undo::Op::popped: stack_.push_back(u.old); break;
    }
    journal_.pop_back();
  }
}

bool JsonMachine::feed(unsigned char c) {
  const std::size_t mark = checkpoint();
  if (step(c)) return true;
  rollback(mark);
  return false;
}

bool JsonMachine::feed(std::string_view bytes) {
  const std::size_t mark = checkpoint();
  for (char ch : bytes)
    if (!step(static_cast<unsigned char>(ch))) {
      rollback(mark);
      return false;
    }
  return true;
}

bool JsonMachine::start_value(const Node& node, unsigned char c) {
  if (stack_.size() >= kMaxFrames) return false;
  Frame f;
  f.node = &node;
  auto literal = [&](const std::vector<std::string>& lits) {
    f.kind = Kind::literal;
    f.lits = &lits;
    f.lo = 0;
    f.hi = static_cast<std::uint32_t>(lits.size());
    if (!narrow(lits, f.lo, f.hi, 0, c)) return false;
    f.pos = 1;
    push(f);
    if (f.hi - f.lo == 1 && lits[f.lo].size() == 1) child_done(pop());  // a one-byte value
    return true;
  };
  if (node.tool_union) {
    if (c != '{') return false;
    f.kind = Kind::tool_union;
    f.phase = kUPrefix;
    f.pos = 1;
    push(f);
    return true;
  }
  if (!node.literals.empty()) return literal(node.literals);
  // A container is opened only with a frame to spare for its first child: at the last frame an
  // object could take a key and then have no room for that key's value, a dead end that
  // min_close (which counts a scalar there) would not see (found by fuzz/schema_grammar_fuzz).
  if ((c == '{' || c == '[') && stack_.size() + 1 >= kMaxFrames) return false;
  if (c == '{' && (node.types & kObject)) {
    f.kind = Kind::object;
    f.phase = kObjOpen;
  } else if (c == '[' && (node.types & kArray)) {
    f.kind = Kind::array;
    f.phase = kArrOpen;
  } else if (c == '"' && (node.types & kString)) {
    f.kind = Kind::string;
    f.phase = kStrChars;
  } else if ((c == '-' || is_digit(c)) && (node.types & (kInteger | kNumber))) {
    f.kind = Kind::number;
    f.phase = c == '-' ? kNumMinus : c == '0' ? kNumZero : kNumInt;
    f.pos = c == '-' || c == '0' ? 0 : 1;
  } else if ((c == 't' || c == 'f') && (node.types & kBoolean)) {
    return literal(kBooleans);
  } else if (c == 'n' && (node.types & kNull)) {
    return literal(kNullText);
  } else {
    return false;
  }
  push(f);
  return true;
}

void JsonMachine::child_done(const Frame& child) {
  Frame& p = mut(stack_.size() - 1);
  switch (p.kind) {
    case Kind::root: p.phase = kRootDone; break;
    case Kind::object:
      if (p.phase == kObjKey) {
        p.cur = child.cur;
        p.phase = kObjColon;
      } else {
        if (p.cur >= 0) p.used |= std::uint64_t{1} << p.cur;
        p.phase = kObjAfter;
      }
      break;
    case Kind::array: p.phase = kArrAfter; break;
    case Kind::tool_union:
      if (p.phase == kUName) {
        p.cur = static_cast<std::int32_t>(child.lo);
        p.phase = kUMiddle;
        p.pos = 0;
      } else {
        p.phase = kUClose;
      }
      break;
    default: break;  // scalars have no children
  }
}

bool JsonMachine::key_available(const Frame& obj) const {
  if (obj.node->additional != kNoAdditional) return true;
  for (std::size_t i = 0; i < obj.node->names.size(); ++i)
    if (!(obj.used >> i & 1)) return true;
  return false;
}

bool JsonMachine::gap(std::size_t t) {
  Frame& f = mut(t);
  return ++f.ws <= kMaxWhitespaceRun;
}

// The byte loop: each kind of frame reads its own bytes (the functions below); a number or a
// literal that ends before a byte hands that byte to the frame it ended into.
bool JsonMachine::step(unsigned char c) {
  while (true) {
    const std::size_t t = stack_.size() - 1;
    if ((stack_[t].kind == Kind::object || stack_[t].kind == Kind::array) && stack_[t].ws != 0 && !is_ws(c))
      mut(t).ws = 0;  // a run of whitespace ends
    const Frame& f = stack_[t];
    Byte b = Byte::refused;
    switch (f.kind) {
      case Kind::root:
        if (f.phase == kRootDone) return false;  // nothing after the document, not even whitespace
        return start_value(*f.node, c);
      case Kind::object: return object_byte(t, c);
      case Kind::key: return key_byte(t, c);
      case Kind::array: return array_byte(t, c);
      case Kind::string: {
        const StrStep s = string_byte(mut(t), c, true);
        if (s == StrStep::reject) return false;
        if (s == StrStep::close) child_done(pop());
        return true;
      }
      case Kind::number: b = number_byte(t, c); break;
      case Kind::literal: b = literal_byte(t, c); break;
      case Kind::tool_union: return union_byte(t, c);
    }
    if (b != Byte::ended) return b == Byte::taken;
  }
}

bool JsonMachine::object_byte(std::size_t t, unsigned char c) {
  const Frame& f = stack_[t];
  const Node& n = *f.node;
  switch (f.phase) {
    case kObjOpen:
    case kObjComma:
      if (is_ws(c)) return gap(t);
      if (c == '}' && f.phase == kObjOpen) {
        if (n.required & ~f.used) return false;
        child_done(pop());
        return true;
      }
      if (c != '"' || !key_available(f)) return false;
      {
        mut(t).phase = kObjKey;
        Frame k;
        k.kind = Kind::key;
        k.node = &n;
        k.lits = &n.names;
        k.hi = static_cast<std::uint32_t>(n.names.size());
        k.diverged = n.names.empty();
        push(k);
      }
      return true;
    case kObjColon:
      if (is_ws(c)) return gap(t);
      if (c != ':') return false;
      mut(t).phase = kObjValue;
      return true;
    case kObjValue:
      if (is_ws(c)) return gap(t);
      return start_value(
          grammar_->nodes[static_cast<std::size_t>(f.cur >= 0 ? n.props[static_cast<std::size_t>(f.cur)] : n.additional)],
          c);
    case kObjAfter:
      if (is_ws(c)) return gap(t);
      if (c == ',') {
        if (!key_available(f)) return false;
        mut(t).phase = kObjComma;
        return true;
      }
      if (c == '}' && !(n.required & ~f.used)) {
        child_done(pop());
        return true;
      }
      return false;
    default: return false;
  }
}

bool JsonMachine::key_byte(std::size_t t, unsigned char c) {
  const Node& n = *stack_[t].node;
  const Frame& obj = stack_[t - 1];
  const bool declared = !n.names.empty();
  Frame& k = mut(t);
  const StrStep s = string_byte(k, c, /*allow_escape=*/!declared);
  if (s == StrStep::reject) return false;
  if (s == StrStep::ok) {
    if (!k.diverged) {
      if (narrow(n.names, k.lo, k.hi, k.pos, c)) ++k.pos;
      else k.diverged = true;
    }
    if (n.additional == kNoAdditional) {  // the key must stay the start of an unwritten name
      if (k.diverged) return false;
      bool open = false;
      for (std::uint32_t i = k.lo; i < k.hi && !open; ++i) open = !(obj.used >> i & 1);
      if (!open) return false;
    }
    return true;
  }
  // The closing quote: a declared name (not written yet) or, where allowed, another key.
  std::int32_t prop = -1;
  if (!k.diverged && k.lo < k.hi && n.names[k.lo].size() == static_cast<std::size_t>(k.pos))
    prop = static_cast<std::int32_t>(k.lo);
  if (prop >= 0 && (obj.used >> prop & 1)) return false;
  if (prop < 0 && n.additional == kNoAdditional) return false;
  Frame done = pop();
  done.cur = prop;
  child_done(done);
  return true;
}

bool JsonMachine::array_byte(std::size_t t, unsigned char c) {
  const Frame& f = stack_[t];
  switch (f.phase) {
    case kArrOpen:
    case kArrComma:
      if (is_ws(c)) return gap(t);
      if (c == ']' && f.phase == kArrOpen) {
        child_done(pop());
        return true;
      }
      mut(t).phase = kArrValue;
      return start_value(grammar_->nodes[static_cast<std::size_t>(f.node->items)], c);
    case kArrAfter:
      if (is_ws(c)) return gap(t);
      if (c == ',') {
        mut(t).phase = kArrComma;
        return true;
      }
      if (c == ']') {
        child_done(pop());
        return true;
      }
      return false;
    default: return false;
  }
}

JsonMachine::Byte JsonMachine::number_byte(std::size_t t, unsigned char c) {
  const Frame& f = stack_[t];
  const Node& n = *f.node;
  const bool int_only = (n.types & kInteger) && !(n.types & kNumber);
  const bool exp_ok = !int_only && (c == 'e' || c == 'E');
  std::uint8_t next = 255;  // 255: the number ends before c
  std::int32_t pos = f.pos;
  switch (f.phase) {
    case kNumMinus:
      if (c == '0') next = kNumZero;
      else if (is_digit(c)) next = kNumInt, pos = 1;
      else return Byte::refused;
      break;
    case kNumZero:
    case kNumInt:
    case kNumFrac:
      if (is_digit(c) && f.phase != kNumZero && pos < (f.phase == kNumFrac ? kMaxFracDigits : kMaxIntDigits))
        next = f.phase, ++pos;
      else if (c == '.' && !int_only && f.phase != kNumFrac) next = kNumDot;
      else if (exp_ok) next = kNumExp;
      break;
    case kNumDot:
      if (!is_digit(c)) return Byte::refused;
      next = kNumFrac, pos = 1;
      break;
    case kNumExp:
      if (c == '+' || c == '-') next = kNumExpSign;
      else if (is_digit(c)) next = kNumExpDigits, pos = 1;
      else return Byte::refused;
      break;
    case kNumExpSign:
      if (!is_digit(c)) return Byte::refused;
      next = kNumExpDigits, pos = 1;
      break;
    case kNumExpDigits:
      if (is_digit(c) && pos < kMaxExpDigits) next = kNumExpDigits, ++pos;
      break;
    default: return Byte::refused;
  }
  if (next != 255) {
    Frame& m = mut(t);
    m.phase = next;
    m.pos = pos;
    return Byte::taken;
  }
  if (!number_accepting(f.phase)) return Byte::refused;
  child_done(pop());  // the number ended; c belongs to the enclosing value
  return Byte::ended;
}

JsonMachine::Byte JsonMachine::literal_byte(std::size_t t, unsigned char c) {
  const Frame& f = stack_[t];
  std::uint32_t lo = f.lo, hi = f.hi;
  if (narrow(*f.lits, lo, hi, f.pos, c)) {
    Frame& m = mut(t);
    m.lo = lo;
    m.hi = hi;
    ++m.pos;
    if (hi - lo == 1 && (*m.lits)[lo].size() == static_cast<std::size_t>(m.pos)) child_done(pop());
    return Byte::taken;
  }
  // A literal that is complete and could have grown (enum [1, 12] after "1") ends here.
  if ((*f.lits)[f.lo].size() != static_cast<std::size_t>(f.pos)) return Byte::refused;
  child_done(pop());
  return Byte::ended;
}

bool JsonMachine::union_byte(std::size_t t, unsigned char c) {
  const Frame& f = stack_[t];
  const Node& n = *f.node;
  switch (f.phase) {
    case kUPrefix:
    case kUMiddle: {
      const std::string_view text = f.phase == kUPrefix ? std::string_view(kUnionPrefix) : std::string_view(kUnionMiddle);
      if (c != static_cast<unsigned char>(text[static_cast<std::size_t>(f.pos)])) return false;
      Frame& m = mut(t);
      if (static_cast<std::size_t>(++m.pos) == text.size()) {
        m.phase = m.phase == kUPrefix ? kUName : kUArgs;
        m.pos = 0;
      }
      return true;
    }
    case kUName: {
      if (stack_.size() >= kMaxFrames) return false;
      Frame l;
      l.kind = Kind::literal;
      l.node = &n;
      l.lits = &n.literals;
      l.hi = static_cast<std::uint32_t>(n.literals.size());
      if (!narrow(n.literals, l.lo, l.hi, 0, c)) return false;
      l.pos = 1;
      push(l);
      return true;
    }
    case kUArgs:
      return start_value(grammar_->nodes[static_cast<std::size_t>(n.union_args[static_cast<std::size_t>(f.cur)])], c);
    case kUClose:
      if (c != '}') return false;
      child_done(pop());
      return true;
    default: return false;
  }
}

// ---- how far from complete ----

int JsonMachine::object_rest(const Frame& obj, std::uint64_t used) const {
  const Node& n = *obj.node;
  const std::uint64_t left = n.required & ~used;
  int cost = 1;  // '}'
  for (std::size_t i = 0; i < n.names.size(); ++i)
    if (left >> i & 1) cost += 1 + n.entry_bytes[i];  // ',' "name":value
  return cost;
}

int JsonMachine::object_entries(const Frame& obj) const {
  const Node& n = *obj.node;
  const std::uint64_t left = n.required & ~obj.used;
  if (left) return object_rest(obj, obj.used) - 1;  // the first entry needs no comma
  int best = kInf;
  for (std::size_t i = 0; i < n.names.size(); ++i)
    if (!(obj.used >> i & 1)) best = std::min(best, n.entry_bytes[i] + 1);
  if (n.additional != kNoAdditional)
    best = std::min(best, 2 + 1 + grammar_->nodes[static_cast<std::size_t>(n.additional)].min_bytes + 1);  // "":v}
  return best;
}

int JsonMachine::key_cost(std::size_t i) const {
  const Frame& k = stack_[i];
  const Frame& obj = stack_[i - 1];
  const Node& n = *k.node;
  int best = kInf;
  if (!k.diverged) {
    for (std::uint32_t j = k.lo; j < k.hi; ++j) {
      if (obj.used >> j & 1) continue;
      const int name_rest = static_cast<int>(n.names[j].size()) - k.pos;
      best = std::min(best, name_rest + 1 + 1 + grammar_->nodes[static_cast<std::size_t>(n.props[j])].min_bytes +
                                object_rest(obj, obj.used | (std::uint64_t{1} << j)));
    }
  }
  if (n.additional != kNoAdditional) {
    int close;
    if (k.diverged) close = string_rest(k);
    else if (k.utf8_need > 0) close = k.utf8_need + 2;  // finish the character, one byte off every name, '"'
    else close = (k.lo < k.hi && n.names[k.lo].size() == static_cast<std::size_t>(k.pos)) ? 2 : 1;
    best = std::min(best, close + 1 + grammar_->nodes[static_cast<std::size_t>(n.additional)].min_bytes +
                              object_rest(obj, obj.used));
  }
  return best;
}

int JsonMachine::contribution(std::size_t i) const {
  const Frame& f = stack_[i];
  const Node& n = *f.node;
  const bool child = i + 1 < stack_.size();
  auto min_of = [&](int node) { return grammar_->nodes[static_cast<std::size_t>(node)].min_bytes; };
  auto value_node = [&]() { return f.cur >= 0 ? n.props[static_cast<std::size_t>(f.cur)] : n.additional; };
  auto with_cur = [&]() { return f.cur >= 0 ? f.used | (std::uint64_t{1} << f.cur) : f.used; };
  auto union_choice = [&](std::size_t j, int written) {
    return static_cast<int>(n.literals[j].size()) - written + kMiddleLen + min_of(n.union_args[j]) + 1;
  };
  switch (f.kind) {
    case Kind::root: return f.phase == kRootDone || child ? 0 : n.min_bytes;
    case Kind::object:
      switch (f.phase) {
        case kObjOpen: return (n.required & ~f.used) ? object_entries(f) : 1;
        case kObjKey: return 0;  // the key frame counts the entry and the rest of the object
        case kObjColon: return 1 + min_of(value_node()) + object_rest(f, with_cur());
        case kObjValue: return (child ? 0 : min_of(value_node())) + object_rest(f, with_cur());
        case kObjAfter: return object_rest(f, f.used);
        case kObjComma: return object_entries(f);
        default: return 0;
      }
    case Kind::key: return key_cost(i);
    case Kind::array: return f.phase == kArrComma && !child ? min_of(n.items) + 1 : 1;
    case Kind::string: return string_rest(f);
    case Kind::number: return number_accepting(f.phase) ? 0 : 1;
    case Kind::literal: {
      const bool tool_name = i > 0 && stack_[i - 1].kind == Kind::tool_union;
      int best = kInf;
      for (std::uint32_t j = f.lo; j < f.hi; ++j) {
        const int rest = static_cast<int>((*f.lits)[j].size()) - f.pos;
        best = std::min(best, tool_name ? union_choice(j, f.pos) : rest);
      }
      return best;
    }
    case Kind::tool_union:
      switch (f.phase) {
        case kUPrefix:
        case kUName: {
          if (f.phase == kUName && child) return 0;  // the name literal counts the rest
          int best = kInf;
          for (std::size_t j = 0; j < n.literals.size(); ++j) best = std::min(best, union_choice(j, 0));
          return (f.phase == kUPrefix ? kPrefixLen - f.pos : 0) + best;
        }
        case kUMiddle: return kMiddleLen - f.pos + min_of(n.union_args[static_cast<std::size_t>(f.cur)]) + 1;
        case kUArgs: return (child ? 0 : min_of(n.union_args[static_cast<std::size_t>(f.cur)])) + 1;
        case kUClose: return 1;
        default: return 0;
      }
  }
  return 0;
}

int JsonMachine::min_close() const {
  int total = 0;
  for (std::size_t i = 0; i < stack_.size(); ++i) total += contribution(i);
  return total;
}

bool JsonMachine::in_plain_string() const {
  const Frame& f = stack_.back();
  return (f.kind == Kind::string || (f.kind == Kind::key && f.diverged)) && f.phase == kStrChars && f.utf8_need == 0;
}

bool JsonMachine::accepting() const {
  if (stack_.size() == 1) return stack_[0].phase == kRootDone;
  if (stack_.size() != 2) return false;
  const Frame& top = stack_[1];
  if (top.kind == Kind::number) return number_accepting(top.phase);
  if (top.kind == Kind::literal) return (*top.lits)[top.lo].size() == static_cast<std::size_t>(top.pos);
  return false;
}

bool JsonMachine::finished() const {
  if (!accepting()) return false;
  if (stack_.size() == 1) return true;
  JsonMachine probe(*this);
  probe.commit();
  for (int c = 0; c < 256; ++c)
    if (probe.feed(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string JsonMachine::shortest_completion() const {
  JsonMachine m(*this);
  m.commit();
  std::string out;
  for (int cost = m.min_close(); cost > 0; --cost) {
    bool found = false;
    for (int c = 0; c < 256 && !found; ++c) {
      const std::size_t mark = m.checkpoint();
      if (m.feed(static_cast<unsigned char>(c)) && m.min_close() == cost - 1) {
        out.push_back(static_cast<char>(c));
        found = true;
      } else {
        m.rollback(mark);
      }
    }
    if (!found) break;  // cannot happen when min_close is exact; the tests hold it to that
    m.commit();
  }
  return out;
}

}  // namespace tandem::engine::structured
