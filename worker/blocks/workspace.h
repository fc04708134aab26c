// Named scratch buffers of a model stage, grown on demand and reused across steps so the
// steady state allocates nothing.
#pragma once

#include <array>
#include <cstddef>

#include "worker/backend.h"

namespace ds {

enum class Slot : int {
  kHidden,     // residual stream [T, D]
  kNorm,       // normed input of the current sub-block [T, D]
  kProjA,      // first projection (GDN qkv / attention q+gate / FFN gate)
  kProjB,      // second projection (GDN z / attention k / FFN up)
  kProjC,      // third projection (attention v)
  kAlpha,      // GDN decay input [T, nv]
  kBeta,       // GDN write-strength input [T, nv]
  kGateG,      // GDN log-decay [T, nv]
  kGateBeta,   // GDN beta [T, nv]
  kConv,       // GDN conv output [T, C]; MTP concat buffer
  kMix,        // token-mixer output before the gate [T, heads*dim]
  kGated,      // gated mixer output [T, heads*dim]
  kOut,        // output projection [T, D]
  kPicked,     // rows that need logits [R, D]
  kHeadNorm,   // final-normed rows [R, D]
  kLogits,     // [R, V]
  kRouter,     // MoE router logits [T, E] and the shared expert's gate [T]
  kExpertA,    // MoE: the route's expert ids [T, k] (int32)
  kExpertB,    // MoE: the route's weights [T, k]
  kExpertOut,  // MoE: the FFN's output [T, D]
  kCount,
};

class Workspace {
 public:
  explicit Workspace(Backend& backend) : be_(backend) {}
  ~Workspace() {
    for (auto& b : bufs_) be_.release(b.ptr);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Buffer for `slot` with room for at least n floats (contents kept only if not grown).
  float* get(Slot slot, size_t n) {
    Buffer& b = bufs_[static_cast<int>(slot)];
    if (n > b.size) {
      be_.release(b.ptr);
      b.ptr = be_.alloc(n);
      b.size = n;
    }
    return b.ptr;
  }

 private:
  struct Buffer {
    float* ptr = nullptr;
    size_t size = 0;
  };
  Backend& be_;
  std::array<Buffer, static_cast<size_t>(Slot::kCount)> bufs_{};
};

}  // namespace ds
