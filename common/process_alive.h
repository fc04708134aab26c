// Whether a process still exists, for state another process left behind: a hidden-state ring's
// producer (worker/daemon/landing_watch.h), a killed server's MPS daemon
// (coordinator/engine/mps_daemon.h).
#pragma once

#include <signal.h>

#include <cerrno>
#include <cstdint>

namespace ds {

// kill(pid, 0). EPERM (a process of someone else) counts as alive, and so does pid <= 0 (unknown),
// so callers only ever act on a pid that is known to be gone.
inline bool process_alive(int64_t pid) {
  if (pid <= 0) return true;
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace ds
