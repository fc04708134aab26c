#include "coordinator/engine/mps_daemon.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/process_alive.h"
#include "coordinator/engine/gpu_share.h"   // device_of_each_rank, mps_control_running
#include "coordinator/engine/supervisor.h"  // environment_with

namespace ds {
namespace {

// Runs `binary args...` with `env` added to this process's environment, `input` on its stdin;
// returns its exit status (-1 when it could not be started or was killed).
int run_with_env(const std::string& binary, const std::vector<std::string>& args, const std::vector<std::string>& env,
                 const std::string& input) {
  std::vector<std::string> argv_s{binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s = environment_with(env);
  const std::vector<char*> argv = exec_array(argv_s), envp = exec_array(env_s);
  int in[2];
  if (pipe(in) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    close(in[0]);
    close(in[1]);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  if (!input.empty()) (void)!write(in[1], input.data(), input.size());
  close(in[1]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace

bool mps_serves_this_process() {
  return mps_control_running(std::getenv("CUDA_MPS_PIPE_DIRECTORY"));
}

std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : std::string();
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

bool wants_private_mps(const std::string& mode, const std::string& backend, bool external_workers,
                       const std::vector<int>& devices, uint32_t n_ranks, bool mps_running) {
  if (mode == "off" || backend != "cuda" || external_workers) return false;
  const std::vector<int> gpus = device_of_each_rank(devices, n_ranks);
  const bool shared = std::set<int>(gpus.begin(), gpus.end()).size() < gpus.size();
  if (!shared) return false;
  return mode == "on" || !mps_running;
}

std::string private_mps_dir(const std::string& parent, int pid) {
  return (std::filesystem::path(parent) / ("deltaserve-mps-" + std::to_string(pid))).string();
}

size_t reap_stale_mps_daemons(const std::string& parent, const std::string& control_binary) {
  static const std::string kPrefix = "deltaserve-mps-";
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  size_t reaped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || !entry.is_directory(ec)) continue;
    const std::string digits = name.substr(kPrefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || process_alive(pid)) continue;
    stale.push_back(entry.path());
  }
  for (const std::filesystem::path& dir : stale) {
    const std::string pipe_dir = (dir / "pipe").string();
    if (mps_control_running(pipe_dir.c_str()) && !control_binary.empty()) {
      const std::vector<std::string> env{"CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir,
                                         "CUDA_MPS_LOG_DIRECTORY=" + (dir / "log").string()};
      if (run_with_env(control_binary, {}, env, "quit\n") != 0) {
        log::warn("engine",
                  log::Msg() << "a leftover MPS control daemon in " << dir.string() << " did not take `quit`");
      }
    }
    std::filesystem::remove_all(dir, ec);
    if (ec) {  // e.g. another user's directory
      log::warn("engine", log::Msg() << "could not remove " << dir.string() << ": " << ec.message());
      continue;
    }
    log::warn("engine",
              log::Msg() << "quit and removed the MPS daemon of a server that is gone (" << dir.string() << ")");
    ++reaped;
  }
  return reaped;
}

MpsDaemon::MpsDaemon(std::string control_binary, std::string dir)
    : control_binary_(std::move(control_binary)), dir_(std::move(dir)) {}

std::unique_ptr<MpsDaemon> MpsDaemon::start(const std::string& control_binary, const std::string& dir, int wait_ms,
                                            std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/pipe", ec);
  if (!ec) std::filesystem::create_directories(dir + "/log", ec);
  if (ec) {
    *why = "cannot create " + dir + ": " + ec.message();
    return nullptr;
  }
  if (control_binary.empty() || access(control_binary.c_str(), X_OK) != 0) {
    *why = "nvidia-cuda-mps-control not found";
    return nullptr;
  }
  std::unique_ptr<MpsDaemon> d(new MpsDaemon(control_binary, dir));
  const int rc = run_with_env(control_binary, {"-d"}, d->worker_env(), "");
  if (rc != 0) {
    *why =
        control_binary + " -d " + (rc == 127 ? std::string("could not be run") : "exited with " + std::to_string(rc));
    d->running_ = false;
    std::filesystem::remove_all(dir, ec);
    return nullptr;
  }
  const std::string pipe_dir = dir + "/pipe";
  for (int waited = 0; !mps_control_running(pipe_dir.c_str()); waited += 10) {
    if (waited >= wait_ms) {
      *why = "no control socket in " + pipe_dir + " after " + std::to_string(wait_ms) + " ms";
      d->stop();
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  log::info("engine", log::Msg() << "started a CUDA MPS control daemon for the workers sharing a GPU (" << dir << ")");
  return d;
}

MpsDaemon::~MpsDaemon() {
  stop();
}

std::vector<std::string> MpsDaemon::worker_env() const {
  return {"CUDA_MPS_PIPE_DIRECTORY=" + dir_ + "/pipe", "CUDA_MPS_LOG_DIRECTORY=" + dir_ + "/log"};
}

void MpsDaemon::stop() {
  if (!running_) return;
  running_ = false;
  if (run_with_env(control_binary_, {}, worker_env(), "quit\n") != 0) {
    log::warn("engine", log::Msg() << "the MPS control daemon in " << dir_ << " did not take `quit`");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace ds
