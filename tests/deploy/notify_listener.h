// A stand-in for systemd's notification socket in tests: binds an AF_UNIX datagram socket
// (filesystem path or abstract name) and reads back what sd_notify-style senders wrote.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ds::test {

class NotifyListener {
 public:
  // `abstract`: bind "@name" in the abstract namespace instead of a file under $TMPDIR.
  explicit NotifyListener(bool abstract);
  ~NotifyListener();
  NotifyListener(const NotifyListener&) = delete;
  NotifyListener& operator=(const NotifyListener&) = delete;

  // The value for $NOTIFY_SOCKET ("/path" or "@name").
  const std::string& address() const { return address_; }
  // One datagram, or "" when none arrived within `timeout`.
  std::string receive(std::chrono::milliseconds timeout);
  // Every datagram until `timeout` passes with none arriving (or `total` elapses).
  std::vector<std::string> receive_all(std::chrono::milliseconds quiet, std::chrono::milliseconds total);

 private:
  int fd_ = -1;
  std::string address_;
  std::string path_;  // file to unlink (path sockets only)
};

}  // namespace ds::test
