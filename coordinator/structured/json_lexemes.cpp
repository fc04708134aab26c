#include "coordinator/structured/json_lexemes.h"

#include <string>
#include <vector>

namespace ds::structured {

namespace {

ExprPtr digit_range(char lo, char hi) {
  return e_bytes(ByteSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}
ExprPtr any_digits(size_t n) {
  return e_rep(digit_range('0', '9'), static_cast<uint32_t>(n), static_cast<uint32_t>(n));
}

// Equal-length digit strings lo <= hi: all strings of that length between them.
ExprPtr same_len(const std::string& lo, const std::string& hi) {
  if (lo == hi) return e_lit(lo);
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos)
    return any_digits(lo.size());
  if (lo.size() == 1) return digit_range(lo[0], hi[0]);
  const std::string lt = lo.substr(1), ht = hi.substr(1);
  if (lo[0] == hi[0]) return e_seq({e_byte(static_cast<uint8_t>(lo[0])), same_len(lt, ht)});
  std::vector<ExprPtr> alts;
  alts.push_back(e_seq({e_byte(static_cast<uint8_t>(lo[0])), same_len(lt, std::string(lt.size(), '9'))}));
  if (hi[0] - lo[0] > 1)
    alts.push_back(
        e_seq({digit_range(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)), any_digits(lt.size())}));
  alts.push_back(e_seq({e_byte(static_cast<uint8_t>(hi[0])), same_len(std::string(ht.size(), '0'), ht)}));
  return e_alt(std::move(alts));
}

// Canonical non-negative integers in [a, b] (b open when nullopt).
ExprPtr unsigned_range(uint64_t a, std::optional<uint64_t> b) {
  const std::string as = std::to_string(a);
  if (!b) {
    // Same length as a and >= a, or any longer canonical number.
    return e_alt({same_len(as, std::string(as.size(), '9')),
                  e_seq({digit_range('1', '9'), any_digits(as.size()), e_rep(digit_range('0', '9'), 0, kUnbounded)})});
  }
  const std::string bs = std::to_string(*b);
  std::vector<ExprPtr> alts;
  for (size_t len = as.size(); len <= bs.size(); ++len) {
    const std::string lo = len == as.size() ? as : "1" + std::string(len - 1, '0');
    const std::string hi = len == bs.size() ? bs : std::string(len, '9');
    if (lo <= hi) alts.push_back(same_len(lo, hi));
  }
  return e_alt(std::move(alts));
}

uint64_t magnitude(int64_t v) {
  return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
}

ExprPtr frac_any() {
  return e_opt(e_seq({e_byte('.'), e_rep(digit_range('0', '9'), 1, kUnbounded)}));
}
ExprPtr frac_zero() {
  return e_opt(e_seq({e_byte('.'), e_rep(e_byte('0'), 1, kUnbounded)}));
}
ExprPtr frac_nonzero() {
  const ExprPtr d = e_rep(digit_range('0', '9'), 0, kUnbounded);
  return e_seq({e_byte('.'), d, digit_range('1', '9'), d});
}

// Magnitudes y = I.F with y <= m (y < m when excl).
ExprPtr mag_le(uint64_t m, bool excl) {
  std::vector<ExprPtr> alts;
  if (m > 0) alts.push_back(e_seq({unsigned_range(0, m - 1), frac_any()}));
  if (!excl) alts.push_back(e_seq({e_lit(std::to_string(m)), frac_zero()}));
  return e_alt(std::move(alts));
}

// Magnitudes y >= m (y > m when excl).
ExprPtr mag_ge(uint64_t m, bool excl) {
  if (!excl) return e_seq({unsigned_range(m, std::nullopt), frac_any()});
  return e_alt(
      {e_seq({unsigned_range(m + 1, std::nullopt), frac_any()}), e_seq({e_lit(std::to_string(m)), frac_nonzero()})});
}

ExprPtr all_mag() {
  return e_seq({unsigned_range(0, std::nullopt), frac_any()});
}

// x >= lo (or x > lo).
ExprPtr number_ge(int64_t lo, bool excl) {
  if (lo > 0) return mag_ge(magnitude(lo), excl);
  const ExprPtr pos = (lo == 0 && excl) ? mag_ge(0, true) : all_mag();
  return e_alt({pos, e_seq({e_byte('-'), mag_le(magnitude(lo), excl)})});
}

// x <= hi (or x < hi): the mirror image.
ExprPtr number_le(int64_t hi, bool excl) {
  if (hi < 0) return e_seq({e_byte('-'), mag_ge(magnitude(hi), excl)});
  const ExprPtr neg = (hi == 0 && excl) ? mag_ge(0, true) : all_mag();
  return e_alt({mag_le(magnitude(hi), excl), e_seq({e_byte('-'), neg})});
}

}  // namespace

ExprPtr ws_expr(uint32_t max_ws) {
  if (max_ws == 0) return e_empty();
  ByteSet ws;
  for (char c : {' ', '\t', '\n', '\r'}) ws.set(static_cast<uint8_t>(c));
  return e_rep(e_bytes(ws), 0, max_ws);
}

ExprPtr integer_expr() {
  return e_seq({e_opt(e_byte('-')),
                e_alt({e_byte('0'), e_seq({digit_range('1', '9'), e_rep(digit_range('0', '9'), 0, kUnbounded)})})});
}

ExprPtr number_expr() {
  ByteSet e, sign;
  e.set('e'), e.set('E'), sign.set('+'), sign.set('-');
  return e_seq({integer_expr(), frac_any(),
                e_opt(e_seq({e_bytes(e), e_opt(e_bytes(sign)), e_rep(digit_range('0', '9'), 1, kUnbounded)}))});
}

ExprPtr integer_range_expr(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<ExprPtr> alts;
  // Non-negative part: [max(lo,0), hi].
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> b;
    if (hi) b = static_cast<uint64_t>(*hi);
    if (!b || a <= *b) alts.push_back(unsigned_range(a, b));
  }
  // Negative part: -y for y in [max(-hi,1), -lo].
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < 0 ? magnitude(*hi) : 1;
    std::optional<uint64_t> b;
    if (lo) b = magnitude(*lo);
    if (!b || a <= *b) alts.push_back(e_seq({e_byte('-'), unsigned_range(a, b)}));
  }
  if ((!lo || *lo <= 0) && (!hi || *hi >= 0)) alts.push_back(e_lit("-0"));
  return e_alt(std::move(alts));
}

ExprPtr number_range_expr(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi, bool hi_excl,
                          Budget& budget) {
  if (lo && !hi) return number_ge(*lo, lo_excl);
  if (hi && !lo) return number_le(*hi, hi_excl);
  if (!lo && !hi) return number_expr();
  auto a = build_dfa(number_ge(*lo, lo_excl), budget);
  auto b = build_dfa(number_le(*hi, hi_excl), budget);
  auto p = dfa_product(*a, *b, ProductMode::And, budget);
  if (p->empty_language()) return e_nothing();
  return e_embed(p);
}

FormatSupport format_pattern(std::string_view f, std::string& p) {
  // Calendar dates (the reference validator parses them): 30-day months, February 29 only in
  // leap years (divisible by 4 and not by 100, or by 400).
  static const std::string kDate =
      R"((\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|)"
      R"((\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29))";
  static const std::string kTime = R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string kOctet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static const std::string kLabel = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  static const std::string kUriChar = R"([^\x00-\x20"<>\\^`{|}\x7f])";
  if (f == "date") {
    p = "^" + kDate + "$";
  } else if (f == "time") {
    p = "^" + kTime + "$";
  } else if (f == "date-time") {
    p = "^" + kDate + "[Tt]" + kTime + "$";
  } else if (f == "uuid") {
    p = R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)";
  } else if (f == "email" || f == "idn-email") {
    p = "@";  // the reference validator's check: contains '@'
  } else if (f == "ipv4") {
    p = "^" + kOctet + R"((\.)" + kOctet + "){3}$";
  } else if (f == "hostname") {
    p = "^" + kLabel + R"((\.)" + kLabel + ")*$";
  } else if (f == "uri") {
    p = "^[A-Za-z][A-Za-z0-9+.-]*:" + kUriChar + "*$";
  } else if (f == "uri-reference") {
    p = "^" + kUriChar + "*$";
  } else if (f == "ipv6" || f == "regex" || f == "json-pointer" || f == "relative-json-pointer" ||
             f == "uri-template" || f == "idn-hostname" || f == "iri" || f == "iri-reference" || f == "duration") {
    return FormatSupport::Refused;
  } else {
    return FormatSupport::Ignored;
  }
  return FormatSupport::Enforced;
}

std::string json_quote(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace ds::structured

namespace ds::structured {

std::shared_ptr<Dfa> length_dfa(const Dfa& c, uint32_t min, uint32_t max, Budget& budget) {
  // Counter levels 0..top; at the top level (unbounded max) characters loop.
  const bool unbounded = max == kUnbounded;
  const uint32_t top = unbounded ? min : max;
  const size_t per = c.size();
  budget.charge(static_cast<size_t>(top + 1) * per);
  auto d = std::make_shared<Dfa>();
  d->cls = c.cls;
  d->ncls = c.ncls;
  const size_t n = static_cast<size_t>(top + 1) * per;
  d->next.assign(n * c.ncls, -1);
  d->accept.assign(n, 0);
  d->calls.assign(n, {});
  for (uint32_t level = 0; level <= top; ++level) {
    const size_t base = static_cast<size_t>(level) * per;
    d->accept[base] = level >= min ? 1 : 0;
    for (size_t s = 0; s < per; ++s) {
      if (c.accept[s]) continue;  // never a resting place: folded into the next level's start
      for (int k = 0; k < c.ncls; ++k) {
        const int32_t t = c.next[s * c.ncls + k];
        if (t < 0) continue;
        int64_t to;
        if (c.accept[t]) {
          if (level == top && !unbounded) continue;
          const uint32_t nl = level == top ? top : level + 1;
          to = static_cast<int64_t>(nl) * static_cast<int64_t>(per);
        } else {
          to = static_cast<int64_t>(base) + t;
        }
        d->next[(base + s) * c.ncls + k] = static_cast<int32_t>(to);
      }
    }
  }
  // The start state of the char DFA must not be accepting (one char is at least one byte).
  trim_dfa(*d, {});
  return d;
}

}  // namespace ds::structured
