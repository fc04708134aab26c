#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/decode_batch_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu {
namespace {

using test::Rng;

// A contiguous cache seen through the paged contract: block j is pool block j.
struct Contiguous {
  std::vector<int32_t> table;
  KvPages pages(const std::vector<float>& k, const std::vector<float>& v, size_t kv_len, size_t block_size) {
    table.resize((kv_len + block_size - 1) / block_size);
    for (size_t j = 0; j < table.size(); ++j) table[j] = static_cast<int32_t>(j);
    return KvPages{k.data(), v.data(), table.data(), block_size};
  }
};

// ---- attention -------------------------------------------------------------------------------

struct AttnCase {
  size_t n_q, kv_len, H, Hkv, d;
};

// q is laid out like the joint Q+gate projection: per head [query d | gate d] (q_head_stride 2d).
// Float64 reference with grouped GQA (head h reads kv head h / (H/Hkv)).
void check_attention(const AttnCase& c, ThreadPool* pool) {
  Rng rng(c.n_q * 1000 + c.kv_len * 10 + c.d);
  AttentionShape s{};
  s.n_q_tokens = c.n_q;
  s.kv_len = c.kv_len;
  s.n_heads = c.H;
  s.n_kv_heads = c.Hkv;
  s.head_dim = c.d;
  s.q_head_stride = 2 * c.d;
  s.q_token_stride = 2 * c.d * c.H + 1;
  s.kv_row_stride = c.Hkv * c.d + 2;
  s.out_token_stride = c.H * c.d;
  const auto q = rng.vec(c.n_q * s.q_token_stride, -2, 2);
  const auto k = rng.vec(c.kv_len * s.kv_row_stride, -2, 2);
  const auto v = rng.vec(c.kv_len * s.kv_row_stride);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  std::vector<float> out(c.n_q * s.out_token_stride, NAN);
  Contiguous cache;
  attention_causal(s, q.data(), cache.pages(k, v, c.kv_len, 7), scale, out.data(), pool);

  const size_t group = c.H / c.Hkv;
  for (size_t t = 0; t < c.n_q; ++t) {
    for (size_t h = 0; h < c.H; ++h) {
      const size_t g = h / group;
      const size_t n_keys = c.kv_len - c.n_q + t + 1;
      std::vector<double> sc(n_keys);
      double mx = -INFINITY, sum = 0;
      for (size_t tau = 0; tau < n_keys; ++tau) {
        double dot = 0;
        for (size_t i = 0; i < c.d; ++i)
          dot += static_cast<double>(q[t * s.q_token_stride + h * s.q_head_stride + i]) *
                 k[tau * s.kv_row_stride + g * c.d + i];
        sc[tau] = dot * scale;
        mx = std::max(mx, sc[tau]);
      }
      for (auto& x : sc) sum += (x = std::exp(x - mx));
      for (size_t j = 0; j < c.d; ++j) {
        double o = 0;
        for (size_t tau = 0; tau < n_keys; ++tau) o += sc[tau] / sum * v[tau * s.kv_row_stride + g * c.d + j];
        // |v| <= 1 and the weights sum to 1: f32 rounding of scores (|s| <~ 20, eps 6e-8 each)
        // moves the output by well under 1e-5.
        ASSERT_NEAR(out[t * s.out_token_stride + h * c.d + j], o, 1e-5)
            << "t=" << t << " h=" << h << " j=" << j << " d=" << c.d;
      }
    }
  }
}

TEST(Attention, MatchesFloat64WithGqaAndOffset) {
  ThreadPool pool(2);
  const AttnCase cases[] = {
      {1, 1, 1, 1, 7},    {1, 19, 6, 2, 64},   {5, 19, 6, 2, 7},   {5, 5, 4, 4, 31},
      {3, 33, 8, 2, 100}, {19, 99, 6, 3, 256}, {33, 33, 2, 1, 64},
  };
  for (const auto& c : cases) check_attention(c, &pool);
  check_attention({4, 40, 6, 2, 64}, nullptr);
}

TEST(Attention, ThreadIndependent) {
  Rng rng(21);
  AttentionShape s{7, 50, 6, 2, 32, 6 * 32, 32, 2 * 32, 6 * 32};
  const auto q = rng.vec(7 * 6 * 32), k = rng.vec(50 * 64), v = rng.vec(50 * 64);
  std::vector<float> a(7 * 6 * 32), b(a.size());
  ThreadPool p1(1), p3(3);
  Contiguous cache;
  const KvPages kv = cache.pages(k, v, 50, 16);
  attention_causal(s, q.data(), kv, 0.2f, a.data(), &p1);
  attention_causal(s, q.data(), kv, 0.2f, b.data(), &p3);
  EXPECT_EQ(a, b);
}

// The same rows scattered over a larger pool in shuffled blocks (with garbage in the blocks the
// sequence does not own) give bit-identical output: paging changes addresses, not arithmetic.
TEST(Attention, PagedEqualsContiguousBitForBit) {
  struct Case {
    size_t n_q, kv_len, block_size;
  };
  for (const Case& c :
       {Case{1, 1, 1}, Case{1, 50, 16}, Case{9, 33, 4}, Case{16, 64, 16}, Case{5, 100, 7}, Case{3, 17, 32}}) {
    Rng rng(c.kv_len * 31 + c.block_size);
    const size_t H = 6, Hkv = 2, d = 32, row = Hkv * d;
    const AttentionShape s{c.n_q, c.kv_len, H, Hkv, d, 2 * H * d, 2 * d, row, H * d};
    const auto q = rng.vec(c.n_q * 2 * H * d, -2, 2), k = rng.vec(c.kv_len * row, -2, 2), v = rng.vec(c.kv_len * row);
    std::vector<float> want(c.n_q * H * d), got(want.size());
    Contiguous cont;
    attention_causal(s, q.data(), cont.pages(k, v, c.kv_len, c.block_size), 0.3f, want.data(), nullptr);

    const size_t n_blocks = (c.kv_len + c.block_size - 1) / c.block_size, pool_blocks = 3 * n_blocks + 2;
    std::vector<int32_t> ids(pool_blocks);
    for (size_t i = 0; i < pool_blocks; ++i) ids[i] = static_cast<int32_t>(i);
    for (size_t i = pool_blocks - 1; i > 0; --i) {  // Fisher-Yates
      std::swap(ids[i], ids[static_cast<size_t>(rng.integer(0, static_cast<int>(i)))]);
    }
    const std::vector<int32_t> table(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n_blocks));
    std::vector<float> k_pool = rng.vec(pool_blocks * c.block_size * row, -9, 9);
    std::vector<float> v_pool = rng.vec(k_pool.size(), -9, 9);
    for (size_t tau = 0; tau < c.kv_len; ++tau) {
      const size_t at = kv_row_offset(table.data(), c.block_size, row, tau);
      std::copy_n(k.data() + tau * row, row, k_pool.data() + at);
      std::copy_n(v.data() + tau * row, row, v_pool.data() + at);
    }
    attention_causal(s, q.data(), KvPages{k_pool.data(), v_pool.data(), table.data(), c.block_size}, 0.3f, got.data(),
                     nullptr);
    EXPECT_EQ(got, want) << "n_q " << c.n_q << " kv_len " << c.kv_len << " block " << c.block_size;
  }
}

// A decode step over many sequences (shuffled rows, shared pools, random tables) is, row for
// row, attention_causal of each sequence alone with the model's per-sequence shape: bit for bit,
// and the spare row that belongs to no sequence stays untouched.
TEST(Attention, DecodeBatchEqualsPerSequenceCalls) {
  Rng rng(77);
  const test::DecodeBatchHost b = test::make_decode_batch(rng, 6, 2, 40, {1, 5, 100, 17, 64, 3}, 40, 4);
  std::vector<float> got = b.sentinel_out(), want = b.sentinel_out();
  attention_batch(b.batch(b.q.data(), got.data(), b.k_pool.data(), b.v_pool.data()), nullptr);
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const KvPages kv{b.k_pool.data(), b.v_pool.data(), b.tables[i].data(), b.block_size};
    attention_causal(b.shape(i), b.q.data() + b.seqs[i].q_offset, kv, b.scale, want.data() + b.seqs[i].out_offset,
                     nullptr);
  }
  EXPECT_EQ(got, want);
  const size_t spare = b.row_of.back() * b.out_row();
  EXPECT_EQ(got[spare], -12345.0f);
  EXPECT_NE(got[b.seqs[0].out_offset], -12345.0f);
}

// A step mixing decode rows and prefill chunks (1, 17, 64, 337, 1000 query tokens; some
// prefix-cached: kv_len > n_q; GQA 3:1) is, row for row, attention_causal of each sequence
// alone: bit for bit (the reference is that loop), the spare row untouched.
TEST(Attention, StepBatchWithPrefillChunksEqualsPerSequenceCalls) {
  Rng rng(78);
  const std::vector<size_t> n_qs = {1, 17, 64, 337, 1000, 1, 40};
  const std::vector<size_t> kv_lens = {9, 17, 100, 337, 1000, 300, 41};
  const test::DecodeBatchHost b = test::make_decode_batch(rng, 6, 2, 32, kv_lens, 300, 8, n_qs);
  std::vector<float> got = b.sentinel_out(), want = b.sentinel_out();
  attention_batch(b.batch(b.q.data(), got.data(), b.k_pool.data(), b.v_pool.data()), nullptr);
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const KvPages kv{b.k_pool.data(), b.v_pool.data(), b.tables[i].data(), b.block_size};
    attention_causal(b.shape(i), b.q.data() + b.seqs[i].q_offset, kv, b.scale, want.data() + b.seqs[i].out_offset,
                     nullptr);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[b.row_of.back() * b.out_row()], -12345.0f);
  // The last query token of the 1000-token chunk was written (its rows are consecutive).
  EXPECT_NE(got[b.seqs[4].out_offset + 999 * b.out_row()], -12345.0f);
}

// ---- rope ------------------------------------------------------------------------------------

// Float64 reference: slot i uses theta^(-2i/n_rot) and the position stream of the M-RoPE rule.
std::vector<double> rope_reference(const std::vector<float>& x, size_t n_tokens, size_t n_heads, size_t head_dim,
                                   size_t n_rot, const std::vector<int32_t>& pos, std::array<int32_t, 4> sec,
                                   double theta) {
  std::vector<double> y(x.begin(), x.end());
  const size_t half = n_rot / 2;
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t h = 0; h < n_heads; ++h) {
      double* z = &y[(t * n_heads + h) * head_dim];
      for (size_t i = 0; i < half; ++i) {
        size_t stream = 0;
        if (i % 3 == 1 && i < 3 * static_cast<size_t>(sec[1]))
          stream = 1;
        else if (i % 3 == 2 && i < 3 * static_cast<size_t>(sec[2]))
          stream = 2;
        const double angle = pos[stream * n_tokens + t] * std::pow(theta, -2.0 * static_cast<double>(i) / n_rot);
        const double a = z[i], b = z[i + half];
        z[i] = a * std::cos(angle) - b * std::sin(angle);
        z[i + half] = a * std::sin(angle) + b * std::cos(angle);
      }
    }
  }
  return y;
}

// The op computes angles in f32 like transformers (f32 inv_freq, f32 position * inv_freq), so
// the angle itself carries a relative error of a few f32 ulps: ~3 * 6e-8 * |angle|. With
// |x| <= 1 the output error is bounded by that angle error (+ f32 products).
double rope_tolerance(int32_t max_pos) {
  return 3e-7 * max_pos + 1e-6;
}

TEST(Rope, MropeSectionsMatchFloat64) {
  Rng rng(31);
  const size_t n_tokens = 19, n_heads = 3, head_dim = 20, n_rot = 16;  // 4 pass-through dims
  const std::array<int32_t, 4> sec = {3, 3, 2, 0};
  std::vector<int32_t> pos(3 * n_tokens);
  for (size_t t = 0; t < n_tokens; ++t) {
    pos[t] = static_cast<int32_t>(10 + t);                 // t stream
    pos[n_tokens + t] = static_cast<int32_t>(3 * t % 7);   // h stream
    pos[2 * n_tokens + t] = static_cast<int32_t>(50 - t);  // w stream
  }
  auto x = rng.vec(n_tokens * n_heads * head_dim);
  const auto ref = rope_reference(x, n_tokens, n_heads, head_dim, n_rot, pos, sec, 1e7);
  rope_neox(x.data(), n_tokens, n_heads * head_dim, n_heads, head_dim, head_dim, n_rot, pos.data(), sec, 1e7f);
  for (size_t e = 0; e < x.size(); ++e) ASSERT_NEAR(x[e], ref[e], rope_tolerance(50)) << e;
  // Pass-through dims are untouched bit for bit (checked against the original copy in ref).
  for (size_t r = 0; r < n_tokens * n_heads; ++r)
    for (size_t i = n_rot; i < head_dim; ++i)
      EXPECT_EQ(static_cast<double>(x[r * head_dim + i]), ref[r * head_dim + i]);
}

// Plain RoPE (sections all zero) at large positions, with a token stride wider than the heads
// (q inside the joint Q+gate projection) and odd sizes.
TEST(Rope, PlainLargePositionsAndStrides) {
  Rng rng(32);
  for (size_t head_dim : {size_t{64}, size_t{256}}) {
    const size_t n_tokens = 33, n_heads = 3, n_rot = 64, head_stride = 2 * head_dim;
    const size_t token_stride = n_heads * head_stride + 5;
    std::vector<int32_t> pos(3 * n_tokens);
    for (size_t t = 0; t < n_tokens; ++t)
      pos[t] = pos[n_tokens + t] = pos[2 * n_tokens + t] = static_cast<int32_t>(4000 + 3 * t);
    auto buf = rng.vec(n_tokens * token_stride);
    const auto orig = buf;
    rope_neox(buf.data(), n_tokens, token_stride, n_heads, head_stride, head_dim, n_rot, pos.data(), {0, 0, 0, 0},
              1e7f);
    for (size_t t = 0; t < n_tokens; ++t) {
      for (size_t h = 0; h < n_heads; ++h) {
        const size_t base = t * token_stride + h * head_stride;
        std::vector<float> head(orig.begin() + static_cast<std::ptrdiff_t>(base),
                                orig.begin() + static_cast<std::ptrdiff_t>(base + head_dim));
        const std::vector<int32_t> p1 = {pos[t], pos[t], pos[t]};
        const auto ref = rope_reference(head, 1, 1, head_dim, n_rot, p1, {0, 0, 0, 0}, 1e7);
        for (size_t i = 0; i < head_dim; ++i) ASSERT_NEAR(buf[base + i], ref[i], rope_tolerance(4100));
      }
    }
    // Gate halves and padding are untouched.
    for (size_t t = 0; t < n_tokens; ++t) {
      for (size_t h = 0; h < n_heads; ++h)
        for (size_t i = head_dim; i < head_stride; ++i) {
          const size_t e = t * token_stride + h * head_stride + i;
          ASSERT_EQ(buf[e], orig[e]);
        }
      for (size_t e = t * token_stride + n_heads * head_stride; e < (t + 1) * token_stride; ++e)
        ASSERT_EQ(buf[e], orig[e]);
    }
  }
}

// Text tokens (t = h = w) rotate exactly like plain RoPE, whatever the sections.
TEST(Rope, SameStreamsEqualPlain) {
  Rng rng(33);
  const size_t n_tokens = 7, head_dim = 64, n_rot = 64;
  std::vector<int32_t> pos(3 * n_tokens);
  for (size_t t = 0; t < n_tokens; ++t)
    pos[t] = pos[n_tokens + t] = pos[2 * n_tokens + t] = static_cast<int32_t>(t * 11);
  auto a = rng.vec(n_tokens * head_dim);
  auto b = a;
  rope_neox(a.data(), n_tokens, head_dim, 1, head_dim, head_dim, n_rot, pos.data(), {11, 11, 10, 0}, 1e7f);
  rope_neox(b.data(), n_tokens, head_dim, 1, head_dim, head_dim, n_rot, pos.data(), {0, 0, 0, 0}, 1e7f);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace ds::cpu
