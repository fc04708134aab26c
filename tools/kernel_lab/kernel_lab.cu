// deltaserve-kernel-lab: kernel-level speed of ds::cuda::matmul (Q8_0) and ds::cuda GDN at the
// Qwen3.5 9B shapes, against the device's measured ceilings (lab_common.cuh; figures in docs/PERFORMANCE.md).
//
//   deltaserve-kernel-lab [--reps N] [--gemm-paths]   (--gemm-paths: only the prefill GEMM paths)
//   deltaserve-kernel-lab [--reps N] --prefill-ops    (only GDN f32 vs tensor-core state pass and dequant v1/v2:
//   prefill_ops.cu) deltaserve-kernel-lab [--reps N] --gemv-split     (only the split-rows GEMV vs the GGUF-order
//   paths) deltaserve-kernel-lab [--reps N] --gemm-split     (only the small-batch GEMM over split rows vs today's
//   paths)
//
// Method (METHOD.md): random inputs (never zeros), one warm-up launch, then N timed launches
// between CUDA events, median reported; weights rotate over enough copies that the set exceeds
// the 50 MB L2, so GEMV figures are HBM figures. GEMV bytes = Q8_0 weight bytes + x + y; GEMM
// FLOPs = 2 M N K; GDN bytes = state read + written once + q/k/v/out.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/q8_split.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/conv_l2_decode.h"
#include "kernels/cuda/gdn.h"
#include "kernels/cuda/gdn_chunked.h"
#include "kernels/cuda/logit_digest.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matmul_fast.h"
#include "kernels/cuda/norm.h"
#include "tools/kernel_lab/lab_common.cuh"
#include "tools/kernel_lab/prefill_ops.h"
#include "tools/kernel_lab/small_gemm_lab.h"
#include "tools/kernel_lab/variants_lab.h"

namespace {

using namespace ds::kernel_lab;

// ---- Prefill GEMM paths (issue 9), side by side at the 9B shapes: mma.sync or cuBLASLt, weights
// dequantized per call (the product's real cost) or read from a persistent bf16 copy. FLOPs =
// 2 M N K; the dequantization passes count as time, not work. ----
void gemm_paths(int reps) {
  struct PathShape {
    const char* name;
    size_t rows, cols;
  };
  const PathShape shapes[] = {{"ffn_up 12288x4096", 12288, 4096},   {"ffn_down 4096x12288", 4096, 12288},
                              {"qkv/attn_q 8192x4096", 8192, 4096}, {"gate/out/o 4096x4096", 4096, 4096},
                              {"attn_k/v 1024x4096", 1024, 4096},   {"lm_head 248320x4096", 248320, 4096}};
  using ds::cuda::TcGemmKernel;
  struct Path {
    const char* name;
    TcGemmKernel kernel;
    bool persistent;
  };
  const Path paths[] = {{"mma     dequant/call", TcGemmKernel::kMmaSync, false},
                        {"cublas  dequant/call", TcGemmKernel::kCublasLt, false},
                        {"mma     bf16 weights", TcGemmKernel::kMmaSync, true},
                        {"cublas  bf16 weights", TcGemmKernel::kCublasLt, true}};
  for (const PathShape& sh : shapes) {
    const Q8Matrix w(sh.rows, sh.cols, 0);
    void* wb = nullptr;
    LAB_CHECK(cudaMalloc(&wb, sh.rows * sh.cols * 2));
    const double dq_ms = median_ms(3, [&](int) { LAB_CHECK(ds::cuda::dequantize_q8_to_bf16(w.view(0), wb, nullptr)); });
    std::printf("gemm path dequant q8->bf16  %-20s %10.1f %7.0f GB/s\n", sh.name, dq_ms * 1e3,
                (w.bytes + sh.rows * sh.cols * 2.0) / (dq_ms * 1e-3) / 1e9);
    const bool huge = sh.rows > 100000;
    for (size_t n : {size_t{512}, size_t{2048}, size_t{8192}}) {
      float* x = device_f32(n * sh.cols, 5);
      float* y = device_f32(n * sh.rows, 6);
      for (const Path& p : paths) {
        const ds::cuda::TcGemmOptions o{.kernel = p.kernel, .bf16_weights = p.persistent ? wb : nullptr};
        const double ms = median_ms(huge ? 2 : std::max(3, reps / 2), [&](int) {
          LAB_CHECK(ds::cuda::detail::gemm_q8_tc(w.view(0), x, sh.cols, n, y, sh.rows, o, nullptr));
        });
        const double tf = 2.0 * sh.rows * sh.cols * n / (ms * 1e-3) / 1e12;
        std::printf("gemm path %s n=%-5zu %-20s %10.1f %6.1f TFLOP/s %6.1f%%\n", p.name, n, sh.name, ms * 1e3, tf,
                    100 * tf * 1e12 / kBf16);
      }
      LAB_CHECK(cudaFree(x));
      LAB_CHECK(cudaFree(y));
    }
    LAB_CHECK(cudaFree(wb));
  }
}

// ---- Split-rows Q8_0 GEMV (kernels/cuda/gemv_q8_split.cu) against the GGUF-order decode paths
// (cuda::matmul on a GGUF-order view: the f32 GEMV, gemv_q8, for <= 8 tokens) at the 9B
// decode-step shapes (9B, or 27B with `model` "27b"): the int8x3 dot (variant 1), the float dot
// (variant 2), which one the default (variant 0) picks for the shape, and the tensor-core GEMV
// (variant 3; also in block shape 1). The step lines sum one decode step. ----
// `only`: shapes whose name starts with it (all when empty; ncu runs pick one).
void gemv_split(int reps, const std::string& only, const std::string& model) {
  // Decode-step matrices as the CUDA backend multiplies them (stacked where it stacks them) and how
  // many times a step reads each: 9B 32 layers (24 GDN, 8 attention), 27B 64 (48 GDN, 16 attention).
  const std::vector<StepShape> shapes =
      model == "27b"
          ? std::vector<StepShape>{{"gate+up 34816x5120", 34816, 5120, 64},   {"ffn_down 5120x17408", 5120, 17408, 64},
                                   {"qkv+z+a+b 16528x5120", 16528, 5120, 48}, {"attn_q 12288x5120", 12288, 5120, 16},
                                   {"gdn_out/o 5120x6144", 5120, 6144, 64},   {"attn_k/v 1024x5120", 1024, 5120, 32},
                                   {"lm_head 248320x5120", 248320, 5120, 1}}
          : std::vector<StepShape>{{"gate+up 24576x4096", 24576, 4096, 32},   {"ffn_down 4096x12288", 4096, 12288, 32},
                                   {"qkv+z+a+b 12352x4096", 12352, 4096, 24}, {"attn_q 8192x4096", 8192, 4096, 8},
                                   {"gdn_out/o 4096x4096", 4096, 4096, 32},   {"attn_k/v 1024x4096", 1024, 4096, 16},
                                   {"lm_head 248320x4096", 248320, 4096, 1}};
  const char* step_name = model == "27b" ? "27B" : "9B";
  const size_t ns[] = {1, 2, 3, 4, 8};
  double cur_step[5] = {}, int_step[5] = {}, float_step[5] = {}, auto_step[5] = {}, mma_step[5] = {}, mma1_step[5] = {};
  double pq_step[5] = {};
  // The tensor-core GEMV in block shape 1 (8 warps, 2 blocks per SM) where it fits, else shape 0.
  const auto mma_shape1 = [&](const ds::cpu::WeightView& v, const float* xv, size_t cols, size_t n, float* yv,
                              size_t rows) {
    const ds::cuda::RowSegments out = ds::cuda::RowSegments::whole(yv, rows, rows);
    if (ds::kernel_lab::gemv_q8_split_mma_shape(1, v, xv, nullptr, cols, n, out, nullptr, false) == cudaSuccess) return;
    LAB_CHECK(ds::kernel_lab::gemv_q8_split_mma_shape(0, v, xv, nullptr, cols, n, out, nullptr, false));
  };
  // The tensor-core GEMV with the activations quantized once by their own launch (act_scratch).
  uint8_t* acts = nullptr;
  LAB_CHECK(cudaMalloc(&acts, ds::cuda::detail::gemv_q8_split_mma_act_bytes(17408)));
  const auto mma_pq = [&](const ds::cpu::WeightView& v, const float* xv, size_t cols, size_t n, float* yv,
                          size_t rows) {
    const ds::cuda::RowSegments out = ds::cuda::RowSegments::whole(yv, rows, rows);
    LAB_CHECK(ds::cuda::detail::gemv_q8_split_mma(v, xv, nullptr, cols, n, out, nullptr, false, acts));
  };
  std::vector<std::unique_ptr<Q8Matrix>> mats;
  float* x = device_f32(8 * 17408, 3);
  float* y = device_f32(8 * 248320, 4);
  for (const StepShape& sh : shapes) {
    if (std::string(sh.name).rfind(only, 0) != 0) {
      mats.push_back(nullptr);
      continue;
    }
    mats.push_back(std::make_unique<Q8Matrix>(sh.rows, sh.cols, size_t{256} << 20));
    const Q8Matrix& w = *mats.back();
    const bool picks_int = ds::cuda::detail::gemv_q8_split_int_dot(sh.rows, sh.cols);
    for (int k = 0; k < 5; ++k) {
      const size_t n = ns[k];
      const double cur = median_ms(reps, [&](int i) {
        LAB_CHECK(ds::cuda::matmul(w.view(i), x, sh.cols, n, y, sh.rows, ds::cuda::MatmulPrecision::kBf16TensorCores,
                                   ds::cuda::TcGemmOptions{}, nullptr));
      });
      const auto split = [&](int variant) {
        return median_ms(reps, [&](int i) {
          LAB_CHECK(ds::kernel_lab::gemv_q8_split_variant(variant, w.view(i, ds::GgmlType::Q8_0_SPLIT), x, sh.cols, n,
                                                          y, sh.rows, nullptr));
        });
      };
      const double int_ms = split(1), float_ms = split(2), mma_ms = split(ds::kernel_lab::kSplitMma);
      const double per = static_cast<double>(sh.per_step);
      mma_step[k] += mma_ms * per;
      const double mma1_ms =
          median_ms(reps, [&](int i) { mma_shape1(w.view(i, ds::GgmlType::Q8_0_SPLIT), x, sh.cols, n, y, sh.rows); });
      mma1_step[k] += mma1_ms * per;
      const double pq_ms =
          median_ms(reps, [&](int i) { mma_pq(w.view(i, ds::GgmlType::Q8_0_SPLIT), x, sh.cols, n, y, sh.rows); });
      pq_step[k] += pq_ms * per;
      cur_step[k] += cur * per;
      int_step[k] += int_ms * per;
      float_step[k] += float_ms * per;
      auto_step[k] += (picks_int ? int_ms : float_ms) * per;
      const double bytes = static_cast<double>(sh.rows * w.row_bytes) + 4.0 * n * (sh.cols + sh.rows);
      const auto pct = [&](double ms) { return 100 * bytes / (ms * 1e-3) / kHbm; };
      std::printf(
          "gemv-split n=%zu %-22s gguf %7.1f us %5.1f%% | int8x3 %7.1f us %5.1f%% | float %7.1f us %5.1f%% | "
          "mma %7.1f us %5.1f%% | mma 8x2 %7.1f us %5.1f%% | mma pq %7.1f us | default %s\n",
          n, sh.name, cur * 1e3, pct(cur), int_ms * 1e3, pct(int_ms), float_ms * 1e3, pct(float_ms), mma_ms * 1e3,
          pct(mma_ms), mma1_ms * 1e3, pct(mma1_ms), pq_ms * 1e3, picks_int ? "int8x3" : "float");
    }
  }
  for (int k = 0; k < 5; ++k) {
    std::printf(
        "gemv-split %s step n=%zu (sum of lone launches)  gguf %6.3f ms | int8x3 %6.3f | float %6.3f | "
        "int8+float %6.3f ms (x%.2f of its n=1) | mma %6.3f ms (x%.2f of its n=1) | mma 8x2 %6.3f ms | "
        "mma pq %6.3f ms\n",
        step_name, ns[k], cur_step[k], int_step[k], float_step[k], auto_step[k], auto_step[k] / auto_step[0],
        mma_step[k], mma_step[k] / mma_step[0], mma1_step[k], pq_step[k]);
  }
  // The same step as one queue of back-to-back launches (no per-launch event floor): what a decode
  // step's GEMVs cost, at the step's weight bytes.
  double step_bytes = 0;
  if (!only.empty()) return;  // the step below needs every shape
  for (size_t i = 0; i < mats.size(); ++i)
    step_bytes += double(shapes[i].rows * mats[i]->row_bytes) * shapes[i].per_step;
  for (int k = 0; k < 5; ++k) {
    const size_t n = ns[k];
    constexpr int kGgufOrder = -1, kMmaShape1 = -2, kMmaPq = -3;  // queued()'s other paths besides the split variants
    const auto queued = [&](int variant) {
      return median_ms(reps, [&](int rep) {
        int copy = rep * 7;
        for (size_t i = 0; i < mats.size(); ++i) {
          for (size_t j = 0; j < shapes[i].per_step; ++j, ++copy) {
            if (variant == kMmaShape1) {
              mma_shape1(mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT), x, shapes[i].cols, n, y, shapes[i].rows);
            } else if (variant == kMmaPq) {
              mma_pq(mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT), x, shapes[i].cols, n, y, shapes[i].rows);
            } else if (variant == kGgufOrder) {
              LAB_CHECK(ds::cuda::matmul(mats[i]->view(copy), x, shapes[i].cols, n, y, shapes[i].rows,
                                         ds::cuda::MatmulPrecision::kBf16TensorCores, ds::cuda::TcGemmOptions{},
                                         nullptr));
            } else {
              LAB_CHECK(ds::kernel_lab::gemv_q8_split_variant(variant, mats[i]->view(copy, ds::GgmlType::Q8_0_SPLIT), x,
                                                              shapes[i].cols, n, y, shapes[i].rows, nullptr));
            }
          }
        }
      });
    };
    const double g = queued(kGgufOrder), d = queued(0), in = queued(1), fl = queued(2);
    const double mm = queued(ds::kernel_lab::kSplitMma), mm1 = queued(kMmaShape1), pq = queued(kMmaPq);
    std::printf(
        "gemv-split %s step n=%zu queued (%.2f GB)  gguf %6.3f ms %5.1f%% | variant 0 %6.3f ms %5.1f%% | int8x3 "
        "%6.3f | float %6.3f | mma %6.3f ms %5.1f%% | mma 8x2 %6.3f ms | mma pq %6.3f ms\n",
        step_name, n, step_bytes / 1e9, g, 100 * step_bytes / (g * 1e-3) / kHbm, d,
        100 * step_bytes / (d * 1e-3) / kHbm, in, fl, mm, 100 * step_bytes / (mm * 1e-3) / kHbm, mm1, pq);
  }
  LAB_CHECK(cudaFree(acts));
  LAB_CHECK(cudaFree(x));
  LAB_CHECK(cudaFree(y));
}

}  // namespace

// ---- Decode-step overheads (issue 14 round 2), 9B shapes: the logit digest against the full
// logits download it replaces, the fused residual add + RMSNorm against the two launches, and
// the stacked GEMVs (one launch over [a ; b]) against the separate ones. ----
void decode_step_ops(int reps) {
  const size_t V = 248320, D = 4096;
  float* logits = device_f32(4 * V, 21, -10.0f, 10.0f);
  const uint32_t k = ds::kDigestTopK;
  void* scratch = nullptr;
  ds::cuda::DigestRow* rows = nullptr;
  LAB_CHECK(cudaMalloc(&scratch, ds::cuda::logit_digest_scratch_bytes(4, V, ds::cuda::kDigestMaxCandidates)));
  LAB_CHECK(cudaMalloc(&rows, 4 * sizeof(ds::cuda::DigestRow)));
  std::vector<float> host(4 * V);
  for (size_t n : {size_t{1}, size_t{4}}) {
    for (uint32_t kk : {k, ds::cuda::kDigestMaxCandidates}) {
      const double ms = median_ms(
          reps, [&](int) { LAB_CHECK(ds::cuda::logit_digest_rows(logits, n, V, kk, scratch, rows, nullptr)); });
      std::printf("logit digest %zu row(s) k=%-2u            %10.1f\n", n, kk, ms * 1e3);
    }
    // What the digest replaces: the rows downloaded to pageable host memory (then a host scan).
    const double ms = median_ms(
        reps, [&](int) { LAB_CHECK(cudaMemcpy(host.data(), logits, n * V * sizeof(float), cudaMemcpyDeviceToHost)); });
    std::printf("logits download %zu row(s) (pageable)  %10.1f\n", n, ms * 1e3);
  }
  float* x = device_f32(D, 22);
  float* delta = device_f32(D, 23);
  float* w = device_f32(D, 24, 0.5f, 1.5f);
  float* y = device_f32(D, 25);
  const double fused =
      median_ms(reps, [&](int) { LAB_CHECK(ds::cuda::add_rms_norm(x, delta, w, 1e-6f, 1, D, y, nullptr)); });
  const double apart = median_ms(reps, [&](int) {
    LAB_CHECK(ds::cuda::add_inplace(x, delta, D, nullptr));
    LAB_CHECK(ds::cuda::rms_norm(x, D, w, 1e-6f, 1, D, y, D, nullptr));
  });
  std::printf("add+rms_norm 1x4096 fused / 2 launches %7.1f / %.1f\n", fused * 1e3, apart * 1e3);
  {  // one GDN layer's decode front end: 8192 channels (32 q/k heads of 128 normed), 4 taps
    const size_t C = 8192, Kc = 4, dk = 128;
    float* cx = device_f32(C, 27);
    float* cw = device_f32(C * Kc, 28);
    float* cs = device_f32((Kc - 1) * C, 29);
    float* cy = device_f32(C, 30);
    const double one = median_ms(
        reps, [&](int) { LAB_CHECK(ds::cuda::conv_silu_l2_token(cx, C, cw, Kc, cs, 32, dk, 1e-6f, cy, nullptr)); });
    const double three = median_ms(reps, [&](int) {
      LAB_CHECK(ds::cuda::causal_conv1d_silu(cx, C, 1, C, cw, Kc, cs, cy, nullptr));
      LAB_CHECK(ds::cuda::l2_norm(cy, dk, 1e-6f, 32, dk, cy, dk, nullptr));
    });
    std::printf("conv+silu+l2 1x8192 fused / 3 launches %7.1f / %.1f\n", one * 1e3, three * 1e3);
    for (float* p : {cx, cw, cs, cy}) LAB_CHECK(cudaFree(p));
  }
  struct Stack {
    const char* name;
    size_t a, b;
  };
  for (const Stack& st : {Stack{"ssm alpha+beta 32+32", 32, 32}, Stack{"gdn qkv+gate 8192+4096", 8192, 4096},
                          Stack{"ffn gate+up 12288+12288", 12288, 12288}}) {
    const Q8Matrix both(st.a + st.b, D, size_t{256} << 20);
    float* out = device_f32(st.a + st.b, 26);
    const double one =
        median_ms(reps, [&](int i) { LAB_CHECK(ds::cuda::matmul(both.view(i), x, D, 1, out, st.a + st.b, nullptr)); });
    const double two = median_ms(reps, [&](int i) {
      const ds::cuda::WeightView v = both.view(i);
      ds::cuda::WeightView a = v, b = v;
      a.rows = st.a;
      b.rows = st.b;
      b.data = static_cast<const uint8_t*>(v.data) + st.a * v.row_bytes;
      LAB_CHECK(ds::cuda::matmul(a, x, D, 1, out, st.a, nullptr));
      LAB_CHECK(ds::cuda::matmul(b, x, D, 1, out + st.a, st.b, nullptr));
    });
    std::printf("gemv %-24s stacked / apart %7.1f / %.1f\n", st.name, one * 1e3, two * 1e3);
    LAB_CHECK(cudaFree(out));
  }
  for (float* p : {logits, x, delta, w, y}) LAB_CHECK(cudaFree(p));
  LAB_CHECK(cudaFree(scratch));
  LAB_CHECK(cudaFree(rows));
}

int main(int argc, char** argv) {
  int reps = 20;
  bool only_gemm_paths = false;   // --gemm-paths: just the prefill GEMM comparison (short device runs)
  bool only_prefill_ops = false;  // --prefill-ops: just prefill_ops.cu's comparisons
  bool only_gemv_split = false;   // --gemv-split: just the split-rows GEMV against the GGUF-order paths
  std::string shape_prefix;       // --shape NAME: only the --gemv-split shapes whose name starts with NAME
  std::string model = "9b";       // --model 9b|27b: the --gemv-split step's shapes
  bool only_gemm_split = false;   // --gemm-split: just the small-batch GEMM over split rows vs today's dispatch
  bool only_decode_ops = false;   // --decode-ops: just decode_step_ops (digest, fused norms, stacked GEMVs)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--gemm-paths") == 0) only_gemm_paths = true;
    if (std::strcmp(argv[i], "--prefill-ops") == 0) only_prefill_ops = true;
    if (std::strcmp(argv[i], "--gemv-split") == 0) only_gemv_split = true;
    if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc) shape_prefix = argv[++i];
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
    if (std::strcmp(argv[i], "--gemm-split") == 0) only_gemm_split = true;
    if (std::strcmp(argv[i], "--decode-ops") == 0) only_decode_ops = true;
  }
  cudaDeviceProp prop{};
  LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("%-34s %10s %10s %8s\n", "kernel", "time_us", "rate", "roofline");
  if (only_gemm_paths) {
    gemm_paths(reps);
    return 0;
  }
  if (only_gemv_split) {
    gemv_split(reps, shape_prefix, model);
    return 0;
  }
  if (only_gemm_split) {
    gemm_split(reps);
    return 0;
  }
  if (only_decode_ops) {
    decode_step_ops(reps);
    return 0;
  }
  if (only_prefill_ops) {
    prefill_ops(reps);
    return 0;
  }

  // ---- GEMV (decode): every 9B matrix; per-token sum = time of one decode token's GEMVs ----
  struct Shape {
    const char* name;
    size_t rows, cols;
  };
  struct DecodeShape {
    const char* name;
    size_t rows, cols, per_token;  // matrices of this shape in one 9B decode step
  };
  const DecodeShape gemv_shapes[] = {{"ffn_up 12288x4096", 12288, 4096, 64},   {"ffn_down 4096x12288", 4096, 12288, 32},
                                     {"qkv/attn_q 8192x4096", 8192, 4096, 32}, {"gate/out/o 4096x4096", 4096, 4096, 56},
                                     {"attn_k/v 1024x4096", 1024, 4096, 16},   {"ssm_alpha/beta 32x4096", 32, 4096, 48},
                                     {"lm_head 248320x4096", 248320, 4096, 1}};
  double step_ms[9] = {}, step_bytes = 0;
  for (const DecodeShape& sh : gemv_shapes) {
    const Q8Matrix w(sh.rows, sh.cols, size_t{256} << 20);
    float* x = device_f32(8 * sh.cols, 3);
    float* y = device_f32(8 * sh.rows, 4);
    step_bytes += static_cast<double>(sh.per_token * sh.rows * w.row_bytes);
    for (size_t n : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
      const double ms =
          median_ms(reps, [&](int i) { LAB_CHECK(ds::cuda::matmul(w.view(i), x, sh.cols, n, y, sh.rows, nullptr)); });
      step_ms[n] += ms * static_cast<double>(sh.per_token);
      const double bytes = static_cast<double>(sh.rows * w.row_bytes) + 4.0 * n * (sh.cols + sh.rows);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("gemv n=%zu %-25s %10.1f %7.0f GB/s %7.1f%%\n", n, sh.name, ms * 1e3, gbs, 100 * gbs * 1e9 / kHbm);
    }
    LAB_CHECK(cudaFree(x));
    LAB_CHECK(cudaFree(y));
  }
  for (size_t n : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    const double gbs = step_bytes / (step_ms[n] * 1e-3) / 1e9;
    std::printf("gemv 9B step n=%zu (%.2f GB, sum)    %10.1f %7.0f GB/s %7.1f%%  -> %.0f tok/s GEMV-only\n", n,
                step_bytes / 1e9, step_ms[n] * 1e3, gbs, 100 * gbs * 1e9 / kHbm, n / (step_ms[n] * 1e-3));
  }

  // ---- GEMV launch variants (matmul_fast.h), to pick the default ----
  for (const DecodeShape& sh : gemv_shapes) {
    const Q8Matrix w(sh.rows, sh.cols, size_t{256} << 20);
    float* x = device_f32(8 * sh.cols, 3);
    float* y = device_f32(8 * sh.rows, 4);
    for (int v = 0; v < ds::kernel_lab::kGemvQ8Shapes; ++v) {
      for (size_t n : {size_t{1}, size_t{8}}) {
        const double ms = median_ms(reps, [&](int i) {
          LAB_CHECK(ds::kernel_lab::gemv_q8_shape(v, w.view(i), x, sh.cols, n, y, sh.rows, nullptr));
        });
        const double gbs =
            (static_cast<double>(sh.rows * w.row_bytes) + 4.0 * n * (sh.cols + sh.rows)) / (ms * 1e-3) / 1e9;
        std::printf("gemv v%d n=%zu %-23s %10.1f %7.0f GB/s %7.1f%%\n", v, n, sh.name, ms * 1e3, gbs,
                    100 * gbs * 1e9 / kHbm);
      }
    }
    LAB_CHECK(cudaFree(x));
    LAB_CHECK(cudaFree(y));
  }

  // ---- attention decode (9B: 16 q heads, 4 kv heads, d 256, f32 paged KV, block 16) ----
  for (size_t kv_len : {size_t{512}, size_t{4096}, size_t{16384}}) {
    const size_t H = 16, Hkv = 4, d = 256, row = Hkv * d, bs = 16, n_blocks = (kv_len + bs - 1) / bs;
    float* kp = device_f32(n_blocks * bs * row, 13);
    float* vp = device_f32(n_blocks * bs * row, 14);
    float* q = device_f32(2 * H * d, 15);
    float* out = device_f32(H * d, 16);
    std::vector<int32_t> table(n_blocks);
    for (size_t i = 0; i < n_blocks; ++i) table[i] = static_cast<int32_t>(n_blocks - 1 - i);  // reversed pages
    int32_t* dt = nullptr;
    LAB_CHECK(cudaMalloc(&dt, n_blocks * sizeof(int32_t)));
    LAB_CHECK(cudaMemcpy(dt, table.data(), n_blocks * sizeof(int32_t), cudaMemcpyHostToDevice));
    const ds::cpu::AttentionShape s{1, kv_len, H, Hkv, d, 2 * H * d, 2 * d, row, H * d};
    const ds::cpu::KvPages kv{kp, vp, dt, bs};
    const double ms =
        median_ms(reps, [&](int) { LAB_CHECK(ds::cuda::attention_causal(s, q, kv, 0.0625f, out, nullptr)); });
    const double gbs = 2.0 * kv_len * row * 4 / (ms * 1e-3) / 1e9;
    std::printf("attn decode kv=%-6zu (1 layer)      %10.1f %7.0f GB/s %7.1f%%\n", kv_len, ms * 1e3, gbs,
                100 * gbs * 1e9 / kHbm);
    for (float* p : {kp, vp, q, out}) LAB_CHECK(cudaFree(p));
    LAB_CHECK(cudaFree(dt));
  }

  decode_step_ops(reps);

  // ---- GEMM (prefill) on tensor cores ----
  const Shape gemm_shapes[] = {{"ffn_up 12288x4096", 12288, 4096}, {"ffn_down 4096x12288", 4096, 12288}};
  for (const Shape& sh : gemm_shapes) {
    const Q8Matrix w(sh.rows, sh.cols, 0);
    for (size_t n : {size_t{512}, size_t{2048}, size_t{8192}}) {
      float* x = device_f32(n * sh.cols, 5);
      float* y = device_f32(n * sh.rows, 6);
      // bf16 tensor cores (the opt-in path, called directly), and at 2048 the default f32 SIMT GEMM.
      for (bool tc : {true, false}) {
        if (!tc && n != 2048) continue;
        const double ms = median_ms(tc ? std::max(3, reps / 2) : 3, [&](int) {
          if (tc) {
            LAB_CHECK(ds::cuda::detail::gemm_q8_tc(w.view(0), x, sh.cols, n, y, sh.rows, nullptr));
          } else {
            LAB_CHECK(ds::cuda::matmul(w.view(0), x, sh.cols, n, y, sh.rows, nullptr));
          }
        });
        const double tf = 2.0 * sh.rows * sh.cols * n / (ms * 1e-3) / 1e12;
        std::printf("gemm %s n=%-5zu %-17s %10.1f %6.1f TFLOP/s %6.1f%%\n", tc ? "tc  " : "simt", n, sh.name, ms * 1e3,
                    tf, 100 * tf * 1e12 / kBf16);
      }
      LAB_CHECK(cudaFree(x));
      LAB_CHECK(cudaFree(y));
    }
  }

  // ---- GDN, one 9B layer (16 k heads, 32 v heads, 128 x 128) ----
  for (size_t T : {size_t{1}, size_t{512}, size_t{2048}}) {
    const size_t nk = 16, nv = 32, dk = 128, dv = 128, C = 2 * nk * dk + nv * dv;
    const ds::cuda::GdnShape s{T, nk, nv, dk, dv, C, C};
    float* conv = device_f32(T * C, 8, -0.09f, 0.09f);  // |k| ~ 1 like the L2-normalized keys
    float* g = device_f32(T * nv, 9, -1.0f, -0.01f);
    float* beta = device_f32(T * nv, 10, 0.05f, 0.95f);
    float* state = device_f32(nv * dk * dv, 11, -0.5f, 0.5f);
    float* out = device_f32(T * nv * dv, 12);
    const double ms = median_ms(reps, [&](int) {
      const auto f = T == 1 ? ds::cuda::gdn_recurrent : ds::cuda::gdn_prefill;
      LAB_CHECK(f(s, conv, conv + nk * dk, conv + 2 * nk * dk, g, beta, state, out, nullptr));
    });
    const double bytes = 2.0 * nv * dk * dv * 4 + 4.0 * T * (C + nv * dv + 2 * nv);
    if (T == 1) {
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("gdn decode 1 tok (1 layer)          %10.1f %7.0f GB/s %7.1f%%\n", ms * 1e3, gbs,
                  100 * gbs * 1e9 / kHbm);
    } else {
      std::printf("gdn prefill %5zu tok (1 layer)     %10.1f %7.0f tok/s\n", T, ms * 1e3, T / (ms * 1e-3));
    }
    for (float* p : {conv, g, beta, state, out}) LAB_CHECK(cudaFree(p));
  }

  // ---- GDN chunked prefill (UT/WY, chunk 64), one 9B layer ----
  double prefill_gdn_ms[3] = {}, prefill_attn_ms[2][3] = {};  // for the breakdown below, n = 512 / 2K / 8K
  for (size_t T : {size_t{512}, size_t{2048}, size_t{8192}}) {
    const size_t nk = 16, nv = 32, dk = 128, dv = 128, C = 2 * nk * dk + nv * dv;
    const ds::cuda::GdnShape s{T, nk, nv, dk, dv, C, C};
    float* conv = device_f32(T * C, 8, -0.09f, 0.09f);
    float* g = device_f32(T * nv, 9, -1.0f, -0.01f);
    float* beta = device_f32(T * nv, 10, 0.05f, 0.95f);
    float* state = device_f32(nv * dk * dv, 11, -0.5f, 0.5f);
    float* out = device_f32(T * nv * dv, 12);
    const double ms = median_ms(reps, [&](int) {
      LAB_CHECK(ds::cuda::gdn_chunked(s, conv, conv + nk * dk, conv + 2 * nk * dk, g, beta, state, out, nullptr));
    });
    std::printf("gdn chunked %5zu tok (1 layer)     %10.1f %7.0f tok/s\n", T, ms * 1e3, T / (ms * 1e-3));
    prefill_gdn_ms[T == 512 ? 0 : T == 2048 ? 1 : 2] = ms;
    for (float* p : {conv, g, beta, state, out}) LAB_CHECK(cudaFree(p));
  }

  // ---- attention prefill (tiled, f32), one 9B layer: 16 q heads, 4 kv heads, d 256, blocks of 16 ----
  for (size_t T : {size_t{512}, size_t{2048}, size_t{8192}}) {
    const size_t H = 16, Hkv = 4, d = 256, bs = 16, row = Hkv * d, n_blocks = T / bs;
    const ds::cuda::AttentionShape s{T, T, H, Hkv, d, 2 * H * d, 2 * d, row, H * d};
    float* q = device_f32(T * 2 * H * d, 13, -1.0f, 1.0f);
    float* k = device_f32(T * row, 14, -1.0f, 1.0f);
    float* v = device_f32(T * row, 15, -1.0f, 1.0f);
    float* out = device_f32(T * H * d, 16);
    std::vector<int32_t> table(n_blocks);
    for (size_t b = 0; b < n_blocks; ++b) table[b] = static_cast<int32_t>(b);
    int32_t* dtable = nullptr;
    LAB_CHECK(cudaMalloc(&dtable, n_blocks * sizeof(int32_t)));
    LAB_CHECK(cudaMemcpy(dtable, table.data(), n_blocks * sizeof(int32_t), cudaMemcpyHostToDevice));
    const ds::cuda::KvPages kv{k, v, dtable, bs};
    const double flop = 4.0 * d * H * (static_cast<double>(T) * (T + 1) / 2);
    for (bool tc : {false, true}) {
      const double ms = median_ms(std::max(3, reps / 4), [&](int) {
        const auto f = tc ? ds::cuda::attention_prefill_tc : ds::cuda::attention_prefill;
        LAB_CHECK(f(s, q, kv, 0.0625f, out, nullptr));
      });
      std::printf("attn prefill %s %5zu tok (1 layer) %10.1f %6.1f TFLOP/s\n", tc ? "tc " : "f32", T, ms * 1e3,
                  flop / (ms * 1e-3) * 1e-12);
      prefill_attn_ms[tc ? 1 : 0][T == 512 ? 0 : T == 2048 ? 1 : 2] = ms;
    }
    for (float* p : {q, k, v, out}) LAB_CHECK(cudaFree(p));
    LAB_CHECK(cudaFree(dtable));
  }

  // ---- 9B prefill step by layer kind (default bf16 path): kernel time of every GEMM of the step
  // (tensor cores, dequantization included), 24 chunked GDN layers and 8 attention layers. What a
  // model-level prefill takes beyond their sum is "other" (norms, conv, gates, rope, KV writes). ----
  const StepShape step_shapes[] = {{"ffn gate/up", 12288, 4096, 64}, {"ffn_down", 4096, 12288, 32},
                                   {"qkv/attn_q", 8192, 4096, 32},   {"gate/out/o", 4096, 4096, 56},
                                   {"attn_k/v", 1024, 4096, 16},     {"ssm_alpha/beta", 32, 4096, 48}};
  const size_t step_tokens[3] = {512, 2048, 8192};
  for (int ti = 0; ti < 3; ++ti) {
    const size_t n = step_tokens[ti];
    double gemm_ms = 0;
    for (const StepShape& sh : step_shapes) {
      const Q8Matrix w(sh.rows, sh.cols, size_t{128} << 20);
      float* x = device_f32(n * sh.cols, 3);
      float* y = device_f32(n * sh.rows, 4);
      gemm_ms += sh.per_step * median_ms(3, [&](int i) {
                   LAB_CHECK(ds::cuda::matmul(w.view(i), x, sh.cols, n, y, sh.rows,
                                              ds::cuda::MatmulPrecision::kBf16TensorCores, nullptr));
                 });
      LAB_CHECK(cudaFree(x));
      LAB_CHECK(cudaFree(y));
    }
    const double gdn = 24 * prefill_gdn_ms[ti], attn = 8 * prefill_attn_ms[1][ti];
    std::printf(
        "prefill step %5zu tok (9B kernels)  gemm %.1f ms, gdn %.1f ms, attention(tc) %.1f ms, sum %.1f ms "
        "(%.0f tok/s)\n",
        n, gemm_ms, gdn, attn, gemm_ms + gdn + attn, n / ((gemm_ms + gdn + attn) * 1e-3));
  }
  return 0;
}
