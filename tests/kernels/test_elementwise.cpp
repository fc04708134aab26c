// Norms, activations, conv1d and the logit digest.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/digest.h"
#include "kernels/cpu/norm.h"
#include "tests/kernels/kernel_test_util.h"

namespace ds::cpu {
namespace {

using test::Rng;

double silu64(double x) {
  return x / (1.0 + std::exp(-x));
}

const size_t kRowsList[] = {1, 3, 19, 33};
const size_t kDims[] = {7, 31, 64, 100, 256};

// Norm outputs are O(1) values computed with one f32 rsqrt and 1-2 f32 products per element:
// a few ulps, so 1e-6 relative to the row scale (|y| up to ~4) is a safe stated bound.
constexpr double kNormTol = 4e-6;

TEST(Norm, RmsNormMatchesFloat64) {
  Rng rng(41);
  for (size_t rows : kRowsList) {
    for (size_t dim : kDims) {
      const size_t stride = dim + 3;
      auto x = rng.vec(rows * stride, -3, 3);
      const auto w = rng.vec(dim, 0.5f, 1.5f);
      std::vector<float> y(rows * dim), y_nogain(rows * dim);
      rms_norm(x.data(), stride, w.data(), 1e-6f, rows, dim, y.data(), dim);
      rms_norm(x.data(), stride, nullptr, 1e-6f, rows, dim, y_nogain.data(), dim);
      for (size_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (size_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * stride + i]) * x[r * stride + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
        for (size_t i = 0; i < dim; ++i) {
          ASSERT_NEAR(y[r * dim + i], x[r * stride + i] * inv * w[i], kNormTol);
          ASSERT_NEAR(y_nogain[r * dim + i], x[r * stride + i] * inv, kNormTol);
        }
      }
      // In place with a stride (per-head QK norm inside a projection): same values.
      rms_norm(x.data(), stride, w.data(), 1e-6f, rows, dim, x.data(), stride);
      for (size_t r = 0; r < rows; ++r)
        for (size_t i = 0; i < dim; ++i) ASSERT_EQ(x[r * stride + i], y[r * dim + i]);
    }
  }
}

TEST(Norm, GatedRmsNormMatchesFloat64) {
  Rng rng(42);
  for (size_t rows : kRowsList) {
    for (size_t dim : kDims) {
      const auto o = rng.vec(rows * dim, -2, 2), z = rng.vec(rows * dim, -4, 4), w = rng.vec(dim, 0.5f, 1.5f);
      std::vector<float> y(rows * dim);
      gated_rms_norm(o.data(), z.data(), w.data(), 1e-6f, rows, dim, y.data());
      for (size_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (size_t i = 0; i < dim; ++i) ss += static_cast<double>(o[r * dim + i]) * o[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
        for (size_t i = 0; i < dim; ++i) {
          const size_t e = r * dim + i;
          ASSERT_NEAR(y[e], o[e] * inv * w[i] * silu64(z[e]), kNormTol * 4);  // |silu(z)| <= 4
        }
      }
    }
  }
}

TEST(Norm, L2NormMatchesFloat64) {
  Rng rng(43);
  for (size_t rows : kRowsList) {
    for (size_t dim : kDims) {
      const size_t stride = 2 * dim;
      const auto x = rng.vec(rows * stride, -2, 2);
      std::vector<float> y(rows * stride, 9.0f);
      l2_norm(x.data(), stride, 1e-6f, rows, dim, y.data(), stride);
      for (size_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (size_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * stride + i]) * x[r * stride + i];
        const double inv = 1.0 / std::sqrt(ss + 1e-6);
        for (size_t i = 0; i < dim; ++i) ASSERT_NEAR(y[r * stride + i], x[r * stride + i] * inv, 1e-6);  // |y| <= 1
        for (size_t i = dim; i < stride; ++i) ASSERT_EQ(y[r * stride + i], 9.0f);
      }
    }
  }
}

// Activations: one expf and a division or product each, a few ulps: 1e-6 relative.
TEST(Activation, MatchFloat64) {
  Rng rng(44);
  const size_t n = 257;
  const auto gate = rng.vec(n, -30, 30), up = rng.vec(n, -2, 2);
  std::vector<float> y(n);
  swiglu(gate.data(), up.data(), n, y.data());
  for (size_t i = 0; i < n; ++i) {
    const double ref = silu64(gate[i]) * up[i];
    ASSERT_NEAR(y[i], ref, 1e-6 * (1 + std::abs(ref)));
  }
  std::vector<float> y2 = gate;  // aliasing y == gate is allowed
  swiglu(y2.data(), up.data(), n, y2.data());
  EXPECT_EQ(y, y2);

  const size_t rows = 3, dim = 31;
  const auto x = rng.vec(rows * 40), g = rng.vec(rows * 50, -10, 10);
  std::vector<float> out(rows * 35, 5.0f);
  sigmoid_gate(x.data(), 40, g.data(), 50, rows, dim, out.data(), 35);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < dim; ++i) {
      const double ref = x[r * 40 + i] / (1.0 + std::exp(-static_cast<double>(g[r * 50 + i])));
      ASSERT_NEAR(out[r * 35 + i], ref, 1e-6);
    }
    for (size_t i = dim; i < 35; ++i) ASSERT_EQ(out[r * 35 + i], 5.0f);
  }

  for (float v : {-50.0f, -3.0f, 0.0f, 0.5f, 19.9f, 20.0f, 20.5f, 80.0f}) {
    const double ref = v > 20.0f ? v : std::log1p(std::exp(static_cast<double>(v)));
    EXPECT_NEAR(softplus(v), ref, 1e-6 * (1 + std::abs(ref))) << v;
  }
  EXPECT_EQ(softplus(80.0f), 80.0f);  // identity above 20, no overflow

  std::vector<float> acc = {1, 2, 3};
  const std::vector<float> add = {0.5f, -2, 10};
  add_inplace(acc.data(), add.data(), 3);
  EXPECT_EQ(acc, (std::vector<float>{1.5f, 0, 13}));
}

// ---- conv1d ----------------------------------------------------------------------------------

// Float64 reference over the concatenation [state rows ; x rows].
std::vector<double> conv_reference(const std::vector<float>& state, const std::vector<float>& x, size_t n_tokens,
                                   size_t channels, const std::vector<float>& w, size_t kernel) {
  std::vector<double> hist(state.begin(), state.end());
  hist.insert(hist.end(), x.begin(), x.end());  // row tau + kernel - 1 = time tau
  std::vector<double> y(n_tokens * channels);
  for (size_t t = 0; t < n_tokens; ++t)
    for (size_t c = 0; c < channels; ++c) {
      double acc = 0;
      for (size_t m = 0; m < kernel; ++m) acc += w[c * kernel + m] * hist[(t + m) * channels + c];
      y[t * channels + c] = silu64(acc);
    }
  return y;
}

TEST(Conv1d, MatchesFloat64AndUpdatesState) {
  Rng rng(45);
  const size_t kernel = 4;
  for (size_t channels : {size_t{7}, size_t{64}, size_t{100}}) {
    for (size_t n_tokens : {size_t{1}, size_t{2}, size_t{3}, size_t{19}}) {
      const auto w = rng.vec(channels * kernel);
      const auto x = rng.vec(n_tokens * channels, -2, 2);
      const auto state0 = rng.vec((kernel - 1) * channels);
      auto state = state0;
      std::vector<float> y(n_tokens * channels);
      causal_conv1d_silu(x.data(), channels, n_tokens, channels, w.data(), kernel, state.data(), y.data());
      const auto ref = conv_reference(state0, x, n_tokens, channels, w, kernel);
      // 4 f32 products + silu: a few ulps of values <= ~8.
      for (size_t e = 0; e < y.size(); ++e) ASSERT_NEAR(y[e], ref[e], 4e-6);
      // State = last kernel-1 raw inputs of [state0 ; x], oldest first.
      std::vector<float> all = state0;
      all.insert(all.end(), x.begin(), x.end());
      const std::vector<float> want(all.end() - static_cast<std::ptrdiff_t>((kernel - 1) * channels), all.end());
      EXPECT_EQ(state, want);
    }
  }
}

// Processing T tokens in one call equals processing them in several calls (bit for bit), with
// a token stride wider than the channels (the conv input is a slice of a projection).
TEST(Conv1d, StateCarryAcrossCalls) {
  Rng rng(46);
  const size_t kernel = 4, channels = 31, T = 20, x_stride = 40;
  const auto w = rng.vec(channels * kernel);
  const auto x = rng.vec(T * x_stride);
  std::vector<float> state_one((kernel - 1) * channels, 0.0f), y_one(T * channels);
  causal_conv1d_silu(x.data(), x_stride, T, channels, w.data(), kernel, state_one.data(), y_one.data());
  for (const std::vector<size_t>& pieces : {std::vector<size_t>{1, 1, 1, 1, 16}, std::vector<size_t>{2, 7, 11},
                                            std::vector<size_t>{19, 1}, std::vector<size_t>{0, 20}}) {
    std::vector<float> state((kernel - 1) * channels, 0.0f), y(T * channels, NAN);
    size_t t0 = 0;
    for (size_t len : pieces) {
      causal_conv1d_silu(x.data() + t0 * x_stride, x_stride, len, channels, w.data(), kernel, state.data(),
                         y.data() + t0 * channels);
      t0 += len;
    }
    EXPECT_EQ(y, y_one);
    EXPECT_EQ(state, state_one);
  }
}

// ---- digest ----------------------------------------------------------------------------------

TEST(Digest, TopKTiesAndLogSumExp) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f, 2.0f};
  const LogitDigest d = logit_digest(logits.data(), logits.size(), 4);
  EXPECT_EQ(d.top_ids, (std::vector<int32_t>{1, 3, 5, 6}));  // equal logits: lower id first
  EXPECT_EQ(d.top_logits, (std::vector<float>{3.0f, 3.0f, 3.0f, 2.0f}));
  double s = 0;
  for (float v : logits) s += std::exp(static_cast<double>(v));
  EXPECT_NEAR(d.logsumexp, std::log(s), 1e-12);

  const LogitDigest all = logit_digest(logits.data(), logits.size(), 100);  // k > vocab
  EXPECT_EQ(all.top_ids.size(), logits.size());
  EXPECT_EQ(all.top_ids.back(), 2);
}

TEST(Digest, LargeVocabIsStable) {
  Rng rng(47);
  const auto logits = rng.vec(151936, 50, 90);  // exp would overflow f32 without the max shift
  const LogitDigest d = logit_digest(logits.data(), logits.size(), 20);
  double mx = -1e300;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  long double s = 0;
  for (float v : logits) s += std::exp(static_cast<long double>(v) - mx);
  EXPECT_NEAR(d.logsumexp, mx + std::log(static_cast<double>(s)), 1e-9);
  for (size_t i = 1; i < d.top_ids.size(); ++i) EXPECT_GE(d.top_logits[i - 1], d.top_logits[i]);
  EXPECT_EQ(d.top_logits[0], mx);
}

}  // namespace
}  // namespace ds::cpu
