// The pool capacity workers report at Ready (Ready.kv_blocks, ...), checked and combined. Every
// worker holds the same KV block, state slot and snapshot ids (a step's placement is applied
// on every stage), so the pipeline can plan with no more than the smallest worker holds.
#pragma once

#include <cstdint>
#include <vector>

#include "common/ipc/protocol.h"  // v1::Ready
#include "common/stage_types.h"

namespace ds {

struct WorkerCapacity {
  uint32_t rank = 0;
  CacheGeometry pools;        // what the worker allocated (the KV types as Assign asked)
  uint64_t bytes = 0;         // what they take
  uint64_t budget_bytes = 0;  // the budget the worker sized them against
};

// A worker's Ready checked against its Assign (`asked`: upper bounds, or with `exact` the
// numbers it had to allocate). Throws std::runtime_error naming the rank and the field for a
// capacity no worker could honestly report: no KV blocks or state slots, a different block
// size, more than asked, fewer blocks than one max_context sequence needs (`min_blocks`), or,
// when exact, anything but the numbers asked.
WorkerCapacity ready_capacity(const ipc::v1::Ready& ready, const CacheGeometry& asked, bool exact, uint32_t min_blocks);

// The geometry every worker holds: the field-wise minimum. Throws std::invalid_argument when
// `workers` is empty or their block sizes differ.
CacheGeometry common_capacity(const std::vector<WorkerCapacity>& workers);

// An explicit KV block count (--kv-blocks) must fit every worker: throws std::runtime_error
// naming each worker that holds fewer (how many it holds, its budget) and how many were asked.
void require_kv_blocks(const std::vector<WorkerCapacity>& workers, uint32_t asked);

}  // namespace ds
