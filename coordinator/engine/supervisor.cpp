// Local supervisor (see supervisor.h).
#include "coordinator/engine/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "common/log.h"

namespace ds {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{5000};
// A worker that ran this long before dying gets the short back-off again.
constexpr std::chrono::seconds kHealthyUptime{10};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

LocalSupervisor::LocalSupervisor(std::string binary, uint32_t n_ranks, ArgsForRank args_for_rank,
                                 std::vector<std::string> extra_env)
    : binary_(std::move(binary)),
      extra_env_(std::move(extra_env)),
      args_for_rank_(std::move(args_for_rank)),
      workers_(n_ranks) {
  if (access(binary_.c_str(), X_OK) != 0) throw std::runtime_error("worker binary not executable: " + binary_);
}

LocalSupervisor::~LocalSupervisor() {
  stop_all(std::chrono::milliseconds(2000));
}

void LocalSupervisor::start_all() {
  for (uint32_t r = 0; r < workers_.size(); ++r) spawn(r);
}

std::vector<char*> exec_array(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> environment_with(const std::vector<std::string>& extra_env) {
  std::vector<std::string> env;
  const auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    bool replaced = false;
    for (const std::string& extra : extra_env) replaced = replaced || name_of(extra) == name_of(entry);
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  return env;
}

void LocalSupervisor::spawn(uint32_t rank) {
  // argv and envp are built before fork: the child of a multi-threaded process may only make
  // async-signal-safe calls until exec.
  std::vector<std::string> args = args_for_rank_(rank);
  args.insert(args.begin(), binary_);
  std::vector<std::string> env = environment_with(extra_env_);
  const std::vector<char*> argv = exec_array(args), envp = exec_array(env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed for worker rank " + std::to_string(rank));
  if (pid == 0) {
    // The worker dies with the coordinator, even when the coordinator is SIGKILLed.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  Worker& w = workers_[rank];
  w.pid = pid;
  w.started = Clock::now();
  ds::log::info("supervisor", ds::log::Msg() << "started worker rank " << rank << " pid " << pid);
}

void LocalSupervisor::on_exit(uint32_t rank, int status) {
  Worker& w = workers_[rank];
  ds::log::warn("supervisor", ds::log::Msg() << "worker rank " << rank << " pid " << w.pid << " exited ("
                                             << describe_status(status) << ")");
  const auto now = Clock::now();
  w.backoff = (now - w.started > kHealthyUptime || w.backoff.count() == 0) ? kFirstBackoff
                                                                           : std::min(w.backoff * 2, kMaxBackoff);
  w.pid = 0;
  w.restart_at = now + w.backoff;
}

std::vector<uint32_t> LocalSupervisor::poll() {
  std::vector<uint32_t> exited;
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (w.pid == 0) continue;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      on_exit(r, status);
      exited.push_back(r);
    }
  }
  if (stopping_) return exited;
  for (uint32_t r = 0; r < workers_.size(); ++r) {
    Worker& w = workers_[r];
    if (w.pid == 0 && Clock::now() >= w.restart_at) {
      ++w.restarts;
      spawn(r);
    }
  }
  return exited;
}

void LocalSupervisor::kill_rank(uint32_t rank) {
  if (workers_[rank].pid > 0) kill(workers_[rank].pid, SIGKILL);
}

void LocalSupervisor::stop_all(std::chrono::milliseconds grace) {
  stopping_ = true;
  for (Worker& w : workers_) {
    if (w.pid > 0) kill(w.pid, SIGTERM);
  }
  const auto deadline = Clock::now() + grace;
  for (;;) {
    bool any = false;
    for (Worker& w : workers_) {
      if (w.pid <= 0) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.pid = 0;
      } else {
        any = true;
      }
    }
    if (!any) return;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    kill(w.pid, SIGKILL);
    int status = 0;
    waitpid(w.pid, &status, 0);
    w.pid = 0;
  }
}

}  // namespace ds
