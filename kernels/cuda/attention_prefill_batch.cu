// Host side of attention_prefill_batch (kernels/cuda/attention_prefill.h): packs a step's prefill
// sequences into one flattened tile list, one gather list (tensor-core path) and their block
// tables, uploads them once, and launches the batched kernels of attention_prefill.cu /
// attention_prefill_tc.cu.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/common.cuh"

namespace ds::cuda {
namespace {

using detail::PrefillGather;
using detail::PrefillTile;

constexpr size_t kMaxPacked = 0xFFFFFFFFu;  // sizes and table offsets are 32-bit on the device
constexpr size_t kMaxGridY = 65535;         // the batched gather's sequences per launch
// The bf16 K/V copies of one launch pair stay under this (a longer batch is cut into several
// pairs; one sequence longer than that alone still runs, as its one-sequence call would).
constexpr size_t kMaxCopyBytes = size_t{256} << 20;

// Consecutive tiles and gathers launched together.
struct Group {
  size_t first_tile = 0, n_tiles = 0, first_gather = 0, n_gathers = 0, kv_rows = 0, max_kv_len = 0;
};

struct Packed {
  std::vector<PrefillTile> tiles;
  std::vector<PrefillGather> gathers;
  std::vector<int32_t> tables;
  std::vector<Group> groups;
};

// Keys the tile's last query row sees: its cost, for ordering the tiles.
size_t tile_keys(const PrefillTile& t) {
  return size_t{t.kv_len} - t.n_q + std::min<size_t>(size_t{t.t0} + detail::kPrefillTileRows, t.n_q);
}

// Opens a new group when sequence `seq_bytes` of bf16 copies would not fit the current one.
Group* group_for(Packed* p, size_t seq_bytes, size_t row_bytes, bool tensor_cores) {
  Group* g = &p->groups.back();
  if (tensor_cores && g->n_gathers > 0 &&
      (g->n_gathers == kMaxGridY || (g->kv_rows * row_bytes + seq_bytes) > kMaxCopyBytes)) {
    p->groups.push_back(Group{p->tiles.size(), 0, p->gathers.size(), 0, 0, 0});
    g = &p->groups.back();
  }
  return g;
}

cudaError_t pack(const AttentionBatch& b, const size_t* which, size_t n, bool tensor_cores, Packed* p) {
  const size_t row_bytes = 2 * b.n_kv_heads * b.head_dim * 2;  // bf16 K and V per cache row
  p->groups.assign(1, Group{});
  for (size_t j = 0; j < n; ++j) {
    const size_t i = which[j];
    if (i >= b.n_seqs || !attention_prefill_batch_applies(b, i, tensor_cores)) return cudaErrorInvalidValue;
    const AttentionBatchSeq& s = b.seqs[i];
    const size_t n_blocks = (s.kv_len + b.block_size - 1) / b.block_size;
    if (s.kv_len > kMaxPacked || p->tables.size() + n_blocks > kMaxPacked) return cudaErrorInvalidValue;
    Group* g = group_for(p, s.kv_len * row_bytes, row_bytes, tensor_cores);
    const auto table = static_cast<unsigned>(p->tables.size());
    p->tables.insert(p->tables.end(), s.block_table, s.block_table + n_blocks);
    for (size_t t0 = 0; t0 < s.n_q_tokens; t0 += detail::kPrefillTileRows) {
      p->tiles.push_back(PrefillTile{s.q_offset, s.out_offset, g->kv_rows, static_cast<unsigned>(s.kv_len),
                                     static_cast<unsigned>(s.n_q_tokens), table, static_cast<unsigned>(t0)});
      g->n_tiles += 1;
    }
    if (tensor_cores) p->gathers.push_back(PrefillGather{g->kv_rows, static_cast<unsigned>(s.kv_len), table});
    g->n_gathers += tensor_cores ? 1 : 0;
    g->kv_rows += s.kv_len;
    g->max_kv_len = std::max(g->max_kv_len, s.kv_len);
  }
  if (p->tiles.size() > detail::kMaxGridX) return cudaErrorInvalidValue;
  // Costliest tiles first, so the long causal tails do not start last (each tile's math is the
  // same in any order).
  for (const Group& g : p->groups) {
    const auto first = p->tiles.begin() + static_cast<long>(g.first_tile);
    std::stable_sort(first, first + static_cast<long>(g.n_tiles),
                     [](const PrefillTile& a, const PrefillTile& c) { return tile_keys(a) > tile_keys(c); });
  }
  return cudaSuccess;
}

// tiles, then gathers, then tables: one host array for one upload.
std::vector<unsigned char> serialize(const Packed& p, size_t* gathers_at, size_t* tables_at) {
  const size_t tile_bytes = p.tiles.size() * sizeof(PrefillTile);
  const size_t gather_bytes = p.gathers.size() * sizeof(PrefillGather);
  *gathers_at = tile_bytes;
  *tables_at = tile_bytes + gather_bytes;
  std::vector<unsigned char> bytes(*tables_at + p.tables.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), p.tiles.data(), tile_bytes);
  if (gather_bytes > 0) std::memcpy(bytes.data() + *gathers_at, p.gathers.data(), gather_bytes);
  std::memcpy(bytes.data() + *tables_at, p.tables.data(), p.tables.size() * sizeof(int32_t));
  return bytes;
}

}  // namespace

bool attention_prefill_batch_applies(const AttentionBatch& b, size_t i, bool tensor_cores) {
  if (b.seqs == nullptr || i >= b.n_seqs || b.seqs[i].n_q_tokens == 0 || b.q == nullptr || b.out == nullptr) {
    return false;
  }
  const cpu::AttentionShape s = cpu::batch_seq_shape(b, i);
  const cpu::KvPages kv = cpu::batch_seq_pages(b, i);
  const float* q = b.q + b.seqs[i].q_offset;
  const float* out = b.out + b.seqs[i].out_offset;
  return tensor_cores ? attention_prefill_tc_applies(s, q, kv, out) : attention_prefill_applies(s, q, kv, out);
}

cudaError_t attention_prefill_batch(const AttentionBatch& b, const size_t* which, size_t n, bool tensor_cores,
                                    const DeviceUpload& upload, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (which == nullptr || !upload) return cudaErrorInvalidValue;
  Packed p;
  if (const cudaError_t e = pack(b, which, n, tensor_cores, &p); e != cudaSuccess) return e;
  size_t gathers_at = 0, tables_at = 0;
  const std::vector<unsigned char> bytes = serialize(p, &gathers_at, &tables_at);
  const auto* dev = static_cast<const unsigned char*>(upload(bytes.data(), bytes.size()));
  if (dev == nullptr) return cudaErrorMemoryAllocation;

  detail::PrefillBatchWork w{};
  w.shape = cpu::AttentionShape{0,
                                0,
                                b.n_heads,
                                b.n_kv_heads,
                                b.head_dim,
                                b.n_heads * b.q_head_stride,
                                b.q_head_stride,
                                b.kv_row_stride,
                                b.n_heads * b.head_dim};
  w.pools = KvPages{b.k_pool, b.v_pool, nullptr, b.block_size, b.k_type, b.v_type};
  w.q = b.q;
  w.out = b.out;
  w.scale = b.scale;
  w.tables = reinterpret_cast<const int32_t*>(dev + tables_at);
  const auto* tiles = reinterpret_cast<const PrefillTile*>(dev);
  const auto* gathers = reinterpret_cast<const PrefillGather*>(dev + gathers_at);
  for (const Group& g : p.groups) {
    w.tiles = tiles + g.first_tile;
    w.n_tiles = g.n_tiles;
    const cudaError_t e = tensor_cores ? detail::launch_prefill_tc_batch(w, gathers + g.first_gather, g.n_gathers,
                                                                         g.kv_rows, g.max_kv_len, stream)
                                       : detail::launch_prefill_batch(w, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t attention_batch(const AttentionBatch& b, bool tensor_cores, bool decode_batched,
                            const DeviceUpload& prefill, const DeviceUpload& decode, std::vector<size_t>* rest,
                            cudaStream_t stream) {
  std::vector<size_t> tiled, one_token;
  std::vector<AttentionBatchSeq> rows;
  rest->clear();
  decode_batched = decode_batched && attention_decode_batch_applies(b);
  for (size_t i = 0; i < b.n_seqs; ++i) {
    const size_t n_q = b.seqs[i].n_q_tokens;
    // A shape the tc kernel refuses may still take the f32 tiled one: attention_causal picks it.
    if (n_q >= kAttentionPrefillMinTokens && attention_prefill_batch_applies(b, i, tensor_cores)) {
      tiled.push_back(i);
    } else if (n_q == 1 && decode_batched) {
      one_token.push_back(i);
      rows.push_back(b.seqs[i]);
    } else {
      rest->push_back(i);
    }
  }
  if (rows.size() < 2) {
    rest->insert(rest->end(), one_token.begin(), one_token.end());
    rows.clear();
  }
  if (const cudaError_t e = attention_prefill_batch(b, tiled.data(), tiled.size(), tensor_cores, prefill, stream);
      e != cudaSuccess) {
    return e;
  }
  if (rows.empty()) return cudaSuccess;
  AttentionBatch d = b;
  d.seqs = rows.data();
  d.n_seqs = rows.size();
  return attention_decode_batch(d, decode, stream);
}

}  // namespace ds::cuda
