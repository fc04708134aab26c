// sd_notify protocol (see systemd_notify.h), implemented directly instead of through
// libsystemd: the protocol is one datagram on an AF_UNIX socket and a stable, documented
// interface, so a second code path (and a runtime dependency that minimal GPU images often
// lack) would buy nothing, and the tests exercise exactly the code that ships.
// This file is the only place that reads $NOTIFY_SOCKET / $WATCHDOG_USEC / $WATCHDOG_PID.
#include "common/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace ds {
namespace {

// Fills `addr` from $NOTIFY_SOCKET: "/path" or "@abstract" (leading NUL on the wire).
// Returns the address length, or 0 when the variable is unset or unusable (e.g. the
// "vsock:" form of VM guests, which no deltaserve deployment uses).
socklen_t notify_address(sockaddr_un* addr) {
  const char* env = std::getenv("NOTIFY_SOCKET");
  if (env == nullptr || (env[0] != '/' && env[0] != '@')) return 0;
  const size_t len = std::strlen(env);
  if (len < 2 || len > sizeof(addr->sun_path) - (env[0] == '/' ? 1 : 0)) return 0;
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, env, len);
  if (env[0] == '@') {
    addr->sun_path[0] = '\0';  // abstract namespace: the length, not a NUL, ends the name
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  }
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + 1);
}

// One status line: a newline inside it would start a new (forged) assignment.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

template <typename T>
bool parse_env_number(const char* name, T* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  const char* end = v + std::strlen(v);
  const auto [ptr, ec] = std::from_chars(v, end, *out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

bool notify_raw(const std::string& message) {
  sockaddr_un addr{};
  const socklen_t addr_len = notify_address(&addr);
  if (addr_len == 0 || message.empty()) return false;
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // systemd learns the sender's pid from SO_PASSCRED on its side; nothing extra to attach.
  const ssize_t sent =
      ::sendto(fd, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr), addr_len);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return sent == static_cast<ssize_t>(message.size());
}

bool notify_ready(const std::string& status) {
  return notify_raw(status.empty() ? "READY=1" : "READY=1\nSTATUS=" + one_line(status));
}

bool notify_status(const std::string& text) {
  return notify_raw("STATUS=" + one_line(text));
}

bool notify_watchdog() {
  return notify_raw("WATCHDOG=1");
}

bool notify_stopping() {
  return notify_raw("STOPPING=1");
}

std::chrono::microseconds watchdog_interval() {
  uint64_t usec = 0;
  if (!parse_env_number("WATCHDOG_USEC", &usec) || usec == 0) return std::chrono::microseconds(0);
  pid_t pid = 0;
  if (std::getenv("WATCHDOG_PID") != nullptr && (!parse_env_number("WATCHDOG_PID", &pid) || pid != ::getpid())) {
    return std::chrono::microseconds(0);
  }
  constexpr uint64_t kMax = 1ull << 62;  // nonsense values must not wrap to a negative interval
  return std::chrono::microseconds(static_cast<int64_t>(usec < kMax ? usec : kMax));
}

}  // namespace ds
