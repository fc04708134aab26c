// The batched GDN decode kernels (all sequences of a decode step in one launch, states addressed by
// pool slot): kernels/cuda/conv_l2_decode.h conv_silu_l2_slots and kernels/cuda/gdn.h
// gdn_decode_slots against the one-sequence kernels run sequence by sequence. Tolerance: none —
// each block does exactly the one-sequence computation, so outputs AND updated states must be
// bit-identical (memcmp); slots are out of order and skip pool entries, whose states must stay
// untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/conv_l2_decode.h"
#include "kernels/cuda/gdn.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

// Qwen3.5-9B GDN decode shapes: 16 k heads, 32 v heads, 128 x 128 states, conv kernel 4.
constexpr size_t kNk = 16, kNv = 32, kDk = 128, kDv = 128, kKc = 4;
constexpr size_t kC = 2 * kNk * kDk + kNv * kDv;  // conv channels [q | k | v]
const std::vector<uint32_t> kSlots{5, 0, 3, 6};   // 4 sequences in a pool of 7 slots

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaGdnSlots, ConvL2MatchesOneSequenceAtATime) {
  DS_REQUIRE_GPU();
  Rng rng(17);
  const size_t n = kSlots.size(), pool = 7, stride = (kKc - 1) * kC + 99;  // a record is more than one state
  const std::vector<float> x = rng.vec(n * kC), w = rng.vec(kC * kKc), states = rng.vec(pool * stride);
  DeviceArray<float> dx(x), dw(w), batched_state(states), loop_state(states), y_batched(n * kC), y_loop(n * kC);
  DeviceArray<uint32_t> dslots(kSlots);
  ASSERT_EQ(conv_silu_l2_slots(dx.get(), kC, dw.get(), kKc, batched_state.get(), stride, dslots.get(), n, 2 * kNk, kDk,
                               1e-6f, y_batched.get(), nullptr),
            cudaSuccess);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(conv_silu_l2_token(dx.get() + i * kC, kC, dw.get(), kKc, loop_state.get() + kSlots[i] * stride, 2 * kNk,
                                 kDk, 1e-6f, y_loop.get() + i * kC, nullptr),
              cudaSuccess);
  }
  EXPECT_TRUE(same(y_batched.download(), y_loop.download()));
  const std::vector<float> after = batched_state.download();
  EXPECT_TRUE(same(after, loop_state.download()));
  EXPECT_FALSE(same(after, states));  // the used slots did change
  EXPECT_EQ(std::memcmp(after.data() + 1 * stride, states.data() + 1 * stride, stride * sizeof(float)), 0)
      << "slot 1 is not in the step and must stay untouched";
}

TEST(CudaGdnSlots, RecurrenceMatchesOneSequenceAtATime) {
  DS_REQUIRE_GPU();
  Rng rng(18);
  const size_t n = kSlots.size(), pool = 7, state_floats = kNv * kDk * kDv, stride = state_floats + 64;
  const GdnShape shape{1, kNk, kNv, kDk, kDv, kC, kC};
  const std::vector<float> conv = rng.vec(n * kC), g = rng.vec(n * kNv, -1.0f, 0.0f), beta = rng.vec(n * kNv, 0.0f, 1.0f);
  const std::vector<float> states = rng.vec(pool * stride, -0.1f, 0.1f);
  DeviceArray<float> dconv(conv), dg(g), dbeta(beta), batched_state(states), loop_state(states);
  DeviceArray<float> out_batched(n * kNv * kDv), out_loop(n * kNv * kDv);
  DeviceArray<uint32_t> dslots(kSlots);
  const float* q = dconv.get();
  ASSERT_TRUE(gdn_decode_slots_applies(shape, n));
  ASSERT_EQ(cuda::gdn_decode_slots(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(), batched_state.get(),
                             stride, dslots.get(), n, out_batched.get(), nullptr),
            cudaSuccess);
  for (size_t i = 0; i < n; ++i) {
    const float* qi = q + i * kC;
    ASSERT_EQ(cuda::gdn_recurrent(shape, qi, qi + kNk * kDk, qi + 2 * kNk * kDk, dg.get() + i * kNv, dbeta.get() + i * kNv,
                            loop_state.get() + kSlots[i] * stride, out_loop.get() + i * kNv * kDv, nullptr),
              cudaSuccess);
  }
  EXPECT_TRUE(same(out_batched.download(), out_loop.download()));
  const std::vector<float> after = batched_state.download();
  EXPECT_TRUE(same(after, loop_state.download()));
  EXPECT_EQ(std::memcmp(after.data() + 2 * stride, states.data() + 2 * stride, stride * sizeof(float)), 0)
      << "slot 2 is not in the step and must stay untouched";
}

TEST(CudaGdnSlotsArgs, RejectsWhatItCannotTake) {  // checked before any launch
  const GdnShape ok{1, kNk, kNv, kDk, kDv, kC, kC};
  EXPECT_TRUE(gdn_decode_slots_applies(ok, 64));
  GdnShape two = ok;
  two.n_tokens = 2;  // one token per sequence only
  EXPECT_FALSE(gdn_decode_slots_applies(two, 4));
  GdnShape wide = ok;
  wide.dk = 256;  // beyond the register-state block kernel
  EXPECT_FALSE(gdn_decode_slots_applies(wide, 4));
  EXPECT_FALSE(gdn_decode_slots_applies(ok, 0));
  EXPECT_EQ(cuda::gdn_decode_slots(ok, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 4, nullptr, nullptr),
            cudaErrorInvalidValue);
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(conv_silu_l2_slots(p, kC, p, kKc, p, kC, nullptr, 4, 2 * kNk, kDk, 1e-6f, p + kC, nullptr),
            cudaErrorInvalidValue);  // no slot list
  const auto* s = reinterpret_cast<const uint32_t*>(uintptr_t{512});
  EXPECT_EQ(conv_silu_l2_slots(p, kC, p, kKc, p, kC, s, 0, 2 * kNk, kDk, 1e-6f, p + kC, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ds::cuda::test
