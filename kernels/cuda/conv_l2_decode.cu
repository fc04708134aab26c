// Fused decode conv + SiLU + q/k L2 norm (see conv_l2_decode.h). A block per head of head_dim
// channels, a thread per channel: the thread reads its channel's taps and state, writes y and
// shifts its own state column (no other thread touches it), then the norm heads reduce y^2
// over the block and scale.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv_l2_decode.h"

namespace ds::cuda {
namespace {

constexpr size_t kMaxHeadDim = 1024;
constexpr size_t kMaxKernel = 16;  // a sanity bound on the taps (Qwen3.5: 4)

// Where a verify row's conv windows go (Backend::conv_silu_l2_captured): the window after token
// t < n goes to ptr + t * stride floats, laid out like the state. n == 0: none.
struct Captures {
  float* ptr = nullptr;
  size_t stride = 0, n = 0;
};

// blockIdx.y = sequence of a batched decode (x / y row y, state at state + slots[y] * slot_stride);
// slots == nullptr: one sequence, whose n_tokens tokens (rows of x / y) run one after another,
// each exactly as a one-token launch would (the thread keeps its channel's window in registers
// between them). May run as a dependent launch (common.cuh launch_dependent_if_enabled): the
// channel's conv taps (weights) are read before the wait, everything else after it.
__global__ void conv_silu_l2_kernel(const float* __restrict__ x, size_t channels, const float* __restrict__ weight,
                                    size_t kernel, float* __restrict__ state, size_t n_norm_heads, float eps,
                                    float* __restrict__ y, const uint32_t* __restrict__ slots, size_t slot_stride,
                                    size_t n_tokens, Captures captures) {
  __shared__ float warp_part[2][kMaxHeadDim / detail::kWarp];  // by token parity: one barrier a token
  const size_t head = blockIdx.x, c = head * blockDim.x + threadIdx.x;
  const size_t hist = kernel - 1;
  const float* wc = weight + c * kernel;
  float taps[kMaxKernel], window[kMaxKernel];  // constant indices only (unrolled): registers
#pragma unroll
  for (size_t m = 0; m < kMaxKernel; ++m) taps[m] = m < kernel ? wc[m] : 0.0f;
  detail::wait_for_previous_kernel();
  if (slots != nullptr) {
    x += size_t{blockIdx.y} * channels;
    y += size_t{blockIdx.y} * channels;
    state += slots[blockIdx.y] * slot_stride;
  }
#pragma unroll
  for (size_t m = 0; m < kMaxKernel; ++m) window[m] = m < hist ? state[m * channels + c] : 0.0f;
  for (size_t t = 0; t < n_tokens; ++t) {
    // Taps oldest first, the current token last (as the CPU sums them).
    float acc = 0.0f, current_tap = 0.0f;
#pragma unroll
    for (size_t m = 0; m < kMaxKernel; ++m) {
      if (m < hist) acc += taps[m] * window[m];
      if (m == hist) current_tap = taps[m];
    }
    const float xc = x[t * channels + c];
    acc += current_tap * xc;
#pragma unroll
    for (size_t m = 0; m < kMaxKernel; ++m) {
      if (m + 1 < hist) window[m] = window[m + 1];
      if (m + 1 == hist) window[m] = xc;
    }
    if (t < captures.n) {
#pragma unroll
      for (size_t m = 0; m < kMaxKernel; ++m) {
        if (m < hist) captures.ptr[t * captures.stride + m * channels + c] = window[m];
      }
    }
    const float v = detail::silu(acc);
    if (head >= n_norm_heads) {  // a v head: no norm (block-uniform branch)
      y[t * channels + c] = v;
      continue;
    }
    const float part = detail::warp_sum(v * v);
    const unsigned n_warps = (blockDim.x + detail::kWarp - 1) / detail::kWarp;
    float* parts = warp_part[t % 2];
    if (threadIdx.x % detail::kWarp == 0) parts[threadIdx.x / detail::kWarp] = part;
    __syncthreads();
    float total = 0.0f;
    for (unsigned w = 0; w < n_warps; ++w) total += parts[w];
    y[t * channels + c] = v * (1.0f / sqrtf(total + eps));
  }
#pragma unroll
  for (size_t m = 0; m < kMaxKernel; ++m) {
    if (m < hist) state[m * channels + c] = window[m];
  }
}

}  // namespace

bool conv_silu_l2_token_applies(size_t channels, size_t kernel, size_t n_norm_heads, size_t head_dim) {
  // Whole warps per block (the shuffle reduction), whole heads over the channels.
  return head_dim > 0 && head_dim <= kMaxHeadDim && head_dim % detail::kWarp == 0 && kernel >= 1 &&
         kernel <= kMaxKernel && channels > 0 && channels % head_dim == 0 && n_norm_heads * head_dim <= channels &&
         channels / head_dim <= detail::kMaxGridX;
}

namespace {

// One sequence's n_tokens tokens (conv_silu_l2_token: 1, no captures): the checks both entry points
// share, then the launch.
cudaError_t launch_one_sequence(const float* x, size_t channels, size_t n_tokens, const float* weight, size_t kernel,
                                float* state, size_t n_norm_heads, size_t head_dim, float eps, float* y,
                                const Captures& captures, cudaStream_t stream) {
  if (!conv_silu_l2_token_applies(channels, kernel, n_norm_heads, head_dim)) return cudaErrorInvalidValue;
  if (x == nullptr || weight == nullptr || y == nullptr || (kernel > 1 && state == nullptr) || y == x ||
      (state != nullptr && y == state)) {
    return cudaErrorInvalidValue;
  }
  if (!detail::f32_ok(x) || !detail::f32_ok(weight) || !detail::f32_ok(y) ||
      (state != nullptr && !detail::aligned_to(state, 4))) {
    return cudaErrorMisalignedAddress;
  }
  return detail::launch_dependent_if_enabled(conv_silu_l2_kernel, dim3(static_cast<unsigned>(channels / head_dim)),
                                             dim3(static_cast<unsigned>(head_dim)), 0, stream, x, channels, weight,
                                             kernel, state, n_norm_heads, eps, y, static_cast<const uint32_t*>(nullptr),
                                             size_t{0}, n_tokens, captures);
}

}  // namespace

cudaError_t conv_silu_l2_token(const float* x, size_t channels, const float* weight, size_t kernel, float* state,
                               size_t n_norm_heads, size_t head_dim, float eps, float* y, cudaStream_t stream) {
  return launch_one_sequence(x, channels, 1, weight, kernel, state, n_norm_heads, head_dim, eps, y, Captures{}, stream);
}

cudaError_t conv_silu_l2_captured(const float* x, size_t channels, size_t n_tokens, const float* weight, size_t kernel,
                                  float* state, size_t n_norm_heads, size_t head_dim, float eps, float* y,
                                  size_t n_captures, float* captures, size_t capture_stride, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  if (kernel < 2 || state == nullptr || n_captures > n_tokens || (n_captures > 0 && captures == nullptr) ||
      (n_captures > 1 && capture_stride < (kernel - 1) * channels)) {
    return cudaErrorInvalidValue;
  }
  if (captures != nullptr && !detail::aligned_to(captures, 4)) return cudaErrorMisalignedAddress;
  return launch_one_sequence(x, channels, n_tokens, weight, kernel, state, n_norm_heads, head_dim, eps, y,
                             Captures{captures, capture_stride, n_captures}, stream);
}

cudaError_t conv_silu_l2_slots(const float* x, size_t channels, const float* weight, size_t kernel, float* state0,
                               size_t slot_stride, const uint32_t* slots, size_t n_seqs, size_t n_norm_heads,
                               size_t head_dim, float eps, float* y, cudaStream_t stream) {
  if (!conv_silu_l2_token_applies(channels, kernel, n_norm_heads, head_dim) || n_seqs == 0 || n_seqs > 65535 ||
      x == nullptr || weight == nullptr || y == nullptr || state0 == nullptr || slots == nullptr || y == x) {
    return cudaErrorInvalidValue;
  }
  if (!detail::f32_ok(x) || !detail::f32_ok(weight) || !detail::f32_ok(y) || !detail::aligned_to(state0, 4)) {
    return cudaErrorMisalignedAddress;
  }
  const dim3 grid(static_cast<unsigned>(channels / head_dim), static_cast<unsigned>(n_seqs));
  return detail::launch_dependent_if_enabled(conv_silu_l2_kernel, grid, dim3(static_cast<unsigned>(head_dim)), 0,
                                             stream, x, channels, weight, kernel, state0, n_norm_heads, eps, y, slots,
                                             slot_stride, size_t{1}, Captures{});
}

}  // namespace ds::cuda
