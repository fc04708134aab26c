// The worker's side of running under systemd (Type=notify, WatchdogSec=): status lines for
// `systemctl status`, READY=1 once the slice is loaded and Ready went to the coordinator,
// WATCHDOG=1 keep-alives from the event loop and STOPPING=1 on the way out. All of it is a
// no-op outside systemd.
//
// The keep-alives come from the thread that executes steps, never from the heartbeat
// thread: a step that hangs (a wedged GPU, a deadlock) then stops them and systemd kills
// and restarts the worker, while the heartbeat alone would keep it looking alive.
#pragma once

#include <cstdint>
#include <string>

namespace ds {

class ServiceNotifier {
 public:
  ServiceNotifier();  // reads the watchdog interval once

  void waiting_for_coordinator(const std::string& endpoint);
  void loading(uint32_t first_layer, uint32_t last_layer);
  void ready(uint32_t first_layer, uint32_t last_layer, int64_t load_ms);
  void load_failed(const std::string& why);
  // Sends WATCHDOG=1 when half the interval has passed since the last one. Cheap: call it
  // on every loop turn and after every handled message.
  void tick();
  void stopping();

  int64_t watchdog_period_ms() const { return period_ms_; }

 private:
  int64_t period_ms_ = 0;  // 0: no watchdog
  int64_t next_ping_ms_ = 0;
};

}  // namespace ds
