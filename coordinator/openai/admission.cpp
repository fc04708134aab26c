#include "coordinator/openai/admission.h"

namespace ds::openai {

std::shared_ptr<void> AdmissionGate::try_enter(uint32_t engine_waiting, uint32_t max_waiting) {
  const uint32_t mine = entering_.fetch_add(1) + 1;  // this request and those before it
  if (max_waiting > 0 && uint64_t{mine} + engine_waiting > max_waiting) {
    entering_.fetch_sub(1);
    return nullptr;
  }
  // Non-null (the gate's address), so that a ticket tests true; dropping it leaves the count.
  return std::shared_ptr<void>(static_cast<void*>(this), [this](void*) { entering_.fetch_sub(1); });
}

DisconnectHook DeferredHook::make(const std::shared_ptr<DeferredHook>& self) {
  return [self] { self->client_left(); };
}

bool DeferredHook::wanted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !gone_;
}

void DeferredHook::set(DisconnectHook hook) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_) {
      hook_ = std::move(hook);
      return;
    }
  }
  if (hook) hook();
}

void DeferredHook::client_left() {
  DisconnectHook hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = true;
    hook = std::move(hook_);
    hook_ = nullptr;
  }
  if (hook) hook();
}

}  // namespace ds::openai
