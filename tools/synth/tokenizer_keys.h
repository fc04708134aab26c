// The tokenizer.* keys of a synthetic GGUF, so that the file loads as a whole model in both
// llama.cpp and deltaserve (qwen35-model-spec.md §8.1).
//
// Both engines take the vocabulary size from the token table and llama.cpp requires
// token_embd.weight to have exactly that many rows, so the table is padded to the model's
// n_vocab the way llama.cpp's converter pads real Qwen files: id i without a token becomes
// "[PAD<i>]" with type UNUSED (5). UNUSED tokens are never matched in text nor rendered by
// either tokenizer. llama.cpp's loader (src/llama-vocab.cpp) also requires, for model "gpt2":
// a string-array tokenizer.ggml.merges (may be empty; "A B" split at the first space after
// index 0), unique non-empty token texts, an int32 token_type array at least as long as the
// tokens, and a known tokenizer.ggml.pre. Special ids outside the table only draw a warning
// there, but deltaserve rejects them, so they must lie inside.
#pragma once

#include <cstdint>
#include <string>

#include "tools/synth/gguf_stream.h"

namespace ds::synth {

// Copies every tokenizer.* key of `source` (tokens, token_type, merges, pre, special ids,
// add_*_token, chat templates, ...) into `w`, the token table padded to `n_vocab`. Throws
// ds::ConfigError when the source has no tokenizer, not a byte-level BPE one ("gpt2" with
// merges), a table larger than `n_vocab`, or a token text that collides with a padding name.
void add_tokenizer_from(GgufStreamWriter& w, const GgufFile& source, uint32_t n_vocab);

// The built-in minimal tokenizer, written when no source is given: the 256 byte-level tokens
// (id = byte value), the ChatML control tokens <|endoftext|> <|im_start|> <|im_end|>, the
// USER_DEFINED <think> </think> <tool_call> </tool_call> <tool_response> </tool_response>, the
// CONTROL vision markers <|vision_start|> <|vision_end|> <|image_pad|> (ids 265..267), no
// merges (every byte is its own token), pre-tokenizer "qwen35", eos <|im_end|>, padding
// <|endoftext|>; ids from kBuiltinTokens to `n_vocab` are NORMAL filler words " tok<id>"
// (builtin_filler_text), visible in decoded output but never produced by encoding. No chat
// template: deltaserve falls back to its built-in Qwen3.5 template, llama.cpp to ChatML.
// Throws ds::ConfigError when `n_vocab` is smaller than kBuiltinTokens.
void add_builtin_tokenizer(GgufStreamWriter& w, uint32_t n_vocab);
constexpr uint32_t kBuiltinTokens = 256 + 12;

// "[PAD<id>]": the text of a padding token.
std::string pad_token_text(uint32_t id);
// "Ġtok<id>" (byte-level form of " tok<id>"): the built-in tokenizer's filler token `id`.
std::string builtin_filler_text(uint32_t id);

}  // namespace ds::synth
