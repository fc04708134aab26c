#include "tests/e2e/server_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ds::test {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Decodes a chunked body prefix; returns what is complete so far.
std::string dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (len == 0 || eol + 2 + len > raw.size()) {
      if (len != 0) out += raw.substr(eol + 2);  // partial chunk: expose what arrived
      break;
    }
    out += raw.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return out;
}

}  // namespace

ServerProcess::ServerProcess(const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/deltaserve-e2e-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  log_path_ = tmpl;
  std::vector<std::string> argv_s = {std::string(DS_BIN_DIR) + "/deltaserve", "serve"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  // The tests compare tokens with the reference's exact path: an f32 KV cache unless a test asks
  // for a type (serve's default, fp8, moves the nearly flat logits of the random-weight fixtures).
  const bool kv_type_given =
      std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.rfind("--kv-cache-type", 0) == 0; });
  if (!kv_type_given) argv_s.insert(argv_s.end(), {"--kv-cache-type", "f32"});
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, 2);
    dup2(fd, 1);
    setpgid(0, 0);  // own process group: the destructor can take the workers down too
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fd);
  const std::regex listening("listening on http://[^:]+:([0-9]+)");
  const std::regex rank("rank ([0-9]+) layers \\[[0-9]+, [0-9]+\\) pid ([0-9]+)");
  for (int i = 0; i < 600 && port_ == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string text = read_all(log_path_);
    std::smatch m;
    if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      // Read the log again: `text` may predate the last lines written before the exit.
      throw std::runtime_error("deltaserve exited early:\n" + read_all(log_path_));
    }
  }
  if (port_ == 0) throw std::runtime_error("deltaserve did not start listening:\n" + log());
  const std::string text = read_all(log_path_);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), rank); it != std::sregex_iterator(); ++it) {
    workers_[std::stoi((*it)[1])] = static_cast<pid_t>(std::stoi((*it)[2]));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  for (const auto& [rank, pid] : workers_) kill(pid, SIGKILL);
  unlink(log_path_.c_str());
}

int ServerProcess::terminate(int timeout_ms) {
  kill(pid_, SIGTERM);
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string ServerProcess::log() const {
  return read_all(log_path_);
}

HttpReply http_request(int port, const std::string& method, const std::string& path, const std::string& body,
                       const std::vector<std::string>& extra_headers,
                       const std::function<void(const std::string&)>& on_body_bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    throw std::runtime_error("connect failed");
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : extra_headers) req += h + "\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[4096];
  HttpReply reply;
  size_t header_end = std::string::npos;
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
    if (header_end == std::string::npos) header_end = raw.find("\r\n\r\n");
    if (header_end != std::string::npos && on_body_bytes) {
      const std::string head = raw.substr(0, header_end);
      const std::string rest = raw.substr(header_end + 4);
      on_body_bytes(head.find("chunked") != std::string::npos ? dechunk(rest) : rest);
    }
  }
  close(fd);
  if (header_end == std::string::npos) throw std::runtime_error("no HTTP reply");
  std::istringstream head(raw.substr(0, header_end));
  std::string line;
  std::getline(head, line);
  reply.status = std::stoi(line.substr(9, 3));
  while (std::getline(head, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    if (!value.empty() && value.back() == '\r') value.pop_back();
    reply.headers[name] = value;
  }
  const std::string rest = raw.substr(header_end + 4);
  reply.body = reply.headers["transfer-encoding"] == "chunked" ? dechunk(rest) : rest;
  return reply;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i];
  s << "]";
  return s.str();
}

std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    events.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return events;
}

HttpReply post_completion(int port, const std::string& body) {
  return http_request(port, "POST", "/v1/completions", body);
}

std::string greedy_completion_body(const std::vector<int32_t>& prompt, size_t len, uint32_t max_tokens, bool stream) {
  const std::vector<int32_t> ids(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(len));
  return R"({"prompt": )" + ids_json(ids) + R"(, "max_tokens": )" + std::to_string(max_tokens) +
         R"(, "temperature": 0, "ignore_eos": true, "logprobs": 1)" + (stream ? R"(, "stream": true})" : "}");
}

std::map<std::string, double> metric_samples(int port) {
  std::map<std::string, double> out;
  std::istringstream lines(http_request(port, "GET", "/metrics", "").body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;  // comments, labelled
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

double metric_value(int port, const std::string& name) {
  const std::map<std::string, double> samples = metric_samples(port);
  const auto it = samples.find(name);
  return it == samples.end() ? -1 : it->second;
}

void stop_servers(std::initializer_list<ServerProcess**> servers) {
  for (ServerProcess** s : servers) {
    delete *s;
    *s = nullptr;
  }
}

}  // namespace ds::test
