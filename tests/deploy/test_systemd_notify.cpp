// common/systemd_notify: the datagrams on the wire, both address forms, the no-op outside
// systemd, and the watchdog interval rules ($WATCHDOG_PID of another process = no watchdog).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "common/systemd_notify.h"
#include "tests/deploy/notify_listener.h"

namespace ds {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kWait{2000};

// Points $NOTIFY_SOCKET at a listener for the test's duration.
class NotifyTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { ::setenv("NOTIFY_SOCKET", listener_.address().c_str(), 1); }
  void TearDown() override { ::unsetenv("NOTIFY_SOCKET"); }
  test::NotifyListener listener_{GetParam()};
};

TEST_P(NotifyTest, SendsEachMessageAsOneDatagram) {
  EXPECT_TRUE(notify_status("loading layers [0, 4)"));
  EXPECT_EQ(listener_.receive(kWait), "STATUS=loading layers [0, 4)");
  EXPECT_TRUE(notify_ready());
  EXPECT_EQ(listener_.receive(kWait), "READY=1");
  EXPECT_TRUE(notify_ready("serving"));
  EXPECT_EQ(listener_.receive(kWait), "READY=1\nSTATUS=serving");
  EXPECT_TRUE(notify_watchdog());
  EXPECT_EQ(listener_.receive(kWait), "WATCHDOG=1");
  EXPECT_TRUE(notify_stopping());
  EXPECT_EQ(listener_.receive(kWait), "STOPPING=1");
}

TEST_P(NotifyTest, StatusCannotInjectAssignments) {
  EXPECT_TRUE(notify_status("load failed: bad\nREADY=1"));
  EXPECT_EQ(listener_.receive(kWait), "STATUS=load failed: bad READY=1");
}

INSTANTIATE_TEST_SUITE_P(AddressForms, NotifyTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Abstract" : "Path"; });

TEST(SystemdNotify, NoOpOutsideSystemd) {
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(notify_ready());
  EXPECT_FALSE(notify_watchdog());
  ::setenv("NOTIFY_SOCKET", "relative/path", 1);  // neither "/" nor "@": ignored
  EXPECT_FALSE(notify_stopping());
  ::setenv("NOTIFY_SOCKET", ("/" + std::string(200, 'x')).c_str(), 1);  // longer than sun_path
  EXPECT_FALSE(notify_status("x"));
  ::unsetenv("NOTIFY_SOCKET");
}

TEST(SystemdNotify, NoListenerIsNotFatal) {
  ::setenv("NOTIFY_SOCKET", "@ds-notify-test-nobody-listens", 1);
  EXPECT_FALSE(notify_watchdog());
  ::unsetenv("NOTIFY_SOCKET");
}

TEST(SystemdNotify, WatchdogInterval) {
  ::unsetenv("WATCHDOG_PID");
  ::unsetenv("WATCHDOG_USEC");
  EXPECT_EQ(watchdog_interval().count(), 0);
  ::setenv("WATCHDOG_USEC", "30000000", 1);
  EXPECT_EQ(watchdog_interval().count(), 30000000);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  EXPECT_EQ(watchdog_interval().count(), 30000000);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);  // meant for a parent
  EXPECT_EQ(watchdog_interval().count(), 0);
  ::unsetenv("WATCHDOG_PID");
  ::setenv("WATCHDOG_USEC", "12abc", 1);
  EXPECT_EQ(watchdog_interval().count(), 0);
  ::setenv("WATCHDOG_USEC", "0", 1);
  EXPECT_EQ(watchdog_interval().count(), 0);
  ::unsetenv("WATCHDOG_USEC");
}

}  // namespace
}  // namespace ds
