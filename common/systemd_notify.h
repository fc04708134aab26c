// Service-manager notifications (the sd_notify protocol): readiness, status text, watchdog
// keep-alives and stop announcements, sent as one datagram each to the AF_UNIX socket named
// by $NOTIFY_SOCKET. Every call is a cheap no-op when the process was not started by systemd
// (no $NOTIFY_SOCKET), so callers never need to check first. Thread-safe (no shared state).
#pragma once

#include <chrono>
#include <string>

namespace ds {

// READY=1: start-up is complete (systemd starts the watchdog and ordered units now). A
// non-empty `status` goes in the same datagram as STATUS=. Returns true when a datagram was
// sent; false when not under systemd or the send failed (never fatal: the caller goes on).
bool notify_ready(const std::string& status = "");
// STATUS=text: one line shown by `systemctl status` (newlines become spaces).
bool notify_status(const std::string& text);
// WATCHDOG=1: keep-alive; send at least every watchdog_interval() / 2.
bool notify_watchdog();
// STOPPING=1: the process is shutting down on purpose.
bool notify_stopping();

// The keep-alive deadline systemd expects (WatchdogSec=, passed as $WATCHDOG_USEC), or zero
// when no watchdog applies to this process ($WATCHDOG_PID names another process, e.g. a
// parent whose environment a child inherited).
std::chrono::microseconds watchdog_interval();

// Sends `message` (newline-separated KEY=VALUE assignments) verbatim. The building block of
// the functions above.
bool notify_raw(const std::string& message);

}  // namespace ds
