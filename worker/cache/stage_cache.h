// Per-sequence bookkeeping of one stage on top of its pools (KvCache, StatePool): which state
// slot and which KV blocks each live sequence uses, how many positions it holds, and which
// position each snapshot buffer holds. Two modes (CacheGeometry::managed()):
//  - managed: the scheduler decides slots, block tables and snapshots (SeqCache per row); this
//    class checks the plan against the pools and applies it. Pools are sized once.
//  - self-managed: sequences are placed here by seq id from free lists; the pools grow on
//    demand. For tools and tests that run without a scheduler.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/stage_types.h"  // CacheShapes
#include "worker/cache/kv_cache.h"
#include "worker/cache/state_pool.h"
#include "worker/stage_model.h"

namespace ds {

class Backend;

class StageCache {
 public:
  struct Seq {
    uint32_t slot = 0;
    std::vector<int32_t> table;  // pool block of rows [j*block_size, (j+1)*block_size)
    uint32_t n_past = 0;         // positions computed by the main stack
    uint32_t mtp_n_past = 0;     // positions in the MTP block's cache
    // Speculation: GDN captures of the last verify step; capture j holds capture_first + j positions.
    uint32_t capture_first = 0;
    uint32_t n_captures = 0;
    // Vision input: the sequence's images as its last step named them (SeqStep::images), so
    // the MTP rows after it take their M-RoPE positions too. Empty for text.
    std::vector<ImageSpan> images;
  };

  StageCache(Backend& backend, const CacheGeometry& geometry, const CacheShapes& shapes);

  // Checks the memory side of a step (placement, positions) before anything changes.
  // Throws ConfigError.
  void check_step(const StepInput& in) const;
  // Applies a checked step: tables, slot set-up (zero state or a snapshot). Returns the
  // sequences in `in.seqs` order (valid until the next call that adds or drops sequences).
  std::vector<Seq*> begin_step(const StepInput& in);
  // After the compute: positions advance and requested snapshots are saved.
  void end_step(const StepInput& in);
  // The sequence an MTP step of n tokens at start_pos continues. Throws ConfigError.
  Seq& begin_mtp(uint64_t seq_id, uint32_t start_pos, size_t n_tokens);

  void drop(uint64_t seq_id);
  void drop_all();

  // Pool rows (block * block_size + offset) of positions [start_pos, start_pos + n), appended.
  void append_pool_rows(const Seq& s, uint32_t start_pos, size_t n, std::vector<uint32_t>* rows) const;

  const CacheGeometry& geometry() const { return geo_; }
  KvCache& kv() { return kv_; }
  StatePool& states() { return states_; }

 private:
  void check_managed_row(const SeqStep& step, const SeqCache& c) const;
  void check_self_managed_row(const SeqStep& step) const;
  void check_continues(const SeqStep& step, const Seq& s) const;  // start_pos vs n_past, rewind
  void apply_speculation(const SeqStep& step, Seq& s);            // rewind, capture bookkeeping
  Seq& place_managed(const SeqStep& step, const SeqCache& c);
  Seq& place_self_managed(const SeqStep& step);
  void cover(Seq& s, size_t rows);  // self-managed: blocks up to `rows` positions
  uint32_t take_slot();
  void free_self_managed(Seq& s);

  CacheGeometry geo_;
  KvCache kv_;
  StatePool states_;
  bool stateless_;  // no recurrent layers: a new sequence may start after a shared prefix
  std::unordered_map<uint64_t, Seq> seqs_;
  // managed: which live sequence holds each slot, and the position each snapshot holds (-1: none)
  std::unordered_map<uint32_t, uint64_t> slot_owner_;
  std::vector<int64_t> snapshot_pos_;
  // self-managed free lists; ids up to the high-water marks exist in the pools
  std::vector<int32_t> free_blocks_;
  std::vector<uint32_t> free_slots_;
  uint32_t blocks_used_ = 0, slots_used_ = 0;
};

}  // namespace ds
