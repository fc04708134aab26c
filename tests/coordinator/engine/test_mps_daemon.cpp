// The private CUDA MPS daemon (coordinator/engine/mps_daemon.h) without a GPU: when the engine
// wants one, PATH lookup, and the daemon's life cycle against a fake nvidia-cuda-mps-control
// that records how it was called (arguments, the two MPS directories, what came on stdin).
// Also the workers' environment (supervisor.h environment_with).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "coordinator/engine/mps_daemon.h"
#include "coordinator/engine/supervisor.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

TEST(MpsDaemon, WantedOnlyForLocalCudaWorkersSharingAGpu) {
  EXPECT_TRUE(wants_private_mps("auto", "cuda", false, {0, 0}, 2, false));
  EXPECT_TRUE(wants_private_mps("auto", "cuda", false, {1, 0, 1}, 3, false)) << "ranks 0 and 2 share GPU 1";
  EXPECT_FALSE(wants_private_mps("auto", "cuda", false, {0, 0}, 2, true)) << "a daemon already serves us";
  EXPECT_TRUE(wants_private_mps("on", "cuda", false, {0, 0}, 2, true)) << "on: our own in any case";
  EXPECT_FALSE(wants_private_mps("off", "cuda", false, {0, 0}, 2, false));
  EXPECT_FALSE(wants_private_mps("auto", "cuda", false, {}, 2, false)) << "GPUs 0 and 1";
  EXPECT_FALSE(wants_private_mps("on", "cuda", false, {0, 1}, 2, false)) << "nothing is shared";
  EXPECT_FALSE(wants_private_mps("auto", "cpu", false, {0, 0}, 2, false));
  EXPECT_FALSE(wants_private_mps("auto", "cuda", true, {0, 0}, 2, false)) << "external workers: not ours to start";
}

TEST(MpsDaemon, FindsExecutablesThroughPath) {
  const std::string sh = find_executable("sh");
  ASSERT_FALSE(sh.empty());
  EXPECT_EQ(access(sh.c_str(), X_OK), 0);
  EXPECT_TRUE(find_executable("no-such-program-deltaserve").empty());
  EXPECT_EQ(find_executable(sh), sh) << "a path is taken as it is";
  EXPECT_TRUE(find_executable("/no/such/dir/program").empty());
}

class FakeMpsControl : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ds-mps-test-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    log_ = (root_ / "calls.log").string();
    script_ = (root_ / "fake-mps-control").string();
    dir_ = (root_ / "daemon").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  // A control program that logs its arguments, the MPS directories and stdin, then exits with `rc`.
  void write_script(int rc) {
    std::ofstream f(script_);
    f << "#!/bin/sh\n"
      << "echo \"args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY\" >> " << log_ << "\n"
      << "if [ \"$1\" != \"-d\" ]; then read line; echo \"stdin=$line\" >> " << log_ << "; fi\n"
      << "exit " << rc << "\n";
    f.close();
    fs::permissions(script_, fs::perms::owner_all);
  }
  // What the real daemon creates once it runs: the control socket in its pipe directory.
  void bind_control_socket(const std::string& dir = {}) {
    const std::string daemon_dir = dir.empty() ? dir_ : dir;
    fs::create_directories(daemon_dir + "/pipe");
    socket_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(socket_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    const std::string path = daemon_dir + "/pipe/control";
    ASSERT_LT(path.size(), sizeof addr.sun_path);
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(::bind(socket_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }
  std::string calls() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  fs::path root_;
  std::string log_, script_, dir_;
  int socket_ = -1;
};

TEST_F(FakeMpsControl, StartsWithPrivateDirectoriesAndQuitsOnStop) {
  write_script(0);
  bind_control_socket();
  std::string why;
  std::unique_ptr<MpsDaemon> d = MpsDaemon::start(script_, dir_, 1000, &why);
  ASSERT_NE(d, nullptr) << why;
  const std::string pipe = dir_ + "/pipe", log = dir_ + "/log";
  EXPECT_NE(calls().find("args=-d pipe=" + pipe + " log=" + log), std::string::npos) << calls();
  EXPECT_TRUE(fs::is_directory(log));
  const std::vector<std::string> env = d->worker_env();
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0], "CUDA_MPS_PIPE_DIRECTORY=" + pipe);
  EXPECT_EQ(env[1], "CUDA_MPS_LOG_DIRECTORY=" + log);
  d->stop();
  EXPECT_NE(calls().find("args= pipe=" + pipe + " log=" + log), std::string::npos) << calls();
  EXPECT_NE(calls().find("stdin=quit"), std::string::npos) << calls();
  EXPECT_FALSE(fs::exists(dir_)) << "its directories are removed";
  d->stop();  // idempotent: no second quit
  size_t quits = 0;
  for (size_t at = calls().find("stdin=quit"); at != std::string::npos; at = calls().find("stdin=quit", at + 1))
    ++quits;
  EXPECT_EQ(quits, 1u);
  ::close(socket_);
}

// A pid that no longer exists: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

// A server SIGKILLed with its daemon running leaves deltaserve-mps-<pid>: the next start quits
// that daemon (when its socket is there) and removes the directory; live servers' daemons, this
// process's own and names that are not ours stay.
TEST_F(FakeMpsControl, LeftoverDaemonsOfDeadServersAreQuitAndRemoved) {
  write_script(0);
  const std::string parent = root_.string();
  const std::string with_socket = private_mps_dir(parent, dead_pid());
  const std::string without_socket = private_mps_dir(parent, dead_pid());
  const std::string ours = private_mps_dir(parent, getpid());
  const std::string live = private_mps_dir(parent, getppid());
  bind_control_socket(with_socket);
  fs::create_directories(without_socket + "/pipe");
  for (const std::string& d : {ours, live, parent + "/deltaserve-mps-x1", parent + "/deltaserve-mps-"}) {
    fs::create_directories(d + "/pipe");
  }
  std::ofstream(parent + "/deltaserve-mps-1999999999") << "a file, not a directory";
  EXPECT_EQ(reap_stale_mps_daemons(parent, script_), 2u);
  EXPECT_FALSE(fs::exists(with_socket));
  EXPECT_FALSE(fs::exists(without_socket));
  EXPECT_NE(calls().find("args= pipe=" + with_socket + "/pipe log=" + with_socket + "/log"), std::string::npos)
      << calls();
  EXPECT_EQ(calls().find(without_socket), std::string::npos) << "no socket, no daemon to quit: " << calls();
  for (const std::string& d : {ours, live, parent + "/deltaserve-mps-x1", parent + "/deltaserve-mps-"}) {
    EXPECT_TRUE(fs::exists(d)) << d;
  }
  EXPECT_TRUE(fs::exists(parent + "/deltaserve-mps-1999999999"));
  EXPECT_EQ(reap_stale_mps_daemons(parent, script_), 0u) << "nothing left to reap";
  EXPECT_EQ(reap_stale_mps_daemons(parent + "/no-such-dir", script_), 0u);
  ::close(socket_);
}

TEST_F(FakeMpsControl, FailuresAreReportedAndLeaveNothingBehind) {
  write_script(3);
  std::string why;
  EXPECT_EQ(MpsDaemon::start(script_, dir_, 200, &why), nullptr);
  EXPECT_NE(why.find("exited with 3"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(dir_));

  write_script(0);  // starts, but no control socket ever appears
  why.clear();
  EXPECT_EQ(MpsDaemon::start(script_, dir_, 100, &why), nullptr);
  EXPECT_NE(why.find("no control socket"), std::string::npos) << why;
  EXPECT_NE(calls().find("stdin=quit"), std::string::npos) << "a daemon that did start is told to quit";
  EXPECT_FALSE(fs::exists(dir_));

  why.clear();
  EXPECT_EQ(MpsDaemon::start("", dir_, 100, &why), nullptr);
  EXPECT_NE(why.find("not found"), std::string::npos) << why;
}

TEST(WorkerEnvironment, ExtraEntriesAddOrReplace) {
  ASSERT_EQ(setenv("DS_TEST_ENV_A", "old", 1), 0);
  const std::vector<std::string> env = environment_with({"DS_TEST_ENV_A=new", "DS_TEST_ENV_B=b"});
  size_t a = 0, b = 0, path = 0;
  for (const std::string& e : env) {
    a += e.rfind("DS_TEST_ENV_A=", 0) == 0 ? 1 : 0;
    b += e == "DS_TEST_ENV_B=b" ? 1 : 0;
    path += e.rfind("PATH=", 0) == 0 ? 1 : 0;
    if (e.rfind("DS_TEST_ENV_A=", 0) == 0) {
      EXPECT_EQ(e, "DS_TEST_ENV_A=new");
    }
  }
  EXPECT_EQ(a, 1u) << "replaced, not duplicated";
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(path, std::getenv("PATH") != nullptr ? 1u : 0u) << "the rest is inherited";
  unsetenv("DS_TEST_ENV_A");
}

}  // namespace
}  // namespace ds
