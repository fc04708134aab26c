// A pipeline step's hidden rows between the host and a stage's device, around
// StageModel::forward (worker/stage_model.h): the previous stage's rows may still be landing
// (a signal to wait on, by the device or by the host), and this stage's rows may go straight
// into the next stage's shared-memory slot and land after the step returned. The stage runner
// drives every step through this; in-process drivers (tests, tools) that chain stages use it
// too, so the rules exist once and no model file knows them.
#pragma once

#include <cstddef>
#include <vector>

#include "common/error.h"
#include "common/host_signal.h"
#include "worker/backend.h"
#include "worker/stage_model.h"

namespace ds {

// The host side of one step's hidden rows, [total_tokens, n_embd] floats each way.
struct HostRows {
  const float* in = nullptr;      // stage after the first: the previous stage's rows
  HostSignal in_ready;            // optional: `in` may still be landing until this is set
  bool in_ready_on_host = false;  // the host waits for in_ready, not the device (--early-handoff host)
  float* out = nullptr;           // stage before the last, optional: where this stage's rows go
  HostSignal out_ready;           // optional, with `out`: the rows may land after step() returned
};

class StageHandoff {
 public:
  explicit StageHandoff(size_t n_embd) : n_embd_(n_embd) {}

  // Runs `in` on `model` with its rows moved as `rows` says. A stage before the last puts its
  // rows into rows.out, else into *hidden. Returns true when they are still landing (a deferred
  // copy: rows.out_ready is set once they are in place).
  bool step(StageModel& model, const StepInput& in, const HostRows& rows, StepOutput* out,
            std::vector<float>* hidden = nullptr) {
    Backend& be = model.backend();
    // The last step's deferred copy may still be on its way, and nothing of this step may be
    // queued before it is done (normally long done: the next stage waited for it). Its errors,
    // if any, surface here.
    if (output_in_flight_) {
      output_in_flight_ = false;
      be.synchronize();
    }
    const size_t n = total_tokens(in) * n_embd_;
    if (!model.is_first()) {
      if (rows.in == nullptr) throw ConfigError("stage needs the previous stage's hidden states");
      if (rows.in_ready && rows.in_ready_on_host) {
        rows.in_ready.wait();
      } else if (rows.in_ready) {
        be.wait_host_signal(rows.in_ready);
      }
      be.upload(model.input_rows(total_tokens(in)), rows.in, n);
    }
    model.forward(in, out);
    if (model.is_last()) return false;
    if (rows.out != nullptr && rows.out_ready) {
      be.download_signalled(rows.out, model.output_rows(), n, rows.out_ready);
      return output_in_flight_ = true;
    }
    float* dst = rows.out;
    if (dst == nullptr) {
      if (hidden == nullptr) throw ConfigError("stage before the last needs somewhere to put its rows");
      hidden->resize(n);
      dst = hidden->data();
    }
    be.download(dst, model.output_rows(), n);
    return false;
  }

 private:
  static size_t total_tokens(const StepInput& in) {
    size_t t = 0;
    for (const SeqStep& s : in.seqs) t += s.n_tokens();
    return t;
  }

  size_t n_embd_;
  bool output_in_flight_ = false;  // the last step returned before its rows landed
};

}  // namespace ds
