// Worker pool capacity (see capacity.h).
#include "coordinator/engine/capacity.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/byte_size.h"

namespace ds {
namespace {

std::string rank_name(uint32_t rank) {
  return "worker rank " + std::to_string(rank);
}

void check_field(uint32_t rank, const char* field, uint64_t got, uint64_t lo, uint64_t hi, bool exact) {
  if (got < lo || got > hi) {
    const std::string want = exact      ? std::to_string(hi)
                             : lo == hi ? std::to_string(lo)
                                        : std::to_string(lo) + ".." + std::to_string(hi);
    throw std::runtime_error(rank_name(rank) + " reported " + field + " = " + std::to_string(got) +
                             " in Ready (expected " + want + ")");
  }
}

}  // namespace

WorkerCapacity ready_capacity(const ipc::v1::Ready& r, const CacheGeometry& asked, bool exact, uint32_t min_blocks) {
  WorkerCapacity w;
  w.rank = r.rank();
  // An exact request must come back as asked; a bounded one anywhere from the minimum a
  // worker accepts (one max_context sequence, one slot) up to the bound.
  const uint64_t lo_blocks = exact ? asked.num_blocks : std::clamp<uint32_t>(min_blocks, 1, asked.num_blocks);
  check_field(w.rank, "kv_block_size", r.kv_block_size(), asked.block_size, asked.block_size, true);
  check_field(w.rank, "kv_blocks", r.kv_blocks(), lo_blocks, asked.num_blocks, exact);
  check_field(w.rank, "state_slots", r.state_slots(), exact ? asked.max_seqs : 1, asked.max_seqs, exact);
  check_field(w.rank, "state_snapshots", r.state_snapshots(), exact ? asked.num_snapshots : 0, asked.num_snapshots,
              exact);
  w.pools.block_size = r.kv_block_size();
  w.pools.num_blocks = r.kv_blocks();
  w.pools.max_seqs = r.state_slots();
  w.pools.num_snapshots = r.state_snapshots();
  // The types were sent in Assign, not reported: a restarted worker is assigned these pools again.
  w.pools.k_type = asked.k_type;
  w.pools.v_type = asked.v_type;
  w.bytes = r.cache_bytes();
  w.budget_bytes = r.cache_budget_bytes();
  return w;
}

CacheGeometry common_capacity(const std::vector<WorkerCapacity>& workers) {
  if (workers.empty()) throw std::invalid_argument("no worker capacity to combine");
  CacheGeometry g = workers.front().pools;
  for (const WorkerCapacity& w : workers) {
    if (w.pools.block_size != g.block_size) throw std::invalid_argument("workers report different KV block sizes");
    g.num_blocks = std::min(g.num_blocks, w.pools.num_blocks);
    g.max_seqs = std::min(g.max_seqs, w.pools.max_seqs);
    g.num_snapshots = std::min(g.num_snapshots, w.pools.num_snapshots);
  }
  return g;
}

void require_kv_blocks(const std::vector<WorkerCapacity>& workers, uint32_t asked) {
  std::string short_of;
  for (const WorkerCapacity& w : workers) {
    if (w.pools.num_blocks >= asked) continue;
    short_of += (short_of.empty() ? "" : "; ") + rank_name(w.rank) + " can hold only " +
                std::to_string(w.pools.num_blocks) + " KV blocks (with " + std::to_string(w.pools.max_seqs) +
                " state slots and " + std::to_string(w.pools.num_snapshots) + " snapshots, in a memory budget of " +
                format_bytes(w.budget_bytes) + ")";
  }
  if (short_of.empty()) return;
  throw std::runtime_error(short_of + ", but " + std::to_string(asked) +
                           " KV blocks were asked for (--kv-blocks): lower --kv-blocks, --max-seqs or "
                           "--prefix-cache-snapshots, raise the workers' --memory-budget / --gpu-memory-fraction, "
                           "or add workers");
}

}  // namespace ds
