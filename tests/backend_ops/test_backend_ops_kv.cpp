// test_backend_ops cases of the KV cache's element types (common/kv_format.h): the KV write and
// the Hadamard rotation (same bytes on every backend: the codecs are integer arithmetic), and the
// attention ops and the prep over pools of each type (attention reads the same decoded values on
// every backend, so the f32 bounds of the f32 pools hold).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/ggml_types.h"
#include "kernels/cpu/kv_codec.h"
#include "tests/backend_ops/backend_ops_cases.h"
#include "tests/kernels/decode_batch_util.h"

namespace ds::backend_ops {
namespace {

constexpr float kEps = 1e-6f;
constexpr double kRowTol = 2e-6, kTcTol = 4e-3, kAttnTol = 2e-5, kDecodeAttnTol = 1e-5;
constexpr KvType kTypes[] = {KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kFp8, KvType::kQ4r};

std::string name_of(KvType t) {
  return kv_type_name(t);
}

// A pool of n_rows rows of n values, encoded as t, in a float vector (rows are 16-byte multiples).
std::vector<float> encode_pool(KvType t, const std::vector<float>& values, size_t n) {
  const size_t n_rows = values.size() / n, row_bytes = kv_row_bytes(t, n);
  std::vector<float> pool(n_rows * row_bytes / sizeof(float));
  std::vector<uint32_t> rows(n_rows);
  std::iota(rows.begin(), rows.end(), 0u);
  cpu::kv_write_rows(t, values.data(), n, rows.data(), n_rows, n, pool.data());
  return pool;
}

std::vector<float> decode_pool(KvType t, const std::vector<float>& pool, size_t n) {
  const size_t row_bytes = kv_row_bytes(t, n), n_rows = pool.size() * sizeof(float) / row_bytes;
  std::vector<float> values(n_rows * n);
  const auto* bytes = reinterpret_cast<const uint8_t*>(pool.data());
  for (size_t r = 0; r < n_rows; ++r) cpu::kv_decode_range(t, bytes + r * row_bytes, n, 0, n, values.data() + r * n);
  return values;
}

std::vector<float> bf16_rounded(std::vector<float> v, float scale = 1.0f) {
  for (float& x : v) x = bf16_to_fp32(fp32_to_bf16(x * scale));
  return v;
}

// One code step of type t relative to the largest magnitude it encodes (a code that rounds the
// other way after an ulp of difference in its input).
double code_step(KvType t) {
  switch (t) {
    case KvType::kF32:
      return 0;
    case KvType::kBf16:
      return 1.0 / 128;
    case KvType::kF16:
      return 1.0 / 1024;
    case KvType::kFp8:
      return 1.0 / 8;
    case KvType::kQ8_0:
      return 1.0 / 127;
    case KvType::kQ4r:
      return 1.0 / 7;
  }
  return 0;
}

Case kv_write_case(KvType t, size_t n_rows, size_t n) {
  return {"kv_write", name_of(t) + " " + std::to_string(n_rows) + " rows x " + std::to_string(n),
          [=](Backend& be, const Target&) {
            Rng rng(700 + n_rows + n);
            const size_t pool_rows = 3 * n_rows + 2, row_floats = kv_row_bytes(t, n) / sizeof(float);
            const std::vector<uint32_t> rows = distinct(rng, n_rows, pool_rows);
            std::vector<float> src = rng.vec(n_rows * n, -3, 3);
            if (src.size() > 2) {  // a zero, a tiny value and a large one: the codecs' edges
              src[0] = 0.0f;
              src[1] = 1e-7f;
              src[2] = 500.0f;
            }
            Dev d(be);
            float* pool = d.put(rng.vec(pool_rows * row_floats));
            be.kv_write(t, d.put(src), rows.data(), n_rows, n, pool);
            return Outs{bits("pool", d.get(pool, pool_rows * row_floats),
                             "integer codecs (common/kv_format.h); other rows untouched")};
          }};
}

Case hadamard_case(size_t d) {
  return {
      "hadamard_heads", "d=" + std::to_string(d), [=](Backend& be, const Target&) {
        Rng rng(720 + d);
        const size_t rows = 5, heads = 3, head_stride = d + 4, row_stride = heads * head_stride + 8;
        Dev dv(be);
        float* x = dv.put(rng.vec(rows * row_stride, -2, 2));
        be.hadamard_heads(x, rows, row_stride, heads, head_stride, d);
        return Outs{bits("x", dv.get(x, rows * row_stride), "the same butterflies (adds) and scale; gaps untouched")};
      }};
}

// attention_causal over pools of type t. bf16 mode prefill (tensor cores): the CPU reference
// runs on the operands the kernel rounds (the decoded K/V and q * scale, to bf16; scale 1).
Case attention_causal_kv_case(KvType t, size_t n_q, size_t past, size_t d) {
  return {"attention_causal", name_of(t) + " " + std::to_string(n_q) + " queries after " + std::to_string(past),
          [=](Backend& be, const Target& target) {
            Rng rng(740 + n_q + past + d);
            const size_t H = 4, Hkv = 2, bs = 16, kv_len = past + n_q, n_blocks = (kv_len + bs - 1) / bs;
            const size_t pool_blocks = n_blocks + 3, row = Hkv * d;
            std::vector<int32_t> table;
            for (uint32_t b : distinct(rng, n_blocks, pool_blocks)) table.push_back(static_cast<int32_t>(b));
            const std::vector<float> k = rng.vec(pool_blocks * bs * row, -2, 2), v = rng.vec(k.size(), -2, 2);
            std::vector<float> q = rng.vec(n_q * H * 2 * d, -2, 2);
            float scale = 1.0f / std::sqrt(static_cast<float>(d));
            const bool tc = target.bf16_prefill && n_q >= 16;
            Dev dv(be);
            float* out = dv.alloc(n_q * H * d);
            const AttentionShape s{n_q, kv_len, H, Hkv, d, H * 2 * d, 2 * d, row, H * d};
            if (tc && std::string(be.name()) == "cpu") {
              const std::vector<float> k16 = bf16_rounded(decode_pool(t, encode_pool(t, k, row), row));
              const std::vector<float> v16 = bf16_rounded(decode_pool(t, encode_pool(t, v, row), row));
              q = bf16_rounded(q, scale);
              be.attention_causal(s, dv.put(q), KvPages{dv.put(k16), dv.put(v16), table.data(), bs}, 1.0f, out);
            } else {
              const KvPages kv{dv.put(encode_pool(t, k, row)), dv.put(encode_pool(t, v, row)), table.data(), bs, t, t};
              be.attention_causal(s, dv.put(q), kv, scale, out);
            }
            return Outs{rel("out", dv.get(out, n_q * H * d), tc ? kTcTol : kAttnTol,
                            tc ? "bf16 tensor cores vs the CPU on the bf16-rounded decoded operands"
                               : "f32 math on the same decoded values (test_cuda_attention_prefill.cpp kTol)")};
          }};
}

// A step of decode rows and prefill chunks over pools of type t (f32 math; in the bf16 mode the
// compared backend's prefill chunks round their operands, so only the decode rows are checked
// there through one-token sequences).
Case attention_batch_kv_case(KvType t, std::vector<size_t> kv_lens, std::vector<size_t> n_qs) {
  std::string shape = name_of(t) + " " + std::to_string(kv_lens.size()) + " seqs q/kv";
  for (size_t i = 0; i < kv_lens.size(); ++i) shape += " " + std::to_string(n_qs[i]) + "/" + std::to_string(kv_lens[i]);
  return {
      "attention_batch", shape, [=](Backend& be, const Target& target) {
        Rng rng(760 + kv_lens.size());
        cpu::test::DecodeBatchHost b = cpu::test::make_decode_batch(rng, 8, 4, 128, kv_lens, 120, 16, n_qs);
        const size_t row = b.kv_row();
        if (target.bf16_prefill) {
          std::vector<AttentionBatchSeq> decode_only;
          for (const AttentionBatchSeq& s : b.seqs) {
            if (s.n_q_tokens < 16) decode_only.push_back(s);
          }
          b.seqs = decode_only;
        }
        Dev d(be);
        float* out = d.alloc(b.n_rows() * b.out_row());  // zero-filled
        AttentionBatch batch =
            b.batch(d.put(b.q), out, d.put(encode_pool(t, b.k_pool, row)), d.put(encode_pool(t, b.v_pool, row)));
        batch.k_type = batch.v_type = t;
        be.attention_batch(batch);
        return Outs{rel("out", d.get(out, b.n_rows() * b.out_row()), target.bf16_prefill ? kDecodeAttnTol : kAttnTol,
                        "f32 decode / tiled prefill attention on the same decoded values")};
      }};
}

// attention_prep writing pools of type t. v rows: the same floats encoded the same way (bits;
// rotated alike for q4r). k rows come out of a norm and a rope whose ulps differ by backend, so a
// code may round the other way: the decoded pool is held to one quantisation step of max |k|.
Case attention_prep_kv_case(KvType t, size_t T, size_t d) {
  return {"attention_prep", name_of(t) + " " + std::to_string(T) + " tokens d=" + std::to_string(d),
          [=](Backend& be, const Target&) {
            Rng rng(780 + T + d);
            const size_t H = 4, Hkv = 2, qs = 2 * d, row = Hkv * d, pool_rows = 3 * T + 5;
            const size_t row_floats = kv_row_bytes(t, row) / sizeof(float);
            std::vector<int32_t> pos(3 * T);
            for (auto& p : pos) p = rng.integer(0, 3000);
            const std::vector<uint32_t> kv_rows = distinct(rng, T, pool_rows);
            Dev dv(be);
            AttentionPrep p;
            p.n_tokens = T, p.n_heads = H, p.n_kv_heads = Hkv, p.head_dim = d;
            p.qg = dv.put(rng.vec(T * H * qs, -2, 2)), p.q_head_stride = qs;
            p.k = dv.put(rng.vec(T * row, -2, 2)), p.v = dv.put(rng.vec(T * row, -2, 2));
            p.q_norm = dv.put(rng.vec(d, 0.5f, 1.5f)), p.k_norm = dv.put(rng.vec(d, 0.5f, 1.5f));
            p.eps = kEps, p.n_rot = d / 2, p.positions = pos.data(), p.sections = {0, 0, 0, 0}, p.theta = 1e7f;
            p.kv_rows = kv_rows.data();
            p.k_type = p.v_type = t;
            p.k_pool = dv.put(encode_pool(t, std::vector<float>(pool_rows * row, 0.25f), row));
            p.v_pool = dv.put(encode_pool(t, std::vector<float>(pool_rows * row, 0.25f), row));
            be.attention_prep(p);
            const double step = code_step(t);
            const char* why = "norm + rope ulps (test_cuda_attention_prep.cpp kCpuTol), then at most one code step";
            return Outs{
                rel("qg", dv.get(p.qg, T * H * qs), kRowTol, why), rel("k", dv.get(p.k, T * row), kRowTol, why),
                rel("k_pool", decode_pool(t, dv.get(static_cast<float*>(p.k_pool), pool_rows * row_floats), row),
                    step + 4 * kRowTol, why),
                bits("v_pool", dv.get(static_cast<float*>(p.v_pool), pool_rows * row_floats),
                     "v rows: the same floats through the same codec")};
          }};
}

}  // namespace

void add_kv_cases(std::vector<Case>& cases) {
  for (const KvType t : kTypes) {
    cases.push_back(kv_write_case(t, 7, 256));
    cases.push_back(kv_write_case(t, 1, 64));
    cases.push_back(attention_causal_kv_case(t, 1, 100, 128));
    cases.push_back(attention_causal_kv_case(t, 3, 40, 64));
    cases.push_back(attention_causal_kv_case(t, 33, 20, 128));
    cases.push_back(attention_batch_kv_case(t, {1, 17, 100, 300, 64}, {1, 1, 64, 1, 16}));
    cases.push_back(attention_prep_kv_case(t, 5, 128));
    cases.push_back(attention_prep_kv_case(t, 1, 256));
  }
  for (const size_t d : {32, 64, 128, 256}) cases.push_back(hadamard_case(d));
}

}  // namespace ds::backend_ops
