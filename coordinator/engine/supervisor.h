// Local supervisor: spawns one deltaserve-worker process per rank (fork/exec), notices when
// one exits, restarts that one alone after a back-off, never touches healthy ones, and takes
// them all down on shutdown. Single-threaded: the engine calls poll() from its loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ds {

// This process's environment with `extra_env` ("NAME=value") added, replacing same-name variables.
std::vector<std::string> environment_with(const std::vector<std::string>& extra_env);

// argv / envp for exec: pointers into `strings` (which must outlive them), then nullptr.
std::vector<char*> exec_array(std::vector<std::string>& strings);

class LocalSupervisor {
 public:
  using ArgsForRank = std::function<std::vector<std::string>(uint32_t rank)>;

  // `binary` is exec'd with args_for_rank(rank) (argv[1..]) and this process's environment plus
  // `extra_env` ("NAME=value" entries; they replace variables of the same name).
  LocalSupervisor(std::string binary, uint32_t n_ranks, ArgsForRank args_for_rank,
                  std::vector<std::string> extra_env = {});
  ~LocalSupervisor();
  LocalSupervisor(const LocalSupervisor&) = delete;
  LocalSupervisor& operator=(const LocalSupervisor&) = delete;

  void start_all();
  // Reaps exited workers (returned: their ranks) and starts the ones whose back-off is over.
  std::vector<uint32_t> poll();
  // SIGKILLs a worker that stopped answering; poll() then reports and restarts it.
  void kill_rank(uint32_t rank);
  // SIGTERM to all, SIGKILL after `grace`, reaps everything. No restarts afterwards.
  void stop_all(std::chrono::milliseconds grace);

  pid_t pid(uint32_t rank) const { return workers_[rank].pid; }  // 0 while not running
  uint32_t restarts(uint32_t rank) const { return workers_[rank].restarts; }

 private:
  struct Worker {
    pid_t pid = 0;
    uint32_t restarts = 0;
    std::chrono::steady_clock::time_point started;
    std::chrono::steady_clock::time_point restart_at;  // when pid == 0 and a restart is due
    std::chrono::milliseconds backoff{0};
  };
  void spawn(uint32_t rank);
  void on_exit(uint32_t rank, int status);

  std::string binary_;
  std::vector<std::string> extra_env_;
  ArgsForRank args_for_rank_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
};

// Directory of the running executable (for finding deltaserve-worker next to it).
std::string executable_dir();

}  // namespace ds
