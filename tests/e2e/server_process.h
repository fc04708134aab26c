// Runs `deltaserve serve` as a child process for end-to-end tests, plus a minimal blocking
// HTTP/1.1 client (Connection: close, chunked decoding) so the tests exercise the real
// sockets, processes and protocol without any test-only code path in the server.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace ds::test {

class ServerProcess {
 public:
  // Starts the server with `args` after "serve" and waits until it listens (or throws).
  explicit ServerProcess(const std::vector<std::string>& args);
  ~ServerProcess();  // SIGKILLs the server and its workers if still running

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Worker pids by rank, as logged at start-up.
  const std::map<int, pid_t>& worker_pids() const { return workers_; }
  // Sends SIGTERM and waits; returns the exit status (or -1 on timeout).
  int terminate(int timeout_ms);
  std::string log() const;  // the server's stderr so far

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  std::map<int, pid_t> workers_;
};

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

// One request on a fresh connection. `on_body_bytes` (optional) sees the de-chunked body as
// it arrives (streaming tests act on it, e.g. kill a worker after some events).
HttpReply http_request(int port, const std::string& method, const std::string& path, const std::string& body,
                       const std::vector<std::string>& extra_headers = {},
                       const std::function<void(const std::string& so_far)>& on_body_bytes = {});

// "[1,2,3]" for a JSON request body.
std::string ids_json(const std::vector<int32_t>& ids);

// The `data:` payloads of an SSE body, in order.
std::vector<std::string> sse_events(const std::string& body);

// POST /v1/completions with `body` on a fresh connection.
HttpReply post_completion(int port, const std::string& body);

// A /v1/completions body for greedy decoding of the first `len` ids of `prompt`: temperature 0,
// ignore_eos (every request runs its full `max_tokens`) and logprobs 1 (the reply names every
// token, so replies can be compared token for token).
std::string greedy_completion_body(const std::vector<int32_t>& prompt, size_t len, uint32_t max_tokens,
                                   bool stream = false);

// The unlabelled samples ("name value" lines) of the server's /metrics, by name.
std::map<std::string, double> metric_samples(int port);

// One unlabelled sample of /metrics; -1 when absent (every gauge and counter tested is >= 0).
double metric_value(int port, const std::string& name);

// For TearDownTestSuite: stops (deletes) the suite's servers and clears the pointers.
void stop_servers(std::initializer_list<ServerProcess**> servers);

}  // namespace ds::test
