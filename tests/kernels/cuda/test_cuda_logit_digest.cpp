// The device logit digest (kernels/cuda/logit_digest.h) against its CPU reference,
// ds::digest_logits (common/sampling.cpp), and the CUDA backend's use of it (irregular rows
// fall back to the host digest).
//
// Tolerances: the candidate ids, their order and the sampled token must be identical (the
// device follows the same total order; ties are forced by quantized logits). The log-sum-exp
// is a double sum in another order: |diff| <= 1e-12 * max(1, |lse|) (double rounding over
// <= 248K terms, ~1e-16 each, is far below). Log-probabilities are floats of a double
// difference that moves by ~1e-13: |diff| <= 1e-6 (float ulp at |x| ~ 10 is 1e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/sampling.h"
#include "kernels/cuda/logit_digest.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "worker/backend.h"
#include "worker/cuda_backend.h"

namespace ds::cuda {
namespace {

using test::DeviceArray;
using test::Rng;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Random logits in [-8, 8), quantized to 1/8 so a row is full of exact ties, with a few -inf.
std::vector<float> tied_logits(size_t n_rows, size_t n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n_rows * n_vocab);
  for (float& x : v) {
    x = std::floor(rng.uniform(-8.0f, 8.0f) * 8.0f) / 8.0f;
    if (rng.integer(0, 99) == 0) x = -kInf;
  }
  return v;
}

// Log-probabilities within 1e-6 (f32 logits, double log-sum-exp); -inf (a masked or -inf logit) must
// match exactly, since -inf minus -inf is NaN and no tolerance compares it.
void expect_logprob(double got, double want) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want);
  } else {
    EXPECT_NEAR(got, want, 1e-6);
  }
}

void expect_same_digest(const LogitDigest& got, const LogitDigest& want, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.top_ids, want.top_ids);
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size());
  for (size_t i = 0; i < want.top_logprobs.size(); ++i) expect_logprob(got.top_logprobs[i], want.top_logprobs[i]);
  EXPECT_NEAR(got.logsumexp, want.logsumexp, 1e-12 * std::max(1.0, std::abs(want.logsumexp)));
  EXPECT_EQ(got.token, want.token);
  expect_logprob(got.token_logprob, want.token_logprob);
}

std::vector<DigestRow> device_rows(const std::vector<float>& logits, size_t n_rows, size_t n_vocab, uint32_t k) {
  DeviceArray<float> d_logits(logits);
  DeviceArray<uint8_t> scratch(logit_digest_scratch_bytes(n_rows, n_vocab, k));
  DeviceArray<DigestRow> out(n_rows);
  EXPECT_EQ(logit_digest_rows(d_logits.get(), n_rows, n_vocab, k, scratch.get(), out.get(), nullptr), cudaSuccess);
  return out.download();
}

// The rules under test: greedy, and sampling with top_k at the default digest size, in
// between, and at the cap, each with top_p and a few u.
std::vector<SamplingRule> rules() {
  std::vector<SamplingRule> r{{0.0f, 0, 1.0f}, {0.8f, 16, 1.0f}, {1.0f, 40, 0.9f}, {1.3f, 64, 0.5f}, {0.7f, 1, 1.0f}};
  SamplingRule min_p{1.0f, 40, 0.95f};  // min_p cuts among the device candidates, before top_p
  min_p.min_p = 0.2f;
  r.push_back(min_p);
  return r;
}

TEST(CudaLogitDigest, WhichRulesApply) {  // host only: runs without a GPU
  EXPECT_TRUE(digest_on_device_applies({0.0f, 0, 1.0f}));
  EXPECT_TRUE(digest_on_device_applies({0.0f, 1000, 0.5f}));  // greedy ignores top_k / top_p
  EXPECT_TRUE(digest_on_device_applies({0.7f, 64, 0.9f}));
  EXPECT_FALSE(digest_on_device_applies({0.7f, 0, 0.9f}));  // the whole sorted row
  EXPECT_FALSE(digest_on_device_applies({0.7f, 65, 1.0f}));
  EXPECT_EQ(digest_candidates({0.0f, 0, 1.0f}), kDigestTopK);
  EXPECT_EQ(digest_candidates({0.7f, 4, 1.0f}), kDigestTopK);
  EXPECT_EQ(digest_candidates({0.7f, 50, 1.0f}), 50u);
}

TEST(CudaLogitDigest, RejectsBadArguments) {  // checked before any launch: runs without a GPU
  float* fake = reinterpret_cast<float*>(uintptr_t{256});
  DigestRow* rows = reinterpret_cast<DigestRow*>(uintptr_t{256});
  void* scratch = reinterpret_cast<void*>(uintptr_t{256});
  EXPECT_EQ(logit_digest_rows(fake, 1, 0, 16, scratch, rows, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(logit_digest_rows(fake, 1, 100, 0, scratch, rows, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(logit_digest_rows(fake, 1, kDigestMaxVocab + 1, 16, scratch, rows, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(logit_digest_rows(fake, 1, 100, kDigestMaxCandidates + 1, scratch, rows, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(logit_digest_rows(nullptr, 1, 100, 16, scratch, rows, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(logit_digest_rows(fake, 1, 100, 16, nullptr, rows, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(logit_digest_rows(fake + 1, 1, 100, 16, reinterpret_cast<void*>(uintptr_t{260}), rows, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(logit_digest_rows(fake, 0, 100, 16, scratch, rows, nullptr), cudaSuccess);  // nothing to do
}

// The host half alone: candidates taken from the CPU's own sort give the CPU's digest.
TEST(CudaLogitDigest, FinishMatchesCpuOnCpuCandidates) {  // runs without a GPU
  const size_t n_vocab = 3000;
  const std::vector<float> logits = tied_logits(1, n_vocab, 7);
  const LogitDigest all = digest_logits(logits.data(), n_vocab, {}, 0.0, kDigestMaxCandidates);
  DigestRow row{};
  for (uint32_t i = 0; i < kDigestMaxCandidates; ++i) {
    row.ids[i] = all.top_ids[i];
    row.logits[i] = logits[static_cast<size_t>(all.top_ids[i])];
  }
  row.logsumexp = all.logsumexp;
  for (const SamplingRule& rule : rules()) {
    for (double u : {0.0, 0.31, 0.77, 0.999}) {
      expect_same_digest(finish_digest(row, n_vocab, rule, u), digest_logits(logits.data(), n_vocab, rule, u),
                         "host finish");
    }
  }
}

// Vocabulary sizes around the 2048-logit chunk, a tiny one below the digest size, and Qwen3.5's.
TEST(CudaLogitDigest, MatchesCpuDigestWithTies) {
  DS_REQUIRE_GPU();
  // kDigestMaxVocab: every lane of the merge block holds a chunk's list.
  for (size_t n_vocab : {size_t{5}, size_t{2047}, size_t{2049}, size_t{4097}, size_t{248320}, kDigestMaxVocab}) {
    const size_t n_rows = 3;
    const std::vector<float> logits = tied_logits(n_rows, n_vocab, 100 + n_vocab);
    for (const SamplingRule& rule : rules()) {
      const uint32_t k = digest_candidates(rule);
      const std::vector<DigestRow> rows = device_rows(logits, n_rows, n_vocab, k);
      for (size_t r = 0; r < n_rows; ++r) {
        SCOPED_TRACE("n_vocab " + std::to_string(n_vocab) + " row " + std::to_string(r) + " top_k " +
                     std::to_string(rule.top_k));
        ASSERT_EQ(rows[r].irregular, 0);
        const float* row = logits.data() + r * n_vocab;
        for (uint32_t i = k; i < kDigestMaxCandidates; ++i) EXPECT_EQ(rows[r].ids[i], -1);
        for (uint32_t i = static_cast<uint32_t>(std::min<size_t>(k, n_vocab)); i < k; ++i) {
          EXPECT_EQ(rows[r].ids[i], -1);  // rows shorter than k
        }
        for (double u : {0.05, 0.5, 0.95}) {
          expect_same_digest(finish_digest(rows[r], n_vocab, rule, u), digest_logits(row, n_vocab, rule, u), "device");
        }
      }
    }
  }
}

// +0 and -0 compare equal, so they tie and go by id, as on the CPU (the device orders by the bits'
// keys, which must not split them).
TEST(CudaLogitDigest, SignedZerosTie) {
  DS_REQUIRE_GPU();
  const size_t n_vocab = 5000;
  std::vector<float> logits(n_vocab, -1.0f);
  for (size_t id : {size_t{10}, size_t{2100}, size_t{4999}}) logits[id] = 0.0f;
  for (size_t id : {size_t{7}, size_t{3}, size_t{2050}}) logits[id] = -0.0f;
  const SamplingRule greedy{0.0f, 0, 1.0f};
  const std::vector<DigestRow> rows = device_rows(logits, 1, n_vocab, digest_candidates(greedy));
  const LogitDigest want = digest_logits(logits.data(), n_vocab, greedy, 0.5);
  expect_same_digest(finish_digest(rows[0], n_vocab, greedy, 0.5), want, "signed zeros");
  EXPECT_EQ(want.top_ids[0], 3);
}

TEST(CudaLogitDigest, SameBitsEveryRun) {
  DS_REQUIRE_GPU();
  const size_t n_vocab = 248320;
  const std::vector<float> logits = tied_logits(2, n_vocab, 11);
  const std::vector<DigestRow> a = device_rows(logits, 2, n_vocab, 16);
  const std::vector<DigestRow> b = device_rows(logits, 2, n_vocab, 16);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(a[r].logsumexp, b[r].logsumexp);  // bitwise: fixed reduction shape
    for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(a[r].ids[i], b[r].ids[i]);
  }
}

// NaN / +inf anywhere, or nothing finite, is flagged; -inf alone is ordinary (weight 0).
TEST(CudaLogitDigest, FlagsIrregularRows) {
  DS_REQUIRE_GPU();
  const size_t n_vocab = 5000;
  std::vector<float> logits = tied_logits(5, n_vocab, 3);
  logits[0 * n_vocab + 4321] = std::numeric_limits<float>::quiet_NaN();
  logits[1 * n_vocab + 17] = kInf;
  for (size_t i = 0; i < n_vocab; ++i) logits[2 * n_vocab + i] = -kInf;
  for (size_t i = 0; i < n_vocab; ++i) {
    if (i != 4999) logits[3 * n_vocab + i] = -kInf;  // one finite logit, at the very end
  }
  const std::vector<DigestRow> rows = device_rows(logits, 5, n_vocab, 16);
  EXPECT_EQ(rows[0].irregular, 1);
  EXPECT_EQ(rows[1].irregular, 1);
  EXPECT_EQ(rows[2].irregular, 1);
  EXPECT_EQ(rows[3].irregular, 0);
  EXPECT_EQ(rows[4].irregular, 0);
  const LogitDigest d = finish_digest(rows[3], n_vocab, {}, 0.0);
  EXPECT_EQ(d.token, 4999);
  EXPECT_EQ(d.top_ids.size(), kDigestTopK);
  EXPECT_EQ(d.top_ids[1], 0);  // then the -inf logits, in id order
  expect_same_digest(d, digest_logits(logits.data() + 3 * n_vocab, n_vocab, {}, 0.0), "one finite");
}

// Through the backend: regular rows from the device, irregular ones (NaN here) from the host
// digest of the whole row, and rules that need the sorted row refused (false, nothing done).
TEST(CudaLogitDigest, BackendDigestsAndFallsBack) {
  DS_REQUIRE_GPU();
  const size_t n_vocab = 10000, n_rows = 3;
  std::vector<float> logits = tied_logits(n_rows, n_vocab, 21);
  logits[1 * n_vocab + 99] = std::numeric_limits<float>::quiet_NaN();
  std::unique_ptr<Backend> be = make_cuda_backend(0);
  float* dev = be->alloc(logits.size());
  be->upload(dev, logits.data(), logits.size());
  const std::vector<DigestRequest> req{{{0.0f, 0, 1.0f}, 0.3}, {{0.9f, 20, 0.95f}, 0.6}, {{1.1f, 64, 1.0f}, 0.9}};
  std::vector<LogitDigest> got(n_rows);
  ASSERT_TRUE(be->digest_logits_rows(dev, n_rows, n_vocab, req.data(), got.data()));
  for (size_t r = 0; r < n_rows; ++r) {
    const LogitDigest want = digest_logits(logits.data() + r * n_vocab, n_vocab, req[r].rule, req[r].u);
    if (r == 1) {
      EXPECT_EQ(got[r].top_ids, want.top_ids);  // host path: exactly the CPU's result
      EXPECT_EQ(got[r].token, want.token);
      EXPECT_TRUE(std::isnan(want.logsumexp));  // a NaN logit poisons the CPU's sum, and the host path's
      EXPECT_TRUE(std::isnan(got[r].logsumexp));
    } else {
      expect_same_digest(got[r], want, "backend");
    }
  }
  const std::vector<DigestRequest> unsorted{{{0.7f, 0, 0.9f}, 0.5}};
  EXPECT_FALSE(be->digest_logits_rows(dev, 1, n_vocab, unsorted.data(), got.data()));
  // A vocabulary over the device digest's limit: refused, the caller digests on the host.
  float* wide = be->alloc(kDigestMaxVocab + 1);
  EXPECT_FALSE(be->digest_logits_rows(wide, 1, kDigestMaxVocab + 1, req.data(), got.data()));
  be->release(wide);

  std::unique_ptr<Backend> off = make_cuda_backend(0, {}, {.device_logit_digest = false});
  float* dev2 = off->alloc(n_vocab);
  off->upload(dev2, logits.data(), n_vocab);
  EXPECT_FALSE(off->digest_logits_rows(dev2, 1, n_vocab, req.data(), got.data()));
  off->release(dev2);
  be->release(dev);
}

}  // namespace
}  // namespace ds::cuda
