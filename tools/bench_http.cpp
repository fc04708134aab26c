// deltaserve-bench-http: serving throughput and latency of a running `deltaserve serve`.
// For each concurrency level C, C client threads send `--requests` streaming greedy
// /v1/completions requests in total (token-id prompts of --prompt-tokens distinct random ids,
// --max-tokens each, ignore_eos so every request generates exactly that many) and the tool
// prints one table row: requests/s, output tokens/s, time to first token and inter-token
// latency (p50 / p99, from the arrival times of the SSE events that carry text; a token that
// completes no UTF-8 character yet rides on the next event). Output tokens come from the
// final usage chunk (stream_options.include_usage).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli_args.h"

namespace {

using Clock = std::chrono::steady_clock;

const ds::cli::Usage kUsage{"deltaserve-bench-http",
                            "--port P [--host H] [--concurrency 1,4,16,64] [--requests N] [--prompt-tokens T] "
                            "[--max-tokens M] [--api-key KEY]"};

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::vector<uint32_t> concurrency{1, 4, 16, 64};
  uint32_t requests = 64;
  uint32_t prompt_tokens = 128;
  uint32_t max_tokens = 64;
  std::string api_key;
};

struct Outcome {
  bool ok = false;
  double ttft_s = 0;
  std::vector<double> gaps_s;  // between consecutive token events
  uint32_t events = 0;         // token events (chunks with text)
  uint32_t tokens = 0;         // usage.completion_tokens of the final usage chunk
};

// One streaming request on a fresh connection; reads SSE events as they arrive.
Outcome run_request(const Options& o, const std::string& body) {
  Outcome out;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(o.port);
  if (inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return out;
  }
  std::string req = "POST /v1/completions HTTP/1.1\r\nHost: " + o.host +
                    "\r\nConnection: close\r\nContent-Type: application/json\r\n";
  if (!o.api_key.empty()) req += "Authorization: Bearer " + o.api_key + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const auto t0 = Clock::now();
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return out;
  }
  std::string raw;
  size_t scanned = 0;  // events before this offset are counted
  bool header_ok = false, header_seen = false, done = false;
  Clock::time_point last;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    const auto now = Clock::now();
    raw.append(buf, static_cast<size_t>(n));
    if (!header_seen) {
      const size_t end = raw.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      header_seen = true;
      header_ok = raw.compare(0, 12, "HTTP/1.1 200") == 0;
      scanned = end + 4;
    }
    // Chunk framing lines never contain "data: ", so scanning the raw bytes for events works.
    for (size_t pos; (pos = raw.find("data: ", scanned)) != std::string::npos;) {
      const size_t end = raw.find("\n\n", pos);
      if (end == std::string::npos) break;
      const std::string_view event(raw.data() + pos + 6, end - pos - 6);
      scanned = end + 2;
      const size_t usage = event.find("\"completion_tokens\":");
      if (event == "[DONE]") {
        done = true;
      } else if (usage != std::string_view::npos) {
        out.tokens = static_cast<uint32_t>(std::strtoul(event.data() + usage + 20, nullptr, 10));
      } else if (event.find("\"text\":\"") != std::string_view::npos &&
                 event.find("\"text\":\"\"") == std::string_view::npos) {
        if (out.events == 0) {
          out.ttft_s = std::chrono::duration<double>(now - t0).count();
        } else {
          out.gaps_s.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
        ++out.events;
      }
    }
  }
  close(fd);
  out.ok = header_ok && done && out.events > 0;
  return out;
}

std::string make_body(const Options& o, uint32_t index) {
  // Distinct prompts (no prefix-cache reuse between requests): ids from a per-request seed,
  // in the ordinary-text part of the vocabulary.
  std::mt19937 rng(0x5eed + index);
  std::uniform_int_distribution<int> id(1000, 30000);
  std::string ids;
  for (uint32_t i = 0; i < o.prompt_tokens; ++i) ids += (i ? "," : "") + std::to_string(id(rng));
  return R"({"prompt":[)" + ids + R"(],"max_tokens":)" + std::to_string(o.max_tokens) +
         R"(,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})";
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void run_level(const Options& o, uint32_t concurrency, uint32_t level_index) {
  std::vector<std::string> bodies;
  for (uint32_t i = 0; i < o.requests; ++i) bodies.push_back(make_body(o, level_index * 1000003u + i));
  std::atomic<uint32_t> next{0};
  std::mutex mu;
  std::vector<Outcome> outcomes;
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (uint32_t c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (uint32_t i; (i = next.fetch_add(1)) < o.requests;) {
        Outcome r = run_request(o, bodies[i]);
        std::lock_guard<std::mutex> lock(mu);
        outcomes.push_back(std::move(r));
      }
    });
  }
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ttft, itl;
  uint64_t tokens = 0;
  uint32_t ok = 0;
  for (const Outcome& r : outcomes) {
    if (!r.ok) continue;
    ++ok;
    tokens += r.tokens;
    ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.gaps_s.begin(), r.gaps_s.end());
  }
  std::printf("| %u | %u | %u | %.2f | %.2f | %.1f | %.0f / %.0f | %.1f / %.1f |\n", concurrency, o.requests,
              o.requests - ok, wall, ok / wall, static_cast<double>(tokens) / wall, 1e3 * percentile(ttft, 0.5),
              1e3 * percentile(ttft, 0.99), 1e3 * percentile(itl, 0.5), 1e3 * percentile(itl, 0.99));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--port") {
      o.port = ds::cli::parse_number<uint16_t>(kUsage, a, args.value(), 1);
    } else if (a == "--host") {
      o.host = args.value();
    } else if (a == "--concurrency") {
      o.concurrency = ds::cli::parse_list<uint32_t>(kUsage, a, args.value(), 1, 4096);
    } else if (a == "--requests") {
      o.requests = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 1);
    } else if (a == "--prompt-tokens") {
      o.prompt_tokens = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 1, 1u << 20);
    } else if (a == "--max-tokens") {
      o.max_tokens = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 1, 1u << 20);
    } else if (a == "--api-key") {
      o.api_key = args.value();
    } else {
      args.unknown();
    }
  }
  if (o.port == 0) kUsage.fail("--port is required");
  std::printf("prompt %u tokens, %u output tokens per request (streaming, greedy, ignore_eos)\n\n",
              o.prompt_tokens, o.max_tokens);
  std::printf("| concurrency | requests | failed | wall s | requests/s | output tok/s | TTFT p50 / p99 ms | "
              "inter-token p50 / p99 ms |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (size_t i = 0; i < o.concurrency.size(); ++i) run_level(o, o.concurrency[i], static_cast<uint32_t>(i));
  return 0;
}
