// The Qwen3.5 vision tower: its hyper-parameters and tensors (the mmproj GGUF of llama.cpp's
// converter), then the forward as a flat list of backend ops.
//
// Forward over the n_patches rows of every image of a call, stacked image after image:
//   x = [W0 | W1] (pixels) + b + pos               patch embedding (Conv3d of two taps) + position
//   depth x:  x += attn_out(attn(LN1(x)))          fused qkv, 2D RoPE on q and k, per-image
//             x += ffn_down(gelu_tanh(ffn_up(LN2(x))))   softmax(q.k / sqrt(hd)) v
//   out = mm.2(gelu_erf(mm.0(view(post_ln(x), [n_patches / 4][4 hidden]))))
// The merger's view works because the patches come in merge-block order: the 4 patches of a
// 2x2 block are consecutive rows.
#include "worker/models/qwen35_vision.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "common/gguf.h"
#include "worker/backend.h"

namespace ds {
namespace {

// ---- config --------------------------------------------------------------------------------------

std::string shape_text(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// The tensor `name` with ggml shape `ne` (ne[0] contiguous), else a ConfigError naming it.
const GgufTensor& expect_tensor(const GgufFile& g, const std::string& name, const std::vector<uint64_t>& ne) {
  const GgufTensor* t = g.find_tensor(name);
  if (t == nullptr) throw ConfigError("mmproj: missing tensor " + name);
  bool same = t->n_dims == ne.size();
  for (size_t i = 0; same && i < ne.size(); ++i) same = t->ne[i] == ne[i];
  if (!same) {
    throw ConfigError("mmproj: tensor " + name + " has shape " + t->shape_string() + ", expected " + shape_text(ne));
  }
  GgmlTypeTraits traits{};
  if (!ggml_type_traits(static_cast<uint32_t>(t->type), &traits) || !traits.can_dequantize) {
    throw ConfigError("mmproj: tensor " + name + " has a type we cannot read");
  }
  return *t;
}

// A matrix the backends' matmul takes in its own type.
void expect_matrix(const GgufFile& g, const std::string& name, uint64_t cols, uint64_t rows) {
  const GgufTensor& t = expect_tensor(g, name, {cols, rows});
  if (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::BF16 && t.type != GgmlType::Q8_0) {
    throw ConfigError("mmproj: matrix " + name + " is " + ggml_type_name(t.type) + " (F32, F16, BF16 or Q8_0 only)");
  }
}

// A linear layer: weight [cols -> rows] and bias [rows].
void expect_linear(const GgufFile& g, const std::string& prefix, uint64_t cols, uint64_t rows) {
  expect_matrix(g, prefix + ".weight", cols, rows);
  expect_tensor(g, prefix + ".bias", {rows});
}

void expect_layer_norm(const GgufFile& g, const std::string& prefix, uint64_t dim) {
  expect_tensor(g, prefix + ".weight", {dim});
  expect_tensor(g, prefix + ".bias", {dim});
}

// The learned position grid: pos_side^2 rows of `hidden`, consistent with image_size.
void read_position_grid(const GgufFile& g, VisionConfig* c) {
  const GgufTensor* t = g.find_tensor("v.position_embd.weight");
  if (t == nullptr) throw ConfigError("mmproj: missing tensor v.position_embd.weight");
  const uint64_t n_pos = t->ne[1];
  const auto side = static_cast<uint32_t>(std::llround(std::sqrt(static_cast<double>(n_pos))));
  if (n_pos == 0 || uint64_t{side} * side != n_pos) {
    throw ConfigError("mmproj: v.position_embd.weight has " + std::to_string(n_pos) + " rows, not a square grid");
  }
  expect_tensor(g, "v.position_embd.weight", {c->hidden, n_pos});
  c->pos_side = side;
  if (g.has("clip.vision.image_size") && g.get_u32("clip.vision.image_size") != side * c->patch_size) {
    throw ConfigError("mmproj: clip.vision.image_size disagrees with the " + std::to_string(side) + "x" +
                      std::to_string(side) + " position grid");
  }
}

void check_tensors(const GgufFile& g, const VisionConfig& c) {
  const uint64_t h = c.hidden, merged = c.patches_per_token() * h;
  for (const char* tap : {"v.patch_embd.weight", "v.patch_embd.weight.1"}) {
    expect_tensor(g, tap, {c.patch_size, c.patch_size, c.channels, h});
  }
  expect_tensor(g, "v.patch_embd.bias", {h});
  for (uint32_t i = 0; i < c.depth; ++i) {
    const std::string p = "v.blk." + std::to_string(i) + ".";
    expect_layer_norm(g, p + "ln1", h);
    expect_layer_norm(g, p + "ln2", h);
    expect_linear(g, p + "attn_qkv", h, 3 * h);
    expect_linear(g, p + "attn_out", h, h);
    expect_linear(g, p + "ffn_up", h, c.ffn);
    expect_linear(g, p + "ffn_down", c.ffn, h);
  }
  if (g.find_tensor("v.blk." + std::to_string(c.depth) + ".ln1.weight") != nullptr) {
    throw ConfigError("mmproj: more blocks than clip.vision.block_count");
  }
  expect_layer_norm(g, "v.post_ln", h);
  expect_linear(g, "mm.0", merged, merged);
  expect_linear(g, "mm.2", merged, c.out_hidden);
}

// ---- host inputs ---------------------------------------------------------------------------------

// One output position's two taps on a grid axis and the weight of the upper one.
struct AxisTap {
  uint32_t lo = 0, hi = 0;
  float frac = 0;
};

// Bilinear resize with align_corners=True (HF's interpolation of the learned grid): output i of
// `size` samples the grid at i * (side - 1) / (size - 1).
std::vector<AxisTap> axis_taps(uint32_t size, uint32_t side) {
  std::vector<AxisTap> taps(size);
  for (uint32_t i = 0; i < size; ++i) {
    const double at = size > 1 ? static_cast<double>(i) * (side - 1) / (size - 1) : 0.0;
    const auto src = static_cast<float>(at);
    AxisTap& t = taps[i];
    t.lo = std::min(static_cast<uint32_t>(src), side - 1);
    t.hi = std::min(t.lo + 1, side - 1);
    t.frac = src - static_cast<float>(t.lo);
  }
  return taps;
}

// Calls fn(k, row, col) for patch k of a gh x gw image in merge-block order.
template <typename Fn>
void for_each_patch(uint32_t gh, uint32_t gw, uint32_t m, Fn&& fn) {
  size_t k = 0;
  for (uint32_t br = 0; br < gh / m; ++br) {
    for (uint32_t bc = 0; bc < gw / m; ++bc) {
      for (uint32_t ir = 0; ir < m; ++ir) {
        for (uint32_t ic = 0; ic < m; ++ic) fn(k++, br * m + ir, bc * m + ic);
      }
    }
  }
}

// The position embedding of every patch of one image (rows [patches][hidden], block order): the
// four taps' rows weighted in f32 and summed in tap order, as the reference does.
void position_rows(const std::vector<float>& table, uint32_t side, uint32_t hidden, uint32_t gh, uint32_t gw,
                   uint32_t m, float* out) {
  const std::vector<AxisTap> ys = axis_taps(gh, side), xs = axis_taps(gw, side);
  for_each_patch(gh, gw, m, [&](size_t k, uint32_t r, uint32_t c) {
    const AxisTap &y = ys[r], &x = xs[c];
    const float w[4] = {(1.0f - y.frac) * (1.0f - x.frac), (1.0f - y.frac) * x.frac, y.frac * (1.0f - x.frac),
                        y.frac * x.frac};
    const float* rows[4] = {
        &table[(size_t{y.lo} * side + x.lo) * hidden], &table[(size_t{y.lo} * side + x.hi) * hidden],
        &table[(size_t{y.hi} * side + x.lo) * hidden], &table[(size_t{y.hi} * side + x.hi) * hidden]};
    float* o = out + k * hidden;
    for (uint32_t i = 0; i < hidden; ++i)
      o[i] = ((rows[0][i] * w[0] + rows[1][i] * w[1]) + rows[2][i] * w[2]) + rows[3][i] * w[3];
  });
}

std::vector<float> dequantized(const GgufTensor& t) {
  std::vector<float> v(t.n_elements());
  dequantize_row(t.type, t.data, v.data(), v.size());
  return v;
}

}  // namespace

VisionConfig load_vision_config(const GgufFile& mmproj, uint32_t text_hidden) {
  VisionConfig c = read_vision_config(mmproj);
  read_position_grid(mmproj, &c);
  check_tensors(mmproj, c);
  if (text_hidden != 0 && c.out_hidden != text_hidden) {
    throw ConfigError("mmproj: projection_dim " + std::to_string(c.out_hidden) + " differs from the text model's " +
                      "hidden size " + std::to_string(text_hidden));
  }
  return c;
}

PatchLayout vision_patch_layout(const VisionConfig& c) {
  PatchLayout l;
  l.patch = c.patch_size;
  l.merge = c.merge;
  l.temporal = c.temporal;
  for (size_t ch = 0; ch < 3; ++ch) {
    if (c.image_mean.size() == 3) l.mean[ch] = c.image_mean[ch];
    if (c.image_std.size() == 3) l.std[ch] = c.image_std[ch];
  }
  return l;
}

// ---- the tower ------------------------------------------------------------------------------------

// One call's device buffers, carved in scratch_row_floats()'s order from one allocation of
// workspace_floats() and released with it.
struct VisionTower::Scratch {
  Backend& be;
  float* base = nullptr;
  float* pixels = nullptr;  // [N][patch_floats]
  float* x = nullptr;       // [N][hidden] the residual stream
  float* normed = nullptr;  // [N][hidden] LayerNorm outputs; also the position rows and projections
  float* qkv = nullptr;     // [N][3 hidden]; the merger's hidden rows [N / m^2][m^2 hidden] reuse it
  float* mixed = nullptr;   // [N][hidden] attention output; then the MLP's output
  float* up = nullptr;      // [N][ffn]

  Scratch(Backend& backend, const VisionConfig& c, size_t n) : be(backend) {
    base = be.alloc(workspace_floats(c, n));
    float** slots[] = {&pixels, &x, &normed, &qkv, &mixed, &up};
    const std::array<size_t, 6> rows = scratch_row_floats(c);
    float* at = base;
    for (size_t i = 0; i < rows.size(); ++i) {
      *slots[i] = at;
      at += n * rows[i];
    }
  }
  ~Scratch() { be.release(base); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

VisionTower::VisionTower(const GgufFile& mmproj, Backend& be, uint32_t text_hidden)
    : be_(be), cfg_(load_vision_config(mmproj, text_hidden)) {
  bind(mmproj);
}

VisionTower::~VisionTower() {
  be_.release(patch_w_data_);
}

// Tensors by their GGUF names (llama.cpp's converter, conversion/qwen3vl.py).
void VisionTower::bind(const GgufFile& g) {
  const auto f = [&](const std::string& name) { return be_.f32_tensor(g.tensor(name)); };
  const auto w = [&](const std::string& name) { return be_.weight(g.tensor(name)); };
  build_patch_matrix(g);
  patch_b_ = f("v.patch_embd.bias");
  pos_table_ = dequantized(g.tensor("v.position_embd.weight"));
  for (uint32_t i = 0; i < cfg_.depth; ++i) {
    const std::string p = "v.blk." + std::to_string(i) + ".";
    Block b{};
    b.ln1_w = f(p + "ln1.weight");
    b.ln1_b = f(p + "ln1.bias");
    b.ln2_w = f(p + "ln2.weight");
    b.ln2_b = f(p + "ln2.bias");
    b.qkv = w(p + "attn_qkv.weight");
    b.qkv_b = f(p + "attn_qkv.bias");
    b.attn_out = w(p + "attn_out.weight");
    b.attn_out_b = f(p + "attn_out.bias");
    b.ffn_up = w(p + "ffn_up.weight");
    b.ffn_up_b = f(p + "ffn_up.bias");
    b.ffn_down = w(p + "ffn_down.weight");
    b.ffn_down_b = f(p + "ffn_down.bias");
    blocks_.push_back(b);
  }
  post_ln_w_ = f("v.post_ln.weight");
  post_ln_b_ = f("v.post_ln.bias");
  mm0_ = w("mm.0.weight");
  mm0_b_ = f("mm.0.bias");
  mm2_ = w("mm.2.weight");
  mm2_b_ = f("mm.2.bias");
}

// The Conv3d over a patch whose two frames are the same image is W0 . frame + W1 . frame; the
// converter stores W[:, :, 0] and W[:, :, 1] as two [hidden][C][P][P] tensors. One f32 matrix
// [hidden][C][T][P][P], built here, matches the pixel rows' (C, T, py, px) order, so the embedding
// is a single product over the rows as they come (no strided halves); f16 taps are exact in f32.
void VisionTower::build_patch_matrix(const GgufFile& g) {
  const std::vector<float> taps[2] = {dequantized(g.tensor("v.patch_embd.weight")),
                                      dequantized(g.tensor("v.patch_embd.weight.1"))};
  const size_t plane = size_t{cfg_.patch_size} * cfg_.patch_size, row = cfg_.patch_floats();
  std::vector<float> host(cfg_.hidden * row);
  for (size_t o = 0; o < cfg_.hidden; ++o) {
    for (size_t c = 0; c < cfg_.channels; ++c) {
      for (size_t t = 0; t < cfg_.temporal; ++t) {
        const float* src = &taps[t][(o * cfg_.channels + c) * plane];
        std::copy(src, src + plane, &host[o * row + (c * cfg_.temporal + t) * plane]);
      }
    }
  }
  patch_w_data_ = be_.alloc(host.size());
  be_.upload(patch_w_data_, host.data(), host.size());
  patch_w_.type = GgmlType::F32;
  patch_w_.data = patch_w_data_;
  patch_w_.rows = cfg_.hidden;
  patch_w_.cols = row;
  patch_w_.row_bytes = row * sizeof(float);
}

size_t VisionTower::tokens_of(const VisionImage& image) const {
  return size_t{image.grid_h} * image.grid_w / cfg_.patches_per_token();
}

// Pixels into the residual stream: the patch product, its bias, the resized position grid. Also
// fills the call's host inputs (rope positions, segment starts).
void VisionTower::embed_patches(const VisionImage* images, size_t n, const Scratch& s) {
  const size_t n_patches = starts_.back(), h = cfg_.hidden;
  std::vector<float>& pos = pos_rows_;
  pos.assign(n_patches * h, 0.0f);
  positions_.assign(2 * n_patches, 0);
  for (size_t i = 0; i < n; ++i) {
    const VisionImage& im = images[i];
    const size_t first = starts_[i], count = starts_[i + 1] - first;
    be_.upload(s.pixels + first * cfg_.patch_floats(), im.patches, count * cfg_.patch_floats());
    position_rows(pos_table_, cfg_.pos_side, cfg_.hidden, im.grid_h, im.grid_w, cfg_.merge, &pos[first * h]);
    for_each_patch(im.grid_h, im.grid_w, cfg_.merge, [&](size_t k, uint32_t r, uint32_t c) {
      positions_[first + k] = static_cast<int32_t>(r);
      positions_[n_patches + first + k] = static_cast<int32_t>(c);
    });
  }
  be_.matmul(patch_w_, s.pixels, cfg_.patch_floats(), n_patches, s.x, h);
  be_.add_bias(s.x, h, n_patches, h, patch_b_);
  be_.upload(s.normed, pos.data(), pos.size());
  be_.add_inplace(s.x, s.normed, pos.size());
}

void VisionTower::run_block(const Block& b, const Scratch& s, size_t n_patches) {
  const size_t h = cfg_.hidden, hd = cfg_.head_dim, N = n_patches;
  // x += attn_out(attention(LN1(x)))
  be_.layer_norm(s.x, h, b.ln1_w, b.ln1_b, cfg_.eps, N, h, s.normed, h);
  be_.matmul(b.qkv, s.normed, h, N, s.qkv, 3 * h);
  be_.add_bias(s.qkv, 3 * h, N, 3 * h, b.qkv_b);
  be_.rope_2d(s.qkv, N, 3 * h, cfg_.heads, hd, hd, positions_.data(), cfg_.rope_theta);      // q
  be_.rope_2d(s.qkv + h, N, 3 * h, cfg_.heads, hd, hd, positions_.data(), cfg_.rope_theta);  // k
  SegmentAttention a;
  a.q = s.qkv;
  a.k = s.qkv + h;
  a.v = s.qkv + 2 * h;
  a.qkv_stride = 3 * h;
  a.n_tokens = N;
  a.n_heads = cfg_.heads;
  a.head_dim = hd;
  a.starts = starts_.data();
  a.n_segments = starts_.size() - 1;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.out = s.mixed;
  a.out_stride = h;
  be_.attention_segments(a);
  be_.matmul(b.attn_out, s.mixed, h, N, s.normed, h);
  be_.add_bias(s.normed, h, N, h, b.attn_out_b);
  be_.add_inplace(s.x, s.normed, N * h);
  // x += ffn_down(gelu_tanh(ffn_up(LN2(x))))
  be_.layer_norm(s.x, h, b.ln2_w, b.ln2_b, cfg_.eps, N, h, s.normed, h);
  be_.matmul(b.ffn_up, s.normed, h, N, s.up, cfg_.ffn);
  be_.add_bias(s.up, cfg_.ffn, N, cfg_.ffn, b.ffn_up_b);
  be_.gelu(GeluKind::kTanh, s.up, N * cfg_.ffn, s.up);
  be_.matmul(b.ffn_down, s.up, cfg_.ffn, N, s.mixed, h);
  be_.add_bias(s.mixed, h, N, h, b.ffn_down_b);
  be_.add_inplace(s.x, s.mixed, N * h);
}

// The merger: post_ln on every patch, a block's merge^2 consecutive rows read as one row, then
// mm.0, exact GELU, mm.2 straight into the caller's rows.
void VisionTower::merge_patches(const Scratch& s, size_t n_patches, float* out) {
  const size_t h = cfg_.hidden, wide = cfg_.patches_per_token() * h, n_tokens = n_patches / cfg_.patches_per_token();
  be_.layer_norm(s.x, h, post_ln_w_, post_ln_b_, cfg_.eps, n_patches, h, s.normed, h);
  be_.matmul(mm0_, s.normed, wide, n_tokens, s.qkv, wide);
  be_.add_bias(s.qkv, wide, n_tokens, wide, mm0_b_);
  be_.gelu(GeluKind::kErf, s.qkv, n_tokens * wide, s.qkv);
  be_.matmul(mm2_, s.qkv, wide, n_tokens, out, cfg_.out_hidden);
  be_.add_bias(out, cfg_.out_hidden, n_tokens, cfg_.out_hidden, mm2_b_);
}

void VisionTower::encode(const VisionImage* images, size_t n, float* out) {
  starts_.assign(1, 0);
  for (size_t i = 0; i < n; ++i) {
    const VisionImage& im = images[i];
    if (im.patches == nullptr || im.grid_h == 0 || im.grid_w == 0 || im.grid_h % cfg_.merge != 0 ||
        im.grid_w % cfg_.merge != 0) {
      throw std::invalid_argument("vision encode: image " + std::to_string(i) + " has no patches or a " +
                                  std::to_string(im.grid_h) + "x" + std::to_string(im.grid_w) +
                                  " grid that is not a multiple of the merge size " + std::to_string(cfg_.merge));
    }
    const size_t patches = size_t{im.grid_h} * im.grid_w;
    if (patches > UINT32_MAX - starts_.back()) throw std::invalid_argument("vision encode: too many patches");
    starts_.push_back(starts_.back() + static_cast<uint32_t>(patches));
  }
  const size_t n_patches = starts_.back();
  if (n_patches == 0) return;
  const Scratch s(be_, cfg_, n_patches);
  peak_workspace_floats_ = std::max(peak_workspace_floats_, workspace_floats(cfg_, n_patches));
  embed_patches(images, n, s);
  for (const Block& b : blocks_) run_block(b, s, n_patches);
  merge_patches(s, n_patches, out);
  be_.synchronize();  // the scratch is released when this returns
}

}  // namespace ds
