// A pipeline step's hidden rows into and out of a stage's device, per the StepInput / StepOutput
// hand-off contract (worker/stage_model.h): the previous stage's rows may still be landing (a
// signal to wait on, by the device or the host), and this stage's rows may go straight into the
// next stage's shared-memory slot and land after forward() returned. Every model file uses this
// rather than its own copy of the rules.
#pragma once

#include <cstddef>

#include "worker/backend.h"
#include "worker/stage_model.h"

namespace ds {

class StageTransport {
 public:
  // First thing of every step: the last step's deferred output may still be on its way, and
  // nothing of this step may be queued or staged before it is done (normally long done: the next
  // stage waited for it). Its errors, if any, surface here.
  void begin_step(Backend& be) {
    if (!output_in_flight_) return;
    output_in_flight_ = false;
    be.synchronize();
  }

  // A stage after the first: the previous stage's n floats into `x` (device), once they landed.
  void receive(Backend& be, const StepInput& in, float* x, size_t n) {
    if (in.hidden_ready && in.hidden_ready_on_host) {
      in.hidden_ready.wait();
    } else if (in.hidden_ready) {
      be.wait_host_signal(in.hidden_ready);
    }
    be.upload(x, in.hidden, n);
  }

  // A stage before the last: `x`'s n floats to the next stage, into StepInput::hidden_out when
  // given (deferred when it also carries a landing signal) or into StepOutput::hidden.
  void send(Backend& be, const StepInput& in, const float* x, size_t n, StepOutput* out) {
    if (in.hidden_out != nullptr && in.hidden_out_ready) {
      be.download_signalled(in.hidden_out, x, n, in.hidden_out_ready);
      out->hidden_deferred = output_in_flight_ = true;
      return;
    }
    float* dst = in.hidden_out;
    if (dst == nullptr) {
      out->hidden.resize(n);
      dst = out->hidden.data();
    }
    be.download(dst, x, n);
  }

 private:
  bool output_in_flight_ = false;  // the last step returned before its rows landed
};

}  // namespace ds
