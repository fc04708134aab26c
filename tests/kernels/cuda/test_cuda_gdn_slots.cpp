// The batched GDN decode kernels (all sequences of a decode step in one launch, states addressed by
// pool slot): kernels/cuda/conv_l2_decode.h conv_silu_l2_slots and kernels/cuda/gdn.h
// gdn_decode_slots against the one-sequence kernels run sequence by sequence. Tolerance: none —
// each block does exactly the one-sequence computation, so outputs AND updated states must be
// bit-identical (memcmp); slots are out of order and skip pool entries, whose states must stay
// untouched.
//
// The raw-gate form of gdn_decode_slots (the gates computed inside the launch) against gdn_gates
// followed by gdn_decode_slots: bit-identical (memcmp), the gate math being one shared device
// function; and against the CPU reference (gates with cpu::softplus / cpu::sigmoid, then
// cpu::gdn_recurrent per sequence) within test_cuda_gdn.cpp's 2e-5 relative bound (the same
// f32 recurrence summed in 8 partial sums per column; expf / log1pf of the gates within an ulp
// or two of the host's, which the contracting update does not amplify).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cuda/conv_l2_decode.h"
#include "kernels/cuda/gdn.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "worker/cuda_backend.h"

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

// A speculative verify row's conv front end in one launch (conv_silu_l2_captured: 1 + 3 tokens,
// windows captured after tokens 0..2 in records further apart than a window) against one-token
// conv_silu_l2_token launches with a copy after each: outputs, final window and captures
// bit-identical (memcmp), the fourth record untouched; bad captures refused.
TEST(CudaGdnSlots, CapturedConvRowMatchesTokenByToken) {
  DS_REQUIRE_GPU();
  Rng rng(23);
  const size_t T = 4, n_cap = 3, window = (kKc - 1) * kC, stride = window + 40;
  const std::vector<float> x = rng.vec(T * kC), w = rng.vec(kC * kKc), state0 = rng.vec(window),
                           caps0 = rng.vec(4 * stride);
  DeviceArray<float> dx(x), dw(w), one_state(state0), loop_state(state0), one_caps(caps0), loop_caps(caps0),
      y_one(T * kC), y_loop(T * kC);
  ASSERT_EQ(conv_silu_l2_captured(dx.get(), kC, T, dw.get(), kKc, one_state.get(), 2 * kNk, kDk, 1e-6f, y_one.get(),
                                  n_cap, one_caps.get(), stride, nullptr),
            cudaSuccess);
  for (size_t t = 0; t < T; ++t) {
    ASSERT_EQ(conv_silu_l2_token(dx.get() + t * kC, kC, dw.get(), kKc, loop_state.get(), 2 * kNk, kDk, 1e-6f,
                                 y_loop.get() + t * kC, nullptr),
              cudaSuccess);
    if (t < n_cap) {
      ASSERT_EQ(
          cudaMemcpy(loop_caps.get() + t * stride, loop_state.get(), window * sizeof(float), cudaMemcpyDeviceToDevice),
          cudaSuccess);
    }
  }
  EXPECT_TRUE(same(y_one.download(), y_loop.download()));
  EXPECT_TRUE(same(one_state.download(), loop_state.download()));
  const std::vector<float> caps = one_caps.download();
  EXPECT_TRUE(same(caps, loop_caps.download()));
  EXPECT_EQ(std::memcmp(caps.data() + 3 * stride, caps0.data() + 3 * stride, stride * sizeof(float)), 0)
      << "only n_captures records are written";
  EXPECT_NE(std::memcmp(caps.data(), caps.data() + stride, window * sizeof(float)), 0)
      << "the captures differ by token";
  EXPECT_EQ(conv_silu_l2_captured(dx.get(), kC, T, dw.get(), kKc, one_state.get(), 2 * kNk, kDk, 1e-6f, y_one.get(),
                                  T + 1, one_caps.get(), stride, nullptr),
            cudaErrorInvalidValue)
      << "more captures than tokens";
  EXPECT_EQ(conv_silu_l2_captured(dx.get(), kC, T, dw.get(), kKc, one_state.get(), 2 * kNk, kDk, 1e-6f, y_one.get(), 2,
                                  one_caps.get(), window - 1, nullptr),
            cudaErrorInvalidValue)
      << "overlapping capture records";
}

// A speculative verify row's recurrence in one launch (gdn_recurrent_captured: 1 + 3 tokens, captures
// after tokens 0..2 in records further apart than a state) against one-token launches with a
// state copy after each: outputs, final state and captures bit-identical (memcmp), the fourth
// record untouched; bad captures refused.
TEST(CudaGdnSlots, CapturedVerifyRowMatchesTokenByToken) {
  DS_REQUIRE_GPU();
  Rng rng(19);
  const size_t T = 4, n_cap = 3, state_floats = kNv * kDk * kDv, stride = state_floats + 40;
  const GdnShape shape{T, kNk, kNv, kDk, kDv, kC, kC};
  const std::vector<float> conv = rng.vec(T * kC), g = rng.vec(T * kNv, -1.0f, 0.0f),
                           beta = rng.vec(T * kNv, 0.0f, 1.0f);
  const std::vector<float> state0 = rng.vec(state_floats, -0.1f, 0.1f), caps0 = rng.vec(4 * stride);
  DeviceArray<float> dconv(conv), dg(g), dbeta(beta), one_state(state0), loop_state(state0), one_caps(caps0),
      loop_caps(caps0), out_one(T * kNv * kDv), out_loop(T * kNv * kDv);
  const float* q = dconv.get();
  ASSERT_EQ(cuda::gdn_recurrent_captured(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(),
                                         one_state.get(), out_one.get(), n_cap, one_caps.get(), stride, nullptr),
            cudaSuccess);
  GdnShape one = shape;
  one.n_tokens = 1;
  for (size_t t = 0; t < T; ++t) {
    ASSERT_EQ(
        cuda::gdn_recurrent(one, q + t * kC, q + t * kC + kNk * kDk, q + t * kC + 2 * kNk * kDk, dg.get() + t * kNv,
                            dbeta.get() + t * kNv, loop_state.get(), out_loop.get() + t * kNv * kDv, nullptr),
        cudaSuccess);
    if (t < n_cap) {
      ASSERT_EQ(cudaMemcpy(loop_caps.get() + t * stride, loop_state.get(), state_floats * sizeof(float),
                           cudaMemcpyDeviceToDevice),
                cudaSuccess);
    }
  }
  EXPECT_TRUE(same(out_one.download(), out_loop.download()));
  EXPECT_TRUE(same(one_state.download(), loop_state.download()));
  const std::vector<float> caps = one_caps.download();
  EXPECT_TRUE(same(caps, loop_caps.download()));
  EXPECT_EQ(std::memcmp(caps.data() + 3 * stride, caps0.data() + 3 * stride, stride * sizeof(float)), 0)
      << "only n_captures records are written";
  EXPECT_NE(std::memcmp(caps.data(), caps.data() + stride, state_floats * sizeof(float)), 0)
      << "the captures differ by token";
  EXPECT_EQ(cuda::gdn_recurrent_captured(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(),
                                         one_state.get(), out_one.get(), T + 1, one_caps.get(), stride, nullptr),
            cudaErrorInvalidValue)
      << "more captures than tokens";
  EXPECT_EQ(cuda::gdn_recurrent_captured(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(),
                                         one_state.get(), out_one.get(), 2, one_caps.get(), state_floats - 1, nullptr),
            cudaErrorInvalidValue)
      << "overlapping capture records";
}

TEST(CudaGdnSlots, RecurrenceMatchesOneSequenceAtATime) {
  DS_REQUIRE_GPU();
  Rng rng(18);
  const size_t n = kSlots.size(), pool = 7, state_floats = kNv * kDk * kDv, stride = state_floats + 64;
  const GdnShape shape{1, kNk, kNv, kDk, kDv, kC, kC};
  const std::vector<float> conv = rng.vec(n * kC), g = rng.vec(n * kNv, -1.0f, 0.0f),
                           beta = rng.vec(n * kNv, 0.0f, 1.0f);
  const std::vector<float> states = rng.vec(pool * stride, -0.1f, 0.1f);
  DeviceArray<float> dconv(conv), dg(g), dbeta(beta), batched_state(states), loop_state(states);
  DeviceArray<float> out_batched(n * kNv * kDv), out_loop(n * kNv * kDv);
  DeviceArray<uint32_t> dslots(kSlots);
  const float* q = dconv.get();
  ASSERT_TRUE(gdn_decode_slots_applies(shape, n));
  ASSERT_EQ(cuda::gdn_decode_slots(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(),
                                   batched_state.get(), stride, dslots.get(), n, out_batched.get(), nullptr),
            cudaSuccess);
  for (size_t i = 0; i < n; ++i) {
    const float* qi = q + i * kC;
    ASSERT_EQ(
        cuda::gdn_recurrent(shape, qi, qi + kNk * kDk, qi + 2 * kNk * kDk, dg.get() + i * kNv, dbeta.get() + i * kNv,
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
  EXPECT_EQ(
      cuda::gdn_decode_slots(ok, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 4, nullptr, nullptr),
      cudaErrorInvalidValue);
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  EXPECT_EQ(conv_silu_l2_slots(p, kC, p, kKc, p, kC, nullptr, 4, 2 * kNk, kDk, 1e-6f, p + kC, nullptr),
            cudaErrorInvalidValue);  // no slot list
  const auto* s = reinterpret_cast<const uint32_t*>(uintptr_t{512});
  EXPECT_EQ(conv_silu_l2_slots(p, kC, p, kKc, p, kC, s, 0, 2 * kNk, kDk, 1e-6f, p + kC, nullptr),
            cudaErrorInvalidValue);
}

// ---- the raw-gate form: gates computed inside the recurrence's launch -------------------------

// Where a step's raw gate rows lie in one buffer: sequence i's alpha at i * stride + alpha_col,
// its beta_raw at i * stride + beta_col.
struct GateLayout {
  const char* name;
  size_t stride, alpha_col, beta_col;
};
constexpr size_t kInProjRow = kC + kNv * kDv + 2 * kNv;  // [qkv | z | alpha | beta_raw]
const GateLayout kLayouts[] = {
    {"Stacked", 2 * kNv, 0, kNv},                                   // [alpha | beta_raw] rows
    {"InProjRow", kInProjRow, kC + kNv* kDv, kC + kNv* kDv + kNv},  // the one-token GEMV's row
    {"Separate", kNv, 0, 4 * kNv},                                  // alpha and beta matrices, beta after 4 alpha rows
};

// L2-normalizes every q and k head of each conv row, as the model's inputs are (the recurrence is
// a contraction for unit keys, which the CPU comparison's tolerance relies on).
void normalize_qk(std::vector<float>& conv, size_t n) {
  for (size_t t = 0; t < n; ++t) {
    for (size_t h = 0; h < 2 * kNk; ++h) {
      float* x = &conv[t * kC + h * kDk];
      double sum = 0;
      for (size_t i = 0; i < kDk; ++i) sum += double(x[i]) * x[i];
      for (size_t i = 0; i < kDk; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(sum + 1e-6));
    }
  }
}

// One decode step of n <= 4 sequences (the separate layout's room) on the pool slots `slots`.
struct RawGateStep {
  size_t n, pool = 7, stride = kNv * kDk * kDv + 64;
  GateLayout layout;
  std::vector<uint32_t> slots;
  std::vector<float> conv, rows, a, dt_bias, states;
  RawGateStep(Rng& rng, const GateLayout& l, std::vector<uint32_t> slot_list, float raw_range)
      : n(slot_list.size()), layout(l), slots(std::move(slot_list)) {
    conv = rng.vec(n * kC);
    normalize_qk(conv, n);
    rows = rng.vec(4 * l.stride + l.beta_col, -raw_range, raw_range);
    a = rng.vec(kNv, -3.0f, -0.1f);  // ssm_a = -exp(A_log) < 0
    dt_bias = rng.vec(kNv);
    states = rng.vec(pool * stride, -0.1f, 0.1f);
  }
  GdnRawGates gates(const float* d_rows, const float* d_a, const float* d_dt_bias) const {
    return {d_rows + layout.alpha_col, layout.stride, d_rows + layout.beta_col, layout.stride, d_a, d_dt_bias};
  }
  // The CPU reference: the gates with the host formulas, then the recurrence sequence by sequence.
  void reference(std::vector<float>* state, std::vector<float>* out) const {
    const GdnShape shape{1, kNk, kNv, kDk, kDv, kC, kC};
    std::vector<float> g(kNv), beta(kNv);
    for (size_t i = 0; i < n; ++i) {
      for (size_t h = 0; h < kNv; ++h) {
        g[h] = a[h] * cpu::softplus(rows[i * layout.stride + layout.alpha_col + h] + dt_bias[h]);
        beta[h] = cpu::sigmoid(rows[i * layout.stride + layout.beta_col + h]);
      }
      const float* q = conv.data() + i * kC;
      cpu::gdn_recurrent(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, g.data(), beta.data(),
                         state->data() + slots[i] * stride, out->data() + i * kNv * kDv, nullptr);
    }
  }
};

class CudaGdnSlotsRawGates : public ::testing::TestWithParam<GateLayout> {};

TEST_P(CudaGdnSlotsRawGates, EqualsGatesThenRecurrenceBitForBit) {
  DS_REQUIRE_GPU();
  Rng rng(19);
  // alpha + dt_bias spans both softplus branches (identity above 20).
  const RawGateStep step(rng, GetParam(), {5, 0, 3, 6}, 30.0f);
  const size_t n = step.n;
  const GdnShape shape{1, kNk, kNv, kDk, kDv, kC, kC};
  DeviceArray<float> dconv(step.conv), drows(step.rows), da(step.a), ddt(step.dt_bias);
  DeviceArray<float> fused_state(step.states), two_state(step.states), dg(n * kNv), dbeta(n * kNv);
  DeviceArray<float> out_fused(n * kNv * kDv), out_two(n * kNv * kDv);
  DeviceArray<uint32_t> dslots(step.slots);
  const float* q = dconv.get();
  const GdnRawGates gates = step.gates(drows.get(), da.get(), ddt.get());
  ASSERT_EQ(cuda::gdn_decode_slots(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, gates, fused_state.get(), step.stride,
                                   dslots.get(), n, out_fused.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(gdn_gates(gates.alpha, gates.alpha_stride, gates.beta_raw, gates.beta_stride, da.get(), ddt.get(), n, kNv,
                      dg.get(), dbeta.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::gdn_decode_slots(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(), two_state.get(),
                                   step.stride, dslots.get(), n, out_two.get(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(same(out_fused.download(), out_two.download()));
  const std::vector<float> after = fused_state.download();
  EXPECT_TRUE(same(after, two_state.download()));
  EXPECT_FALSE(same(after, step.states));  // the used slots did change
  EXPECT_EQ(
      std::memcmp(after.data() + 1 * step.stride, step.states.data() + 1 * step.stride, step.stride * sizeof(float)), 0)
      << "slot 1 is not in the step and must stay untouched";
}

TEST_P(CudaGdnSlotsRawGates, MatchesCpuReference) {
  DS_REQUIRE_GPU();
  Rng rng(20);
  const RawGateStep step(rng, GetParam(), {2, 6, 0}, 4.0f);
  const size_t n = step.n;
  const GdnShape shape{1, kNk, kNv, kDk, kDv, kC, kC};
  DeviceArray<float> dconv(step.conv), drows(step.rows), da(step.a), ddt(step.dt_bias), dstate(step.states);
  DeviceArray<float> dout(n * kNv * kDv);
  DeviceArray<uint32_t> dslots(step.slots);
  const float* q = dconv.get();
  ASSERT_EQ(
      cuda::gdn_decode_slots(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, step.gates(drows.get(), da.get(), ddt.get()),
                             dstate.get(), step.stride, dslots.get(), n, dout.get(), nullptr),
      cudaSuccess);
  std::vector<float> want_state = step.states, want_out(n * kNv * kDv);
  step.reference(&want_state, &want_out);
  EXPECT_LE(rel_error(dout.download(), want_out), 2e-5);
  EXPECT_LE(rel_error(dstate.download(), want_state), 2e-5);
}

// A verify row of 1 + 3 tokens (row t of the layout = token t) with its gates computed inside the
// captured recurrence's launch against gdn_gates then gdn_recurrent_captured: outputs, state and
// captures bit-identical (memcmp).
TEST_P(CudaGdnSlotsRawGates, CapturedRowEqualsGatesThenCapturedRow) {
  DS_REQUIRE_GPU();
  Rng rng(22);
  const RawGateStep step(rng, GetParam(), {0, 1, 2, 3}, 30.0f);
  const size_t T = step.n, n_cap = 3, state_floats = kNv * kDk * kDv, stride = state_floats + 40;
  const GdnShape shape{T, kNk, kNv, kDk, kDv, kC, kC};
  const std::vector<float> state0(step.states.begin(), step.states.begin() + state_floats), caps0 = rng.vec(3 * stride);
  DeviceArray<float> dconv(step.conv), drows(step.rows), da(step.a), ddt(step.dt_bias), dg(T * kNv), dbeta(T * kNv);
  DeviceArray<float> fused_state(state0), two_state(state0), fused_caps(caps0), two_caps(caps0);
  DeviceArray<float> out_fused(T * kNv * kDv), out_two(T * kNv * kDv);
  const float* q = dconv.get();
  const GdnRawGates gates = step.gates(drows.get(), da.get(), ddt.get());
  ASSERT_EQ(cuda::gdn_recurrent_captured(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, gates, fused_state.get(),
                                         out_fused.get(), n_cap, fused_caps.get(), stride, nullptr),
            cudaSuccess);
  ASSERT_EQ(gdn_gates(gates.alpha, gates.alpha_stride, gates.beta_raw, gates.beta_stride, da.get(), ddt.get(), T, kNv,
                      dg.get(), dbeta.get(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cuda::gdn_recurrent_captured(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, dg.get(), dbeta.get(),
                                         two_state.get(), out_two.get(), n_cap, two_caps.get(), stride, nullptr),
            cudaSuccess);
  EXPECT_TRUE(same(out_fused.download(), out_two.download()));
  EXPECT_TRUE(same(fused_state.download(), two_state.download()));
  const std::vector<float> caps = fused_caps.download();
  EXPECT_TRUE(same(caps, two_caps.download()));
  EXPECT_FALSE(same(caps, caps0));
  GdnRawGates no_a = gates;
  no_a.a = nullptr;
  EXPECT_EQ(cuda::gdn_recurrent_captured(shape, q, q + kNk * kDk, q + 2 * kNk * kDk, no_a, fused_state.get(),
                                         out_fused.get(), n_cap, fused_caps.get(), stride, nullptr),
            cudaErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaGdnSlotsRawGates, ::testing::ValuesIn(kLayouts),
                         [](const ::testing::TestParamInfo<GateLayout>& param_info) {
                           return std::string(param_info.param.name);
                         });

// The backends' raw-gate gdn_decode_slots (host slot lists): the CUDA backend's one launch, its
// unfused fallback (gates kernel, then one recurrence per sequence: the same bits) and the CPU
// backend's default (the reference, within the bound above); one sequence (the T == 1 decode,
// gates in the in_proj row) and several.
TEST(CudaBackendGdnSlotsRawGates, FusedEqualsUnfusedAndMatchesCpuBackend) {
  DS_REQUIRE_GPU();
  for (const std::vector<uint32_t>& slots : {std::vector<uint32_t>{4}, std::vector<uint32_t>{3, 1, 6, 0}}) {
    Rng rng(21 + slots.size());
    const RawGateStep step(rng, slots.size() == 1 ? kLayouts[1] : kLayouts[0], slots, 4.0f);
    const size_t n = step.n, n_out = n * kNv * kDv;
    const GdnShape shape{1, kNk, kNv, kDk, kDv, kC, kC};
    // One backend's {output, state pool}.
    const auto run = [&](Backend& be) {
      const auto put = [&](const std::vector<float>& host) {
        float* p = be.alloc(host.size());
        be.upload(p, host.data(), host.size());
        return p;
      };
      float *conv = put(step.conv), *rows = put(step.rows), *a = put(step.a), *dt = put(step.dt_bias);
      float *state = put(step.states), *out = be.alloc(n_out);
      be.gdn_decode_slots(shape, conv, conv + kNk * kDk, conv + 2 * kNk * kDk, step.gates(rows, a, dt), state,
                          step.stride, step.slots.data(), n, out);
      std::vector<std::vector<float>> got{std::vector<float>(n_out), std::vector<float>(step.states.size())};
      be.download(got[0].data(), out, n_out);
      be.download(got[1].data(), state, got[1].size());
      for (float* p : {conv, rows, a, dt, state, out}) be.release(p);
      return got;
    };
    const std::unique_ptr<Backend> fused = make_cuda_backend(0),
                                   unfused = make_cuda_backend(0, {}, {.fused_decode_ops = false});
    const std::unique_ptr<Backend> cpu_backend = make_cpu_backend(2);
    const auto got = run(*fused), got_unfused = run(*unfused), want = run(*cpu_backend);
    EXPECT_TRUE(same(got[0], got_unfused[0])) << n << " sequences";
    EXPECT_TRUE(same(got[1], got_unfused[1])) << n << " sequences";
    EXPECT_LE(rel_error(got[0], want[0]), 2e-5) << n << " sequences";
    EXPECT_LE(rel_error(got[1], want[1]), 2e-5) << n << " sequences";
    EXPECT_FALSE(same(got[1], step.states)) << n << " sequences";
  }
}

TEST(CudaGdnSlotsArgs, RawGatesRejectWhatTheyCannotTake) {  // checked before any launch
  const GdnShape ok{1, kNk, kNv, kDk, kDv, kC, kC};
  float* p = reinterpret_cast<float*>(uintptr_t{256});
  const auto* slots = reinterpret_cast<const uint32_t*>(uintptr_t{512});
  const GdnRawGates good{p, 2 * kNv, p + kNv, 2 * kNv, p, p};
  const auto launch = [&](const GdnRawGates& g) {
    return cuda::gdn_decode_slots(ok, p, p, p, g, p, kC, slots, 4, p, nullptr);
  };
  GdnRawGates no_a = good;
  no_a.a = nullptr;
  EXPECT_EQ(launch(no_a), cudaErrorInvalidValue);
  GdnRawGates no_beta = good;
  no_beta.beta_raw = nullptr;
  EXPECT_EQ(launch(no_beta), cudaErrorInvalidValue);
  GdnRawGates short_rows = good;
  short_rows.alpha_stride = kNv - 1;  // the rows of several sequences would overlap
  EXPECT_EQ(launch(short_rows), cudaErrorInvalidValue);
  GdnRawGates misaligned = good;
  misaligned.dt_bias = reinterpret_cast<const float*>(uintptr_t{258});
  EXPECT_EQ(launch(misaligned), cudaErrorMisalignedAddress);
  GdnShape two = ok;
  two.n_tokens = 2;  // one token per sequence only
  EXPECT_EQ(cuda::gdn_decode_slots(two, p, p, p, good, p, kC, slots, 4, p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::gdn_decode_slots(ok, p, p, p, good, p, kC, nullptr, 4, p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ds::cuda::test
