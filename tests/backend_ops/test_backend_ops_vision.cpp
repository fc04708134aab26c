// test_backend_ops cases of the encoder ops (the vision tower, worker/backend.h "encoder ops"):
// layer_norm, gelu, add_bias, rope_2d and attention_segments, each on the CPU backend (1 vs 3
// threads, bit for bit) and on the CUDA backend against it (test_backend_ops.cpp runs the table).
// Bounds, all relative to the largest reference value (Metric::kRelMax) unless bits:
//  * layer_norm 2e-6: f32 sums (CUDA) against double ones (CPU), both rounded to f32 statistics.
//  * gelu 2e-6: the same formula, tanhf / erff of the CUDA libm within a few ulp of glibc's.
//  * add_bias: bits (one f32 add per element on both).
//  * rope_2d 2e-6: the same f32 inverse frequencies and angles; cos/sin within 2 ulp (as rope_neox).
//  * attention_segments 2e-5: f32 online softmax over key tiles against the CPU's two-pass softmax,
//    summation order only (the f32 attention bound, test_cuda_attention_prefill.cpp kTol).
// The 4096-row, 16-head case runs all 16 heads in one call on CUDA but only head 15 on the CPU (a
// one-head call at that head's offsets: its rows depend on that head only, so the bits are those of
// a 16-head call), and only head 15's columns are compared: a head of 4096^2 f32 dot products
// takes about 1.5 s on one CPU thread, 16 would take over 20 s per run.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/backend_ops/backend_ops_cases.h"

namespace ds::backend_ops {
namespace {

constexpr double kRowTol = 2e-6, kAttnTol = 2e-5;

std::string dims(size_t rows, size_t dim) {
  return std::to_string(rows) + "x" + std::to_string(dim);
}

// ---- layer_norm -------------------------------------------------------------------------------

enum class Affine { kBoth, kNone, kGainOnly, kBiasOnly };

const char* affine_name(Affine a) {
  switch (a) {
    case Affine::kBoth:
      return "";
    case Affine::kNone:
      return " no w/b";
    case Affine::kGainOnly:
      return " w only";
    case Affine::kBiasOnly:
      return " b only";
  }
  return "";
}

// Rows of `dim` values (mean about 2, so the mean subtraction matters) at stride dim + pad; y at
// the same stride, or x itself (in place).
Case layer_norm_case(size_t rows, size_t dim, size_t pad, Affine affine, bool in_place = false) {
  return {"layer_norm",
          dims(rows, dim) + " pad=" + std::to_string(pad) + affine_name(affine) + (in_place ? " in place" : ""),
          [=](Backend& be, const Target&) {
            Rng rng(900 + rows + dim + pad);
            const size_t s = dim + pad;
            Dev d(be);
            float* x = d.put(rng.vec(rows * s, -1, 5));
            const bool gain = affine == Affine::kBoth || affine == Affine::kGainOnly;
            const bool bias = affine == Affine::kBoth || affine == Affine::kBiasOnly;
            const float* w = gain ? d.put(rng.vec(dim, 0.5f, 1.5f)) : nullptr;
            const float* b = bias ? d.put(rng.vec(dim, -1, 1)) : nullptr;
            float* y = in_place ? x : d.alloc(rows * s);
            be.layer_norm(x, s, w, b, 1e-6f, rows, dim, y, s);
            return Outs{rel("y", d.get(y, rows * s), kRowTol,
                            "f32 two-pass statistics vs the CPU's double sums; stride padding untouched")};
          }};
}

// ---- gelu and add_bias ------------------------------------------------------------------------

// offset 1: x and y one float past 16-byte alignment (the scalar kernel); else the float4 one.
Case gelu_case(GeluKind kind, size_t n, size_t offset, bool in_place = false) {
  return {"gelu",
          std::string(kind == GeluKind::kTanh ? "tanh" : "erf") + " n=" + std::to_string(n) +
              (offset != 0 ? " unaligned" : "") + (in_place ? " in place" : ""),
          [=](Backend& be, const Target&) {
            Rng rng(920 + n + offset);
            Dev d(be);
            float* x = d.put(rng.vec(n + offset, -6, 6));
            float* y = in_place ? x : d.alloc(n + offset);
            be.gelu(kind, x + offset, n, y + offset);
            return Outs{rel("y", d.get(y, n + offset), kRowTol, "tanhf / erff ulps (same formula)")};
          }};
}

Case add_bias_case(size_t rows, size_t dim, size_t stride) {
  return {"add_bias", dims(rows, dim) + " stride=" + std::to_string(stride), [=](Backend& be, const Target&) {
            Rng rng(940 + rows + dim + stride);
            Dev d(be);
            float* y = d.put(rng.vec(rows * stride, -3, 3));
            be.add_bias(y, stride, rows, dim, d.put(rng.vec(dim, -1, 1)));
            return Outs{bits("y", d.get(y, rows * stride), "one f32 add per element; stride padding untouched")};
          }};
}

// ---- rope_2d ----------------------------------------------------------------------------------

struct Grid {
  int rows, cols;
};

// Positions [2][T] of the patches of images laid out row-major one after another (each image's
// rows and columns count from 0).
std::vector<int32_t> grid_positions(const std::vector<Grid>& grids) {
  std::vector<int32_t> row, col;
  for (const Grid& g : grids) {
    for (int r = 0; r < g.rows; ++r) {
      for (int c = 0; c < g.cols; ++c) row.push_back(r), col.push_back(c);
    }
  }
  row.insert(row.end(), col.begin(), col.end());
  return row;
}

// The q and k heads of a fused qkv row ([T, 3 * H * hs + 4]): 2H heads of head_dim, hs apart.
Case rope_2d_case(std::vector<Grid> grids, size_t head_dim, size_t n_heads, size_t head_pad) {
  std::string shape;
  for (const Grid& g : grids) shape += std::to_string(g.rows) + "x" + std::to_string(g.cols) + " ";
  shape += "d=" + std::to_string(head_dim) + " heads=" + std::to_string(n_heads) + " pad=" + std::to_string(head_pad);
  return {"rope_2d", shape, [=](Backend& be, const Target&) {
            const std::vector<int32_t> pos = grid_positions(grids);
            const size_t T = pos.size() / 2, hs = head_dim + head_pad, ts = 3 * n_heads * hs + 4;
            Rng rng(960 + T + head_dim);
            Dev d(be);
            float* x = d.put(rng.vec(T * ts));
            be.rope_2d(x, T, ts, 2 * n_heads, hs, head_dim, pos.data(), 10000.0f);
            return Outs{rel("x", d.get(x, T * ts), kRowTol,
                            "cos/sin of the same f32 angle, <= 2 ulp; v heads and padding untouched")};
          }};
}

// ---- attention_segments -------------------------------------------------------------------------

// A step of `lens` segments from one fused qkv buffer [T, 3 * H * d + 4] (q, then k, then v
// heads), output rows H * d + 4 wide (the padding stays zero). `reference_heads`: the heads the
// CPU computes and both backends report (empty: all, in one call); the CUDA backend always runs
// every head in one call.
Case attention_segments_case(std::vector<uint32_t> lens, size_t n_heads, size_t head_dim,
                             std::vector<size_t> reference_heads = {}) {
  std::string shape = "segments";
  for (const uint32_t n : lens) shape += " " + std::to_string(n);
  shape += " heads=" + std::to_string(n_heads) + " d=" + std::to_string(head_dim);
  if (!reference_heads.empty()) shape += " (cpu: " + std::to_string(reference_heads.size()) + " of them)";
  return {"attention_segments", shape, [=](Backend& be, const Target&) {
            std::vector<uint32_t> starts{0};
            for (const uint32_t n : lens) starts.push_back(starts.back() + n);
            const size_t T = starts.back(), width = n_heads * head_dim;
            const size_t qkv_stride = 3 * width + 4, out_stride = width + 4;
            Rng rng(980 + T + n_heads + head_dim);
            std::vector<float> qkv(T * qkv_stride);
            for (size_t t = 0; t < T; ++t) {
              float* row = qkv.data() + t * qkv_stride;
              for (size_t i = 0; i < 2 * width; ++i) row[i] = rng.uniform(-2, 2);  // q, k: softmax far from flat
              for (size_t i = 2 * width; i < 3 * width; ++i) row[i] = rng.uniform(-1, 1);
            }
            Dev d(be);
            const float* base = d.put(qkv);
            float* out = d.alloc(T * out_stride);
            SegmentAttention a;
            a.q = base;
            a.k = base + width;
            a.v = base + 2 * width;
            a.qkv_stride = qkv_stride;
            a.n_tokens = T;
            a.n_heads = n_heads;
            a.head_dim = head_dim;
            a.starts = starts.data();
            a.n_segments = lens.size();
            a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
            a.out = out;
            a.out_stride = out_stride;
            if (reference_heads.empty() || std::strcmp(be.name(), "cpu") != 0) {
              be.attention_segments(a);
            } else {
              for (const size_t h : reference_heads) {
                SegmentAttention one = a;  // head h alone: the same rows, strides and bounds
                one.q += h * head_dim;
                one.k += h * head_dim;
                one.v += h * head_dim;
                one.out += h * head_dim;
                one.n_heads = 1;
                be.attention_segments(one);
              }
            }
            std::vector<float> got = d.get(out, T * out_stride);
            if (!reference_heads.empty()) {  // only the reference heads' columns
              std::vector<float> kept;
              for (size_t t = 0; t < T; ++t) {
                for (size_t h : reference_heads) {
                  const float* o = got.data() + t * out_stride + h * head_dim;
                  kept.insert(kept.end(), o, o + head_dim);
                }
              }
              got = std::move(kept);
            }
            return Outs{rel("out", std::move(got), kAttnTol,
                            "f32 online softmax vs two-pass: summation order (test_cuda_attention_prefill.cpp kTol)")};
          }};
}

}  // namespace

void add_vision_cases(std::vector<Case>& cases) {
  cases.push_back(layer_norm_case(7, 16, 3, Affine::kBoth));
  cases.push_back(layer_norm_case(33, 16, 0, Affine::kNone));
  cases.push_back(layer_norm_case(5, 64, 1, Affine::kGainOnly));
  cases.push_back(layer_norm_case(65, 64, 4, Affine::kBiasOnly));
  cases.push_back(layer_norm_case(1, 1152, 0, Affine::kBoth));
  cases.push_back(layer_norm_case(65, 1152, 4, Affine::kBoth));
  cases.push_back(layer_norm_case(3, 1152, 2, Affine::kNone));
  cases.push_back(layer_norm_case(17, 1152, 0, Affine::kBoth, true));
  cases.push_back(layer_norm_case(9, 64, 0, Affine::kBoth, true));
  cases.push_back(layer_norm_case(2, 4608, 0, Affine::kBoth));
  for (const GeluKind kind : {GeluKind::kTanh, GeluKind::kErf}) {
    for (size_t n : {1, 7, 33, 4099}) cases.push_back(gelu_case(kind, n, 0));
    cases.push_back(gelu_case(kind, 4099, 1));
    cases.push_back(gelu_case(kind, 1001, 0, true));
  }
  cases.push_back(add_bias_case(1, 1152, 1152));
  cases.push_back(add_bias_case(7, 33, 40));
  cases.push_back(add_bias_case(5, 64, 68));
  cases.push_back(add_bias_case(65, 3456, 3456));
  cases.push_back(add_bias_case(3, 64, 66));
  cases.push_back(rope_2d_case({{4, 4}}, 16, 2, 0));
  cases.push_back(rope_2d_case({{6, 7}, {3, 5}}, 16, 3, 4));
  cases.push_back(rope_2d_case({{6, 7}, {3, 5}}, 72, 2, 0));
  cases.push_back(rope_2d_case({{64, 64}}, 72, 2, 0));
  for (size_t d : {16, 72}) {
    cases.push_back(attention_segments_case({256}, 2, d));
    cases.push_back(attention_segments_case({64, 100, 37}, d == 16 ? 4 : 3, d));
  }
  cases.push_back(attention_segments_case({1, 129, 40}, 2, 64));
  cases.push_back(attention_segments_case({33, 200}, 1, 128));
  cases.push_back(attention_segments_case({4096}, 16, 72, {15}));
}

}  // namespace ds::backend_ops
