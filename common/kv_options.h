// The KV cache type flags every deltaserve process takes (serve, the worker, bench, logits,
// perplexity): --kv-cache-type T sets K and V, --kv-cache-type-k T / --kv-cache-type-v T set
// one side over it, whichever layer (flag, environment, config file) each came from. T is one
// of kKvTypeNames (common/kv_format.h); unset, KvTypeFlags::fallback (kDefaultKvType but
// in the exact tools).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/kv_format.h"
#include "common/options.h"

namespace ds {

struct ModelConfig;

struct KvTypeFlags {
  std::optional<KvType> both, k, v;  // --kv-cache-type, --kv-cache-type-k, --kv-cache-type-v
  KvType fallback = kDefaultKvType;  // unset: the serving default; f32 for the exact tools
  KvType k_type() const { return k.value_or(both.value_or(fallback)); }
  KvType v_type() const { return v.value_or(both.value_or(fallback)); }
};

// The field of `flags` behind an option name ("kv-cache-type", "kv-cache-type-k",
// "kv-cache-type-v"), or nullptr for any other name.
std::optional<KvType>* kv_type_flag(KvTypeFlags* flags, const std::string& name);

// The three options for an option table (common/options.h), bound to `flags`.
std::vector<OptionSpec> kv_type_option_specs(KvTypeFlags* flags);

// "--kv-cache-type-k must be one of f32, bf16, f16, q8_0, fp8, q4r, got 'q5'".
std::string kv_type_flag_error(const std::string& flag, const std::string& value);

// "q8_0" when K and V match, else "K q8_0, V f16" (logs, reports).
std::string kv_types_name(KvType k, KvType v);

// Why the model's KV rows (n_head_kv heads of head_dim) cannot be stored as k / v, naming the
// flag, the type and the heads; empty when both fit (common/kv_format.h kv_type_problem).
std::string kv_types_problem(KvType k, KvType v, const ModelConfig& cfg);

}  // namespace ds
