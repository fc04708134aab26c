// Unicode NFC normalisation. HF's Qwen2/Qwen3 tokenizer.json applies an NFC normalizer to
// text before pre-tokenization (the Qwen3.5 vectors show none for "qwen35"); the tokenizer
// applies this to each raw fragment when enabled.
#pragma once

#include <string>
#include <string_view>

namespace ds::tok {

// Writes NFC(text) to `out` and returns true, or returns false (out untouched) when `text`
// is certainly NFC already (the common case; checked without allocating). Invalid UTF-8
// bytes are copied through and block composition across them.
bool nfc_normalize(std::string_view text, std::string& out);

}  // namespace ds::tok
