// GPT-2 byte-level mapping (qwen35-model-spec.md §8.3 step 3): every byte is shown as one
// printable code point so BPE token texts never contain raw control bytes or partial UTF-8.
// Bytes 33-126, 161-172 and 174-255 map to themselves; the other 68 bytes map to U+0100,
// U+0101, ... in increasing byte order (space -> 'Ġ' U+0120, '\n' -> 'Ċ' U+010A).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ds::tok {

uint32_t byte_to_codepoint(uint8_t b);
// The byte whose image is `cp`, or -1 when `cp` is not in the table.
int codepoint_to_byte(uint32_t cp);
// UTF-8 text (1 or 2 bytes) of the code point that byte `b` maps to.
std::string_view byte_to_mapped_utf8(uint8_t b);

// Raw bytes -> mapped text.
std::string map_bytes(std::string_view raw);
// Mapped text -> raw bytes. Returns false (with `raw` partly filled) when `mapped` holds a
// code point outside the table or invalid UTF-8.
bool unmap_bytes(std::string_view mapped, std::string& raw);

}  // namespace ds::tok
