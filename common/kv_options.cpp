// The KV cache type flags (see kv_options.h).
#include "common/kv_options.h"

#include <cstddef>
#include <functional>
#include <utility>

#include "common/model_config.h"

namespace ds {
namespace {

// "f32|bf16|..." for the help's value column, from the one list of names.
std::string value_name() {
  std::string out;
  for (const char* c = kKvTypeNames; *c != '\0'; ++c) {
    if (*c == ',') {
      out += '|';
    } else if (*c != ' ') {
      out += *c;
    }
  }
  return out;
}

OptionSpec spec(const std::string& name, std::optional<KvType>* field, std::string help,
                std::function<KvType()> effective, std::string default_text) {
  return {name,
          value_name(),
          std::move(help),
          [field](const std::string& v) {
            *field = parse_kv_type(v);
            return field->has_value();
          },
          [effective] { return std::string(kv_type_name(effective())); },
          std::move(default_text)};
}

std::string side_problem(const char* flag, KvType t, const ModelConfig& cfg) {
  const size_t head_dim = cfg.head_dim, row = size_t{cfg.n_head_kv} * head_dim;
  const char* why = kv_type_problem(t, head_dim, row);
  if (why == nullptr) return "";
  return std::string(flag) + " " + kv_type_name(t) + ": " + why + " (the model's KV rows are " +
         std::to_string(cfg.n_head_kv) + (cfg.n_head_kv == 1 ? " head of " : " heads of ") + std::to_string(head_dim) +
         ")";
}

}  // namespace

std::optional<KvType>* kv_type_flag(KvTypeFlags* flags, const std::string& name) {
  if (name == "kv-cache-type") return &flags->both;
  if (name == "kv-cache-type-k") return &flags->k;
  if (name == "kv-cache-type-v") return &flags->v;
  return nullptr;
}

std::vector<OptionSpec> kv_type_option_specs(KvTypeFlags* f) {
  const std::string fallback = kv_type_name(f->fallback);
  return {
      spec(
          "kv-cache-type", &f->both,
          "KV cache element type of K and V: f32, bf16, f16, fp8 (e4m3), q8_0 (int8, a scale per\n"
          "32 values) or q4r (4-bit after a Hadamard rotation); sent to every worker",
          [f] { return f->both.value_or(f->fallback); }, fallback),
      spec(
          "kv-cache-type-k", &f->k, "the K cache's type, over --kv-cache-type", [f] { return f->k_type(); },
          "--kv-cache-type"),
      spec(
          "kv-cache-type-v", &f->v, "the V cache's type, over --kv-cache-type", [f] { return f->v_type(); },
          "--kv-cache-type"),
  };
}

std::string kv_type_flag_error(const std::string& flag, const std::string& value) {
  return flag + " must be one of " + kKvTypeNames + ", got '" + value + "'";
}

std::string kv_types_name(KvType k, KvType v) {
  if (k == v) return kv_type_name(k);
  return std::string("K ") + kv_type_name(k) + ", V " + kv_type_name(v);
}

std::string kv_types_problem(KvType k, KvType v, const ModelConfig& cfg) {
  if (k == v) return side_problem("--kv-cache-type", k, cfg);
  const std::string problem = side_problem("--kv-cache-type-k", k, cfg);
  return problem.empty() ? side_problem("--kv-cache-type-v", v, cfg) : problem;
}

}  // namespace ds
