// Worker notifications to systemd (see service_notifier.h).
#include "worker/daemon/service_notifier.h"

#include <algorithm>
#include <chrono>

#include "common/systemd_notify.h"
#include "worker/daemon/heartbeat.h"  // steady_now_ms

namespace ds {
namespace {

std::string layer_range(uint32_t first, uint32_t last) {
  return "layers [" + std::to_string(first) + ", " + std::to_string(last) + ")";
}

}  // namespace

ServiceNotifier::ServiceNotifier() {
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(watchdog_interval());
  // Half the interval, as systemd recommends; at least 1 ms so a tiny test interval still pings.
  if (interval.count() > 0) period_ms_ = std::max<int64_t>(1, interval.count() / 2);
}

void ServiceNotifier::waiting_for_coordinator(const std::string& endpoint) {
  notify_status("waiting for the coordinator at " + endpoint);
}

void ServiceNotifier::loading(uint32_t first_layer, uint32_t last_layer) {
  notify_status("loading " + layer_range(first_layer, last_layer));
}

void ServiceNotifier::ready(uint32_t first_layer, uint32_t last_layer, int64_t load_ms) {
  notify_ready("serving " + layer_range(first_layer, last_layer) + " (loaded in " + std::to_string(load_ms) + " ms)");
}

// Not READY: systemd keeps the unit "activating" with this status, and the coordinator,
// which got the reason in Ready, decides what happens next.
void ServiceNotifier::load_failed(const std::string& why) {
  notify_status("load failed: " + why);
}

void ServiceNotifier::tick() {
  if (period_ms_ == 0) return;
  const int64_t now = steady_now_ms();
  if (now < next_ping_ms_) return;
  notify_watchdog();
  next_ping_ms_ = now + period_ms_;
}

void ServiceNotifier::stopping() {
  notify_stopping();
}

}  // namespace ds
