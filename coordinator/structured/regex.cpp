#include "coordinator/structured/regex.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "coordinator/structured/json_lexemes.h"

namespace ds::structured {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

CpSet normalise(CpSet s) {
  std::sort(s.begin(), s.end());
  CpSet out;
  for (auto r : s) {
    if (!out.empty() && r.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

CpSet minus_surrogates(const CpSet& s) {
  CpSet out;
  for (auto [lo, hi] : s) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) out.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) out.emplace_back(0xE000, hi);
  }
  return out;
}

void encode_utf8(uint32_t cp, int n, uint8_t* out) {
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

// Byte sequences for code points lo..hi, all of the same encoded length n: split until the
// range is a cartesian product of byte ranges.
void utf8_same_len(uint32_t lo, uint32_t hi, int n, std::vector<ExprPtr>& out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_same_len(lo, lo | m, n, out);
        utf8_same_len((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_same_len(lo, (hi & ~m) - 1, n, out);
        utf8_same_len(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode_utf8(lo, n, a);
  encode_utf8(hi, n, b);
  std::vector<ExprPtr> seq;
  for (int i = 0; i < n; ++i) seq.push_back(e_bytes(ByteSet::range(a[i], b[i])));
  out.push_back(e_seq(std::move(seq)));
}

ExprPtr utf8_set(const CpSet& s) {
  std::vector<ExprPtr> alts;
  ByteSet ascii;
  static constexpr uint32_t kLimits[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCp};
  for (auto [lo0, hi0] : minus_surrogates(s)) {
    uint32_t lo = lo0;
    for (int n = 1; n <= 4 && lo <= hi0; ++n) {
      if (lo > kLimits[n - 1]) continue;
      const uint32_t hi = std::min(hi0, kLimits[n - 1]);
      if (n == 1)
        ascii.set_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      else
        utf8_same_len(lo, hi, n, alts);
      lo = hi + 1;
    }
  }
  if (ascii.empty()) return e_alt(std::move(alts));
  std::vector<ExprPtr> all;
  all.reserve(alts.size() + 1);
  all.push_back(e_bytes(ascii));
  for (auto& a : alts) all.push_back(std::move(a));
  return e_alt(std::move(all));
}

bool in_set(const CpSet& s, uint32_t cp) {
  for (auto [lo, hi] : s)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

ExprPtr hex_digit_of(unsigned v) {
  ByteSet b;
  const char* lower = "0123456789abcdef";
  const char* upper = "0123456789ABCDEF";
  b.set(static_cast<uint8_t>(lower[v]));
  b.set(static_cast<uint8_t>(upper[v]));
  return e_bytes(b);
}

// `\u00XX` for the control characters of `s`: one alternative per high hex digit (0 or 1) with
// the low digits as one byte set, rather than one per character (a pattern's `.` or `[^x]` has
// all 32: a compact NFA makes every pattern DFA cheaper to build; same language).
void add_control_escapes(const CpSet& s, std::vector<ExprPtr>& alts) {
  static const char* kLower = "0123456789abcdef";
  static const char* kUpper = "0123456789ABCDEF";
  for (unsigned high = 0; high < 2; ++high) {
    ByteSet low;
    for (unsigned v = 0; v < 16; ++v)
      if (in_set(s, high * 16 + v)) low.set(static_cast<uint8_t>(kLower[v])), low.set(static_cast<uint8_t>(kUpper[v]));
    if (!low.empty()) alts.push_back(e_seq({e_lit("\\u00"), hex_digit_of(high), e_bytes(low)}));
  }
}

// ---- pattern parser ------------------------------------------------------------------------

struct RegexError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class Parser {
 public:
  Parser(std::string_view p, std::function<ExprPtr(const CpSet&)> lower) : lower_(std::move(lower)) {
    for (size_t i = 0; i < p.size();) cps_.push_back(decode(p, i));
  }

  ExprPtr parse_top(bool search) {
    std::vector<ExprPtr> alts;
    for (;;) {
      bool a_start = false, a_end = false;
      if (peek() == '^') ++pos_, a_start = true;
      ExprPtr body = parse_seq(&a_end);
      std::vector<ExprPtr> parts;
      const ExprPtr any = e_rep(lower_(cp_all()), 0, kUnbounded);
      if (search && !a_start) parts.push_back(any);
      parts.push_back(body);
      if (search && !a_end) parts.push_back(any);
      alts.push_back(e_seq(std::move(parts)));
      if (pos_ >= cps_.size()) break;
      if (peek() != '|') throw RegexError("unbalanced ')'");
      ++pos_;
    }
    return e_alt(std::move(alts));
  }

 private:
  static uint32_t decode(std::string_view s, size_t& i) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + n > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : (c & (0x3F >> (n - 1)));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    i += n;
    return cp;
  }
  uint32_t peek() const { return pos_ < cps_.size() ? cps_[pos_] : 0xFFFFFFFF; }
  bool eat(uint32_t c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }

  ExprPtr parse_alt() {
    std::vector<ExprPtr> alts;
    alts.push_back(parse_seq(nullptr));
    while (eat('|')) alts.push_back(parse_seq(nullptr));
    return e_alt(std::move(alts));
  }

  // A sequence; `$` is allowed only as its last item when `end_anchor` is non-null.
  ExprPtr parse_seq(bool* end_anchor) {
    std::vector<ExprPtr> items;
    while (pos_ < cps_.size() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++pos_;
        if (!end_anchor || (pos_ < cps_.size() && peek() != '|')) throw RegexError("'$' not at the end");
        *end_anchor = true;
        break;
      }
      if (peek() == '^') throw RegexError("'^' not at the start");
      const bool one_char = peek() != '(';  // every other atom is one character
      ExprPtr atom = parse_atom();
      items.push_back(parse_quant(std::move(atom), one_char));
    }
    return items.empty() ? e_empty() : e_seq(std::move(items));
  }

  bool parse_int(uint32_t& v) {
    const size_t start = pos_;
    uint64_t x = 0;
    while (peek() >= '0' && peek() <= '9') {
      x = x * 10 + (peek() - '0');
      if (x > 100000) throw RegexError("repetition bound too large");
      ++pos_;
    }
    v = static_cast<uint32_t>(x);
    return pos_ > start;
  }

  ExprPtr parse_quant(ExprPtr atom, bool one_char) {
    for (;;) {
      uint32_t lo = 0, hi = 0;
      const uint32_t c = peek();
      if (c == '*') {
        ++pos_, lo = 0, hi = kUnbounded;
      } else if (c == '+') {
        ++pos_, lo = 1, hi = kUnbounded;
      } else if (c == '?') {
        ++pos_, lo = 0, hi = 1;
      } else if (c == '{') {
        const size_t save = pos_++;
        if (!parse_int(lo)) {
          pos_ = save;
          return atom;  // a literal '{' (Python semantics)
        }
        hi = lo;
        if (eat(',')) {
          if (!parse_int(hi)) hi = kUnbounded;
        }
        if (!eat('}')) {
          pos_ = save;
          return atom;
        }
        if (hi < lo) throw RegexError("bad repetition bounds");
      } else {
        return atom;
      }
      eat('?');  // lazy: same language
      if (peek() == '+') throw RegexError("possessive quantifier");
      if (one_char && (hi == kUnbounded ? lo : hi) >= 16) {
        // c{m,n} of one character: a counter automaton, not n NFA copies to determinise.
        Budget b;
        atom = e_embed(length_dfa(*build_dfa(atom, b), lo, hi, b));
      } else {
        atom = e_rep(std::move(atom), lo, hi);
      }
      one_char = false;
    }
  }

  ExprPtr parse_group() {
    if (eat('?')) {
      if (eat(':')) {
      } else if (peek() == '<' || peek() == 'P') {
        eat('P');
        if (!eat('<')) throw RegexError("unsupported group");
        if (peek() == '=' || peek() == '!') throw RegexError("lookbehind");
        while (pos_ < cps_.size() && peek() != '>') ++pos_;
        if (!eat('>')) throw RegexError("bad group name");
      } else {
        throw RegexError("lookaround or inline flags");
      }
    }
    ExprPtr e = parse_alt();
    if (!eat(')')) throw RegexError("missing ')'");
    return e;
  }

  ExprPtr parse_atom() {
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return lower_(parse_class());
      case '.':
        return lower_(cp_complement({{'\n', '\n'}}));
      case '\\':
        return lower_(parse_escape(false));
      case '*':
      case '+':
      case '?':
        throw RegexError("nothing to repeat");
      default:
        return lower_({{c, c}});
    }
  }

  static CpSet digit() { return {{'0', '9'}}; }
  static CpSet word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static CpSet space() { return {{'\t', '\r'}, {' ', ' '}}; }

  uint32_t parse_hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t c = peek();
      int d = c >= '0' && c <= '9'   ? static_cast<int>(c - '0')
              : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
              : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                                     : -1;
      if (d < 0) throw RegexError("bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  CpSet parse_escape(bool in_class) {
    if (pos_ >= cps_.size()) throw RegexError("trailing backslash");
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case 'd':
        return digit();
      case 'D':
        return cp_complement(digit());
      case 'w':
        return word();
      case 'W':
        return cp_complement(word());
      case 's':
        return space();
      case 'S':
        return cp_complement(space());
      case 't':
        return {{'\t', '\t'}};
      case 'n':
        return {{'\n', '\n'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      case 'x': {
        const uint32_t v = parse_hex(2);
        return {{v, v}};
      }
      case 'u': {
        const uint32_t v = parse_hex(4);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        throw RegexError("word boundary");
      default:
        break;
    }
    if ((c >= '1' && c <= '9') || c == 'k') throw RegexError("backreference");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) throw RegexError("unsupported escape");
    return {{c, c}};
  }

  CpSet parse_class() {
    const bool neg = eat('^');
    CpSet set;
    bool first = true;
    for (;;) {
      if (pos_ >= cps_.size()) throw RegexError("missing ']'");
      uint32_t c = cps_[pos_];
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      ++pos_;
      CpSet item;
      if (c == '\\') {
        item = parse_escape(true);
      } else if (c == '[' && peek() == ':') {
        throw RegexError("POSIX class");
      } else {
        item = {{c, c}};
      }
      if (item.size() == 1 && item[0].first == item[0].second && peek() == '-' && pos_ + 1 < cps_.size() &&
          cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = cps_[pos_++];
        if (hi == '\\') {
          CpSet h = parse_escape(true);
          if (h.size() != 1 || h[0].first != h[0].second) throw RegexError("bad class range");
          hi = h[0].first;
        }
        if (hi < item[0].first) throw RegexError("bad class range");
        item = {{item[0].first, hi}};
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    set = normalise(set);
    return neg ? cp_complement(set) : set;
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
  std::function<ExprPtr(const CpSet&)> lower_;
};

}  // namespace

CpSet cp_all() {
  return {{0, 0xD7FF}, {0xE000, kMaxCp}};
}

CpSet cp_complement(const CpSet& s0) {
  const CpSet s = normalise(s0);
  CpSet out;
  uint32_t next = 0;
  for (auto [lo, hi] : s) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return minus_surrogates(out);
}

ExprPtr json_char(const CpSet& s0, bool all_escapes) {
  const CpSet s = normalise(s0);
  // Raw: everything but controls, '"' and '\'.
  CpSet raw;
  for (auto [lo, hi] : s) {
    CpSet pieces{{lo, hi}};
    for (uint32_t bad : {uint32_t{'"'}, uint32_t{'\\'}}) {
      CpSet next;
      for (auto [a, b] : pieces) {
        if (bad < a || bad > b) {
          next.emplace_back(a, b);
          continue;
        }
        if (a < bad) next.emplace_back(a, bad - 1);
        if (b > bad) next.emplace_back(bad + 1, b);
      }
      pieces = next;
    }
    for (auto [a, b] : pieces) {
      a = std::max<uint32_t>(a, 0x20);
      if (a <= b) raw.emplace_back(a, b);
    }
  }
  std::vector<ExprPtr> alts;
  if (!raw.empty()) alts.push_back(utf8_set(raw));
  if (in_set(s, '"')) alts.push_back(e_lit("\\\""));
  if (in_set(s, '\\')) alts.push_back(e_lit("\\\\"));
  static constexpr std::pair<uint32_t, char> kShort[] = {
      {'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
  for (auto [cp, ch] : kShort)
    if (in_set(s, cp)) alts.push_back(e_seq({e_byte('\\'), e_byte(static_cast<uint8_t>(ch))}));
  if (all_escapes) {
    alts.push_back(e_lit("\\/"));
    ByteSet hex;
    hex.set_range('0', '9'), hex.set_range('a', 'f'), hex.set_range('A', 'F');
    alts.push_back(e_seq({e_lit("\\u"), e_rep(e_bytes(hex), 4, 4)}));
  } else {
    add_control_escapes(s, alts);
  }
  return e_alt(std::move(alts));
}

ExprPtr pattern_to_json_content(std::string_view pattern) {
  Parser p(pattern, [](const CpSet& s) { return json_char(s, false); });
  return p.parse_top(true);
}

std::shared_ptr<const Dfa> json_content_dfa(std::string_view pattern, Budget& budget) {
  // Formats and common patterns recur across schemas; their DFAs are immutable, so one copy is
  // shared process-wide (bounded; the budget is still charged the DFA's size).
  constexpr size_t kMaxCached = 512;
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Dfa>, std::less<>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(pattern); it != cache.end()) {
      budget.charge(it->second->size());
      return it->second;
    }
  }
  std::shared_ptr<const Dfa> d = build_dfa(pattern_to_json_content(pattern), budget);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() < kMaxCached) cache.emplace(std::string(pattern), d);
  return d;
}

ExprPtr pattern_to_raw(std::string_view pattern) {
  Parser p(pattern, [](const CpSet& s) { return utf8_set(s); });
  return p.parse_top(false);
}

}  // namespace ds::structured
