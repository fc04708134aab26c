// A real deltaserve-worker under a fake systemd: the test starts it itself with
// $NOTIFY_SOCKET and $WATCHDOG_USEC in its environment only (as systemd would) and plays the
// coordinator with an engine in --external-workers mode. Checks the order of what systemd
// would see: status while loading, READY=1 only after the slice is loaded (and Ready reached
// the coordinator), WATCHDOG=1 keep-alives while serving, STOPPING=1 at exit.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/ipc/endpoints.h"
#include "coordinator/engine/engine.h"
#include "tests/deploy/notify_listener.h"
#include "tests/testutil/testutil.h"

extern char** environ;

namespace ds {
namespace {

using std::chrono::milliseconds;

// Index of the first message starting with `prefix`; -1 when none.
long find_prefix(const std::vector<std::string>& msgs, const std::string& prefix) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].rfind(prefix, 0) == 0) return static_cast<long>(i);
  }
  return -1;
}

// Starts rank 0 with this process's environment plus `extra_env`.
pid_t spawn_worker(const std::string& endpoint, const std::vector<std::string>& extra_env) {
  std::vector<std::string> args{std::string(DS_BIN_DIR) + "/deltaserve-worker", "--coordinator", endpoint, "--rank",
                                "0"};
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const std::string& e : extra_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) != 0) return 0;
  return pid;
}

TEST(WorkerNotify, ReadyAfterLoadThenWatchdogThenStopping) {
  test::NotifyListener listener(true);
  EngineOptions o;
  o.model_path = test::tiny_model_path();
  o.external_workers = true;
  o.control_endpoint = ipc::make_ipc_control_endpoint();
  o.startup_timeout_ms = 30000;
  // 200 ms watchdog: a keep-alive every ~100 ms.
  const pid_t worker =
      spawn_worker(o.control_endpoint, {"NOTIFY_SOCKET=" + listener.address(), "WATCHDOG_USEC=200000"});
  ASSERT_GT(worker, 0);
  {
    PipelineEngine engine(o);
    engine.start();  // returns once the worker's Ready arrived

    // What the worker sent up to now, plus a second of serving.
    const std::vector<std::string> msgs = listener.receive_all(milliseconds(1000), milliseconds(1000));
    const long loading = find_prefix(msgs, "STATUS=loading layers [0, ");
    const long ready = find_prefix(msgs, "READY=1\nSTATUS=serving layers [0, ");
    EXPECT_EQ(find_prefix(msgs, "STATUS=waiting for the coordinator"), 0);
    ASSERT_GE(loading, 0) << "no loading status";
    ASSERT_GT(ready, loading) << "READY=1 missing or before the load";
    EXPECT_GE(std::count(msgs.begin() + ready, msgs.end(), std::string("WATCHDOG=1")), 4)
        << "watchdog keep-alives missing while serving";
    engine.shutdown();  // Shutdown -> the worker leaves its loop
  }
  const std::vector<std::string> tail = listener.receive_all(milliseconds(1000), milliseconds(5000));
  EXPECT_GE(find_prefix(tail, "STOPPING=1"), 0) << "no STOPPING=1 at exit";
  int status = 0;
  ASSERT_EQ(waitpid(worker, &status, 0), worker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ipc::remove_ipc_endpoint_dir(o.control_endpoint);
}

}  // namespace
}  // namespace ds
