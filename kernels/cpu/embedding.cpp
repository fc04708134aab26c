#include "kernels/cpu/embedding.h"

#include <string>

#include "common/error.h"

namespace ds::cpu {

void embed_rows(const WeightView& table, const int32_t* ids, size_t n_ids, float* out) {
  for (size_t t = 0; t < n_ids; ++t) {
    if (ids[t] < 0 || static_cast<size_t>(ids[t]) >= table.rows) {
      throw FormatError("token id " + std::to_string(ids[t]) + " outside the embedding table of " +
                        std::to_string(table.rows) + " rows");
    }
    weight_row(table, static_cast<size_t>(ids[t]), out + t * table.cols);
  }
}

}  // namespace ds::cpu
