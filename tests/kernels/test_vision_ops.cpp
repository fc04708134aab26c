// The vision tower's CPU ops against float64 references written here: layer_norm, gelu (both
// forms), add_bias, rope_2d and attention_segments, on random inputs of odd shapes and strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention_segments.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu {
namespace {

using test::Rng;

// ---- layer_norm ---------------------------------------------------------------------------------------

// Outputs are O(1..5) (|x| <= 3 normalised, gain <= 1.5, bias <= 0.5) from an f32 mean, variance
// and rsqrt and 3 f32 operations per element: a few ulps of 5, so 4e-6 absolute.
constexpr double kLayerNormTol = 4e-6;

TEST(VisionOps, LayerNormMatchesFloat64) {
  Rng rng(71);
  for (size_t rows : {1, 3, 19, 33}) {
    for (size_t dim : {7, 31, 64, 100, 256}) {
      const size_t stride = dim + 5;
      std::vector<float> x = rng.vec(rows * stride, -3, 3);
      for (size_t i = 0; i < x.size(); ++i) x[i] += 2.0f;  // an offset the mean must remove
      const auto w = rng.vec(dim, 0.5f, 1.5f), b = rng.vec(dim, -0.5f, 0.5f);
      std::vector<float> y(rows * dim), plain(rows * dim);
      layer_norm(x.data(), stride, w.data(), b.data(), 1e-6f, rows, dim, y.data(), dim);
      layer_norm(x.data(), stride, nullptr, nullptr, 1e-6f, rows, dim, plain.data(), dim);
      for (size_t r = 0; r < rows; ++r) {
        const float* xr = &x[r * stride];
        double mean = 0, var = 0;
        for (size_t i = 0; i < dim; ++i) mean += xr[i];
        mean /= dim;
        for (size_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const double rstd = 1.0 / std::sqrt(var / dim + 1e-6);
        for (size_t i = 0; i < dim; ++i) {
          const double n = (xr[i] - mean) * rstd;
          ASSERT_NEAR(y[r * dim + i], n * w[i] + b[i], kLayerNormTol) << rows << "x" << dim;
          ASSERT_NEAR(plain[r * dim + i], n, kLayerNormTol) << rows << "x" << dim;
        }
      }
      // In place, strided: the same bits.
      layer_norm(x.data(), stride, w.data(), b.data(), 1e-6f, rows, dim, x.data(), stride);
      for (size_t r = 0; r < rows; ++r) {
        for (size_t i = 0; i < dim; ++i) ASSERT_EQ(x[r * stride + i], y[r * dim + i]);
      }
    }
  }
}

// ---- gelu and add_bias ------------------------------------------------------------------------------

double gelu_tanh64(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_erf64(double x) {
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// A handful of f32 operations and one libm tanh / erf: a few ulps of max(1, |y|).
constexpr double kGeluTol = 1e-6;

TEST(VisionOps, GeluBothFormsMatchFloat64) {
  Rng rng(72);
  std::vector<float> x = rng.vec(1001, -8, 8);
  x.insert(x.end(), {0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f});
  for (GeluKind kind : {GeluKind::kTanh, GeluKind::kErf}) {
    std::vector<float> y(x.size());
    gelu(kind, x.data(), x.size(), y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = kind == GeluKind::kTanh ? gelu_tanh64(x[i]) : gelu_erf64(x[i]);
      ASSERT_NEAR(y[i], want, kGeluTol * std::max(1.0, std::abs(want))) << "x = " << x[i];
    }
    std::vector<float> inplace = x;  // y may alias x
    gelu(kind, inplace.data(), inplace.size(), inplace.data());
    EXPECT_EQ(std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)), 0);
  }
  // The forms are told apart by far more than the tolerance (1.5e-4 at x = 1).
  float t = 0, e = 0, one = 1.0f;
  gelu(GeluKind::kTanh, &one, 1, &t);
  gelu(GeluKind::kErf, &one, 1, &e);
  EXPECT_GT(std::abs(t - e), 1e-4f);
}

TEST(VisionOps, AddBiasAddsToEveryRowAndLeavesTheStridePadding) {
  Rng rng(73);
  const size_t rows = 19, dim = 37, stride = 41;
  std::vector<float> y = rng.vec(rows * stride);
  const std::vector<float> before = y, bias = rng.vec(dim);
  add_bias(y.data(), stride, rows, dim, bias.data());
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < stride; ++i) {
      const float want = i < dim ? before[r * stride + i] + bias[i] : before[r * stride + i];
      ASSERT_EQ(y[r * stride + i], want);
    }
  }
}

// ---- rope_2d --------------------------------------------------------------------------------------------

// Angles of positions <= 40 are f32 products (relative error ~1e-7, so ~5e-6 rad at 40 rad) of an
// f32 inverse frequency: the outputs (|z| <= 1.5) move by ~1e-5 at most; 2e-5 absolute.
constexpr double kRopeTol = 2e-5;

// Qwen3-VL's axial rotary embedding written out: pair (i, i + d/2), i < d/4 turned by row * f_i,
// i >= d/4 by col * f_{i - d/4}, f_j = theta^(-2j / (d/2)).
void rope_2d64(const std::vector<float>& in, size_t n_tokens, size_t ts, size_t n_heads, size_t hs, size_t d,
               const std::vector<int32_t>& pos, double theta, std::vector<double>* out) {
  out->assign(in.begin(), in.end());
  const size_t half = d / 2, quarter = d / 4;
  for (size_t t = 0; t < n_tokens; ++t) {
    for (size_t h = 0; h < n_heads; ++h) {
      const size_t base = t * ts + h * hs;
      for (size_t i = 0; i < half; ++i) {
        const size_t j = i < quarter ? i : i - quarter;
        const double p = i < quarter ? pos[t] : pos[n_tokens + t];
        const double angle = p * std::pow(theta, -2.0 * j / static_cast<double>(half));
        const double a = in[base + i], b = in[base + i + half];
        (*out)[base + i] = a * std::cos(angle) - b * std::sin(angle);
        (*out)[base + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

TEST(VisionOps, Rope2dMatchesTheAxialFormula) {
  Rng rng(74);
  for (size_t d : {4, 16, 72}) {
    const size_t n_tokens = 23, n_heads = 3, hs = d + 2, ts = n_heads * hs + 5;  // gaps must stay put
    std::vector<float> x = rng.vec(n_tokens * ts);
    std::vector<int32_t> pos(2 * n_tokens);
    for (auto& p : pos) p = rng.integer(0, 40);
    std::vector<double> want;
    rope_2d64(x, n_tokens, ts, n_heads, hs, d, pos, 10000.0, &want);
    rope_2d(x.data(), n_tokens, ts, n_heads, hs, d, pos.data(), 10000.0f);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], want[i], kRopeTol) << "d " << d << " at " << i;
  }
}

TEST(VisionOps, Rope2dRejectsAHeadDimNotAMultipleOfFour) {
  std::vector<float> x(6, 1.0f);
  const int32_t pos[2] = {1, 2};
  EXPECT_THROW(rope_2d(x.data(), 1, 6, 1, 6, 6, pos, 10000.0f), std::invalid_argument);
}

// ---- attention_segments --------------------------------------------------------------------------------

// Scores are f32 dots of <= 72 terms of |q k| <= 1 (error ~1e-6 before the softmax), outputs a
// convex combination of |v| <= 1 accumulated in f32 over <= 61 keys: ~1e-6; 1e-5 absolute.
constexpr double kAttentionTol = 1e-5;

struct AttentionCase {
  std::vector<float> qkv, out;
  std::vector<uint32_t> starts;
  SegmentAttention a;
};

// q | k | v of n_heads heads in rows of qkv_stride (padded), outputs in padded rows.
AttentionCase make_case(Rng& rng, const std::vector<uint32_t>& lengths, size_t n_heads, size_t d) {
  AttentionCase c;
  c.starts = {0};
  for (uint32_t n : lengths) c.starts.push_back(c.starts.back() + n);
  const size_t T = c.starts.back(), width = n_heads * d, stride = 3 * width + 3, out_stride = width + 7;
  c.qkv = rng.vec(T * stride);
  c.out.assign(T * out_stride, -7.0f);
  SegmentAttention& a = c.a;
  a.q = c.qkv.data();
  a.k = c.qkv.data() + width;
  a.v = c.qkv.data() + 2 * width;
  a.qkv_stride = stride;
  a.n_tokens = T;
  a.n_heads = n_heads;
  a.head_dim = d;
  a.starts = c.starts.data();
  a.n_segments = lengths.size();
  a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.out = c.out.data();
  a.out_stride = out_stride;
  return c;
}

// softmax(scale q.k) v over the query's own segment, in double.
std::vector<double> naive_attention(const SegmentAttention& a) {
  std::vector<double> out(a.n_tokens * a.out_stride, -7.0);
  const size_t d = a.head_dim;
  for (size_t s = 0; s < a.n_segments; ++s) {
    for (size_t t = a.starts[s]; t < a.starts[s + 1]; ++t) {
      for (size_t h = 0; h < a.n_heads; ++h) {
        std::vector<double> w;
        double mx = -INFINITY, sum = 0;
        for (size_t u = a.starts[s]; u < a.starts[s + 1]; ++u) {
          double dot = 0;
          for (size_t i = 0; i < d; ++i)
            dot += double(a.q[t * a.qkv_stride + h * d + i]) * a.k[u * a.qkv_stride + h * d + i];
          w.push_back(dot * a.scale);
          mx = std::max(mx, w.back());
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (size_t i = 0; i < d; ++i) {
          double acc = 0;
          for (size_t j = 0; j < w.size(); ++j) acc += w[j] / sum * a.v[(a.starts[s] + j) * a.qkv_stride + h * d + i];
          out[t * a.out_stride + h * d + i] = acc;
        }
      }
    }
  }
  return out;
}

TEST(VisionOps, AttentionSegmentsMatchesNaiveSoftmaxInFloat64) {
  Rng rng(75);
  ThreadPool pool(2);
  for (const std::vector<uint32_t>& lengths : std::vector<std::vector<uint32_t>>{{37}, {5, 1, 61}}) {
    for (size_t d : {16, 72}) {
      AttentionCase c = make_case(rng, lengths, 3, d);
      attention_segments(c.a, &pool);
      const std::vector<double> want = naive_attention(c.a);
      // Also checks the padding of the output rows is untouched (-7 on both sides).
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(c.out[i], want[i], kAttentionTol) << lengths.size() << " segments, d " << d << ", at " << i;
      }
    }
  }
}

TEST(VisionOps, AttentionSegmentsBitsDoNotDependOnTheThreadCount) {
  Rng rng(76);
  AttentionCase one = make_case(rng, {40, 3, 17}, 4, 16);
  AttentionCase three = one;
  three.a.q = three.qkv.data();
  three.a.k = three.qkv.data() + 4 * 16;
  three.a.v = three.qkv.data() + 2 * 4 * 16;
  three.a.starts = three.starts.data();
  three.a.out = three.out.data();
  ThreadPool single(1), triple(3);
  attention_segments(one.a, &single);
  attention_segments(three.a, &triple);
  EXPECT_EQ(std::memcmp(one.out.data(), three.out.data(), one.out.size() * sizeof(float)), 0);
}

TEST(VisionOps, AttentionSegmentsRejectsInconsistentSegments) {
  Rng rng(77);
  AttentionCase c = make_case(rng, {4, 4}, 2, 8);
  EXPECT_EQ(segment_attention_problem(c.a), nullptr);
  SegmentAttention bad = c.a;
  bad.n_tokens = 9;  // past the last segment
  EXPECT_NE(segment_attention_problem(bad), nullptr);
  EXPECT_THROW(attention_segments(bad, nullptr), std::invalid_argument);
  std::vector<uint32_t> empty = {0, 4, 4, 8};  // an empty segment
  bad = c.a;
  bad.starts = empty.data();
  bad.n_segments = 3;
  EXPECT_NE(segment_attention_problem(bad), nullptr);
  bad = c.a;
  bad.out_stride = 2 * 8 - 1;
  EXPECT_NE(segment_attention_problem(bad), nullptr);
}

}  // namespace
}  // namespace ds::cpu
