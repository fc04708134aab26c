// NotifyListener (see notify_listener.h).
#include "tests/deploy/notify_listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ds::test {

NotifyListener::NotifyListener(bool abstract) {
  const std::string name =
      "ds-notify-test-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket() failed");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socklen_t len = 0;
  if (abstract) {
    address_ = "@" + name;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] stays NUL
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  } else {
    path_ = (std::filesystem::temp_directory_path() / name).string();
    address_ = path_;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path_.size() + 1);
  }
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    ::close(fd_);
    throw std::runtime_error("bind() failed for " + address_);
  }
}

NotifyListener::~NotifyListener() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

std::string NotifyListener::receive(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
  char buf[4096];
  const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::vector<std::string> NotifyListener::receive_all(std::chrono::milliseconds quiet, std::chrono::milliseconds total) {
  std::vector<std::string> out;
  const auto end = std::chrono::steady_clock::now() + total;
  while (std::chrono::steady_clock::now() < end) {
    std::string msg = receive(quiet);
    if (msg.empty()) break;
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace ds::test
