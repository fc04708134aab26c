// The worker's options come from flags, DELTASERVE_WORKER_* variables and a config file, with
// precedence flag > environment > file > default, and bad values are rejected with a message.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <fstream>
#include <string>
#include <vector>

#include "worker/daemon/worker_options.h"

namespace ds {
namespace {

bool parse(std::initializer_list<const char*> args, WorkerOptions* o, std::string* error) {
  static char program[] = "deltaserve-worker";
  std::vector<std::vector<char>> storage;
  std::vector<char*> argv{program};
  for (const char* a : args) {
    storage.emplace_back(a, a + std::strlen(a) + 1);
  }
  for (auto& a : storage) argv.push_back(a.data());
  bool help = false;
  return parse_worker_options(static_cast<int>(argv.size()), argv.data(), o, error, &help);
}

TEST(WorkerOptions, FlagsEnvironmentAndConfigFileLayer) {
  const std::string path = ::testing::TempDir() + "/worker.conf";
  {
    std::ofstream f(path);
    f << "# worker settings\ncoordinator = ipc:///tmp/x/control\nthreads = 3\nrank = 7\n";
  }
  setenv("DELTASERVE_WORKER_RANK", "2", 1);
  WorkerOptions o;
  std::string error;
  ASSERT_TRUE(parse({"--config", path.c_str(), "--threads", "5"}, &o, &error)) << error;
  EXPECT_EQ(o.coordinator, "ipc:///tmp/x/control");  // file
  EXPECT_EQ(o.rank, 2u);                             // environment beats file
  EXPECT_EQ(o.threads, 5);                           // flag beats file
  unsetenv("DELTASERVE_WORKER_RANK");
}

TEST(WorkerOptions, BadValuesAreRejectedWithTheirSource) {
  WorkerOptions o;
  std::string error;
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0", "--gpu-memory-fraction", "1.5"}, &o, &error));
  EXPECT_NE(error.find("gpu-memory-fraction"), std::string::npos) << error;
  setenv("DELTASERVE_WORKER_THREADS", "zero", 1);
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x", "--rank", "0"}, &o, &error));
  EXPECT_NE(error.find("DELTASERVE_WORKER_THREADS"), std::string::npos) << error;
  unsetenv("DELTASERVE_WORKER_THREADS");
  EXPECT_FALSE(parse({"--coordinator", "ipc:///x"}, &o, &error));  // no rank anywhere
  EXPECT_FALSE(parse({"--config", "/nonexistent/worker.conf", "--rank", "0"}, &o, &error));
}

}  // namespace
}  // namespace ds
