// Internal: token-mask computation over the vocabulary trie.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/structured/grammar.h"
#include "coordinator/structured/matcher.h"
#include "coordinator/structured/token_trie.h"

namespace ds::structured {

// The stack-independent part of what state g allows (cached in the grammar, and for lexeme
// states across grammars in the vocabulary).
std::shared_ptr<const MaskEntry> mask_entry(const Grammar& g, const TokenVocab& v, int32_t state);

// ORs into `bits` what head h allows: e's sure tokens, plus the uroot subtrees walked with
// h's real stack (pool is scratch: restored on return).
void add_head_mask(const Grammar& g, const TokenVocab& v, std::vector<Frame>& pool, const Head& h, const MaskEntry& e,
                   uint32_t* bits);

}  // namespace ds::structured
