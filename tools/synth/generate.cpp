#include "tools/synth/generate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/gguf.h"
#include "tools/synth/gguf_stream.h"
#include "tools/synth/tokenizer_keys.h"

namespace ds::synth {
namespace {

constexpr uint64_t kChunkElems = uint64_t{1} << 20;  // ~1 MiB of Q8_0 per work item

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Approximately N(0, 1) from one draw: the sum of four 16-bit uniforms (Irwin-Hall), centred
// and scaled. Bounded tails do not matter here; speed does (~10^10 values for 27B).
float approx_normal(uint64_t r) {
  const uint32_t sum = static_cast<uint32_t>(r & 0xFFFF) + static_cast<uint32_t>((r >> 16) & 0xFFFF) +
                       static_cast<uint32_t>((r >> 32) & 0xFFFF) + static_cast<uint32_t>(r >> 48);
  constexpr float kMean = 4 * 65535.0f / 2, kInvStd = 1.0f / 37837.2f;  // std = sqrt(4 (2^32 - 1) / 12)
  return (static_cast<float>(sum) - kMean) * kInvStd;
}

float uniform01(uint64_t r) {
  return static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
}

void draw(Init init, uint64_t fan_in, uint64_t& rng, float* out, size_t n) {
  const float mat_std = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix64(rng);
    switch (init) {
      case Init::kMatrix:
      case Init::kConv:
        out[i] = approx_normal(r) * mat_std;
        break;
      case Init::kNorm:
        out[i] = 1.0f + 0.05f * approx_normal(r);
        break;
      case Init::kSsmA:
        out[i] = -(0.1f + 0.9f * uniform01(r));
        break;
      case Init::kDtBias:
        out[i] = 0.2f * uniform01(r) - 0.1f;
        break;
      case Init::kBias:
        out[i] = 0.02f * approx_normal(r);
        break;
      case Init::kTable:
        out[i] = 0.1f * approx_normal(r);
        break;
    }
  }
}

// Q8_0 reference quantization (spec §12.2): d = max|x| / 127, q = round(x / d).
void quantize_q8_0_into(const float* x, size_t n, uint8_t* out) {
  for (size_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ8_0 blk;
    blk.d = fp32_to_fp16(d);
    for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(std::lrint(x[b * 32 + i] * id));
    std::memcpy(out + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

struct WorkItem {
  size_t tensor;
  uint64_t row0;
  uint64_t n_rows;
};

std::vector<WorkItem> split_work(const std::vector<StreamTensor>& tensors) {
  std::vector<WorkItem> items;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const uint64_t rows = tensors[t].n_rows();
    const uint64_t per = std::max<uint64_t>(1, kChunkElems / tensors[t].ne[0]);
    for (uint64_t r = 0; r < rows; r += per) items.push_back({t, r, std::min(per, rows - r)});
  }
  return items;
}

void add_qwen3_metadata(GgufStreamWriter& w, const SynthShape& s, uint64_t seed) {
  const std::string a = "qwen3.";
  w.add_string("general.architecture", "qwen3");
  w.add_string("general.type", "model");
  w.add_string("general.name",
               "deltaserve-synth qwen3 " + s.name + " (random weights, seed " + std::to_string(seed) + ")");
  w.add_u32("general.file_type", 7);
  w.add_u32("general.quantization_version", 2);
  w.add_u32(a + "context_length", s.context_length);
  w.add_u32(a + "embedding_length", s.n_embd);
  w.add_u32(a + "block_count", s.n_layer);
  w.add_u32(a + "feed_forward_length", s.n_ff);
  w.add_u32(a + "attention.head_count", s.n_head);
  w.add_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.add_u32(a + "attention.key_length", s.head_dim);
  w.add_u32(a + "attention.value_length", s.head_dim);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(a + "rope.freq_base", 1e6f);
  w.add_u32(a + "pooling_type", s.pooling_type);
  if (s.pooling_type == 4) w.add_string_array(a + "classifier.output_labels", {"yes", "no"});
}

void add_metadata(GgufStreamWriter& w, const SynthShape& s, uint64_t seed) {
  if (s.arch == "qwen3") return add_qwen3_metadata(w, s, seed);
  const std::string a = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_string("general.type", "model");
  w.add_string("general.name",
               "deltaserve-synth " + s.arch + " " + s.name + " (random weights, seed " + std::to_string(seed) + ")");
  w.add_u32("general.file_type", 7);  // mostly Q8_0
  w.add_u32("general.quantization_version", 2);
  w.add_u32(a + "context_length", s.context_length);
  w.add_u32(a + "embedding_length", s.n_embd);
  w.add_u32(a + "block_count", s.n_layer + s.n_nextn);
  if (s.n_nextn > 0) w.add_u32(a + "nextn_predict_layers", s.n_nextn);
  if (s.n_expert > 0) {
    w.add_u32(a + "expert_count", s.n_expert);
    w.add_u32(a + "expert_used_count", s.n_expert_used);
    w.add_u32(a + "expert_feed_forward_length", s.n_ff_exp);
    w.add_u32(a + "expert_shared_feed_forward_length", s.n_ff_shexp);
  } else {
    w.add_u32(a + "feed_forward_length", s.n_ff);
  }
  w.add_u32(a + "attention.head_count", s.n_head);
  w.add_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.add_u32(a + "attention.key_length", s.head_dim);
  w.add_u32(a + "attention.value_length", s.head_dim);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(a + "rope.freq_base", 1e7f);
  w.add_u32(a + "rope.dimension_count", s.n_rot);
  w.add_i32_array(a + "rope.dimension_sections", s.rope_sections);
  w.add_u32(a + "full_attention_interval", s.attn_interval);
  w.add_u32(a + "ssm.conv_kernel", s.conv_kernel);
  w.add_u32(a + "ssm.state_size", s.ssm_d_state);
  w.add_u32(a + "ssm.group_count", s.ssm_n_group);
  w.add_u32(a + "ssm.time_step_rank", s.ssm_dt_rank);
  w.add_u32(a + "ssm.inner_size", s.ssm_dt_rank * s.ssm_d_state);
}

void add_tokenizer(GgufStreamWriter& w, const SynthShape& s, const std::string& tokenizer_from) {
  if (tokenizer_from.empty()) {
    add_builtin_tokenizer(w, s.n_vocab);
  } else {
    add_tokenizer_from(w, GgufFile::open(tokenizer_from), s.n_vocab);  // copies out before the file unmaps
  }
}

// Worker loop: takes items off a shared counter; each thread owns its scratch buffers.
void run_items(const GgufStreamWriter& w, const std::vector<TensorPlan>& plan, const std::vector<WorkItem>& items,
               uint64_t seed, std::atomic<size_t>& next) {
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  for (size_t i = next++; i < items.size(); i = next++) {
    const WorkItem& it = items[i];
    const StreamTensor& t = w.tensors()[it.tensor];
    const size_t n = it.n_rows * t.ne[0];
    values.resize(n);
    uint64_t rng = seed ^ fnv1a(t.name) ^ (it.row0 * 0xD1B54A32D192ED03ull);
    const TensorPlan& p = plan[it.tensor];
    draw(p.init, p.fan_in != 0 ? p.fan_in : t.ne[0], rng, values.data(), n);
    if (p.scale != 1) {
      for (float& v : values) v *= p.scale;
    }
    if (p.plus_identity) {
      for (uint64_t r = it.row0; r < it.row0 + it.n_rows && r < t.ne[0]; ++r) values[(r - it.row0) * t.ne[0] + r] += 1;
    }
    const uint64_t at = it.row0 * t.row_bytes();
    if (t.type == GgmlType::Q8_0) {
      bytes.resize(n / 32 * sizeof(BlockQ8_0));
      quantize_q8_0_into(values.data(), n, bytes.data());
      w.write_tensor_bytes(it.tensor, at, bytes.data(), bytes.size());
    } else if (t.type == GgmlType::F16) {
      bytes.resize(n * sizeof(uint16_t));
      for (size_t k = 0; k < n; ++k) {
        const uint16_t h = fp32_to_fp16(values[k]);
        std::memcpy(bytes.data() + k * sizeof h, &h, sizeof h);
      }
      w.write_tensor_bytes(it.tensor, at, bytes.data(), bytes.size());
    } else {
      w.write_tensor_bytes(it.tensor, at, values.data(), n * sizeof(float));
    }
  }
}

}  // namespace

SynthSummary write_planned(GgufStreamWriter& w, const std::vector<TensorPlan>& plan, const std::string& path,
                           uint64_t seed, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  SynthSummary sum;
  for (const TensorPlan& p : plan) {
    const StreamTensor& t = w.tensors()[w.add_tensor(p.name, p.type, p.ne)];
    sum.n_params += t.n_elements();
  }
  w.open(path);
  const std::vector<WorkItem> items = split_work(w.tensors());
  const unsigned n_threads =
      threads > 0 ? static_cast<unsigned>(threads) : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < n_threads; ++i) {
    pool.emplace_back([&] {
      try {
        run_items(w, plan, items, seed, next);
      } catch (...) {  // stop everyone and rethrow the first failure on the caller's thread
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next = items.size();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  w.close();
  sum.n_tensors = plan.size();
  sum.file_bytes = w.file_bytes();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

SynthSummary write_synth_gguf(const SynthShape& shape, const std::string& path, uint64_t seed, int threads,
                              const std::string& tokenizer_from) {
  const auto t0 = std::chrono::steady_clock::now();
  GgufStreamWriter w;
  add_metadata(w, shape, seed);
  add_tokenizer(w, shape, tokenizer_from);
  SynthSummary sum = write_planned(w, plan_tensors(shape), path, seed, threads);
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  // the tokenizer too
  return sum;
}

}  // namespace ds::synth
