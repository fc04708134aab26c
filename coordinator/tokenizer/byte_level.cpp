#include "coordinator/tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace ds::tok {

namespace {

bool maps_to_itself(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every image is < U+0200
  std::array<std::string, 256> utf8;

  Tables() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      to_cp[b] = maps_to_itself(b) ? b : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
      utf8::append(utf8[b], to_cp[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) {
  return tables().to_cp[b];
}

int codepoint_to_byte(uint32_t cp) {
  return cp < 512 ? tables().from_cp[cp] : -1;
}

std::string_view byte_to_mapped_utf8(uint8_t b) {
  return tables().utf8[b];
}

std::string map_bytes(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += byte_to_mapped_utf8(static_cast<uint8_t>(c));
  return out;
}

bool unmap_bytes(std::string_view mapped, std::string& raw) {
  const auto* p = reinterpret_cast<const uint8_t*>(mapped.data());
  for (size_t i = 0; i < mapped.size();) {
    const utf8::Step s = utf8::step(p + i, mapped.size() - i);
    if (s.kind != utf8::Step::VALID) return false;
    const int b = codepoint_to_byte(s.cp);
    if (b < 0) return false;
    raw += static_cast<char>(b);
    i += s.len;
  }
  return true;
}

}  // namespace ds::tok
