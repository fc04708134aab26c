// deltaserve-bench-http: serving throughput and latency of a running `deltaserve serve`.
// For each concurrency level C, C client threads send `--requests` streaming greedy
// /v1/completions requests in total (token-id prompts of --prompt-tokens distinct random ids,
// below --vocab for a small synthetic model, --max-tokens each, ignore_eos so every request
// generates exactly that many) and the tool
// prints one table row (-o json: one JSON object per line): requests/s, output tokens/s, time
// to first token and inter-token latency (p50 / p99, from the arrival times of the SSE events
// that carry text; a token that completes no UTF-8 character yet rides on the next event).
// Output tokens come from the final usage chunk (stream_options.include_usage).
#include "tools/bench_http.h"

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

const ds::cli::Usage kUsage{
    "deltaserve-bench-http",
    "--port P [--host H] | --url http://H:P  [--concurrency 1,4,16,64] [--requests N] "
    "[--prompt-tokens T] [--max-tokens M] [--vocab N] [--sampling FIELDS] [--api-key KEY] [-o|--output table|json]"};

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::vector<uint32_t> concurrency{1, 4, 16, 64};
  uint32_t requests = 64;
  uint32_t prompt_tokens = 128;
  uint32_t vocab = 0;  // --vocab: the served model's vocabulary size; 0 = a real Qwen one
  uint32_t max_tokens = 64;
  std::string api_key;
  std::string sampling;  // --sampling: JSON members added to every body, e.g. "presence_penalty":1.5
  bool json = false;     // -o json: one JSON object per concurrency level instead of the table
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
  // in the ordinary-text part of a Qwen vocabulary, or of a small (synthetic) one's upper half.
  std::mt19937 rng(0x5eed + index);
  const int hi = o.vocab ? static_cast<int>(std::min<uint32_t>(o.vocab, 30001)) - 1 : 30000;
  std::uniform_int_distribution<int> id(std::min(1000, hi / 2), hi);
  std::string ids;
  for (uint32_t i = 0; i < o.prompt_tokens; ++i) ids += (i ? "," : "") + std::to_string(id(rng));
  // Greedy unless --sampling names a temperature (a JSON reader keeps the first of two members).
  const bool own_temperature = o.sampling.find("\"temperature\"") != std::string::npos;
  return R"({"prompt":[)" + ids + R"(],"max_tokens":)" + std::to_string(o.max_tokens) +
         (own_temperature ? "" : R"(,"temperature":0)") +
         R"(,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true})" +
         (o.sampling.empty() ? "" : "," + o.sampling) + "}";
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct LevelResult {
  uint32_t concurrency = 0;
  uint32_t requests = 0;
  uint32_t ok = 0;  // requests that streamed to [DONE] with at least one token
  double wall_s = 0;
  uint64_t tokens = 0;       // output tokens of the ok requests (usage.completion_tokens)
  std::vector<double> ttft;  // seconds, per ok request
  std::vector<double> itl;   // seconds between token events, all ok requests
};

void print_table_level(const LevelResult& r) {
  std::printf("| %u | %u | %u | %.2f | %.2f | %.1f | %.0f / %.0f | %.1f / %.1f |\n", r.concurrency, r.requests,
              r.requests - r.ok, r.wall_s, r.ok / r.wall_s, static_cast<double>(r.tokens) / r.wall_s,
              1e3 * percentile(r.ttft, 0.5), 1e3 * percentile(r.ttft, 0.99), 1e3 * percentile(r.itl, 0.5),
              1e3 * percentile(r.itl, 0.99));
}

// Latencies in milliseconds; percentiles of an empty set (every request failed) are 0.
void print_json_level(const LevelResult& r) {
  std::printf(
      "{\"concurrency\": %u, \"requests\": %u, \"failed\": %u, \"wall_s\": %.6g, \"requests_per_s\": %.6g, "
      "\"output_tokens\": %llu, \"output_tok_per_s\": %.6g, \"ttft_ms_p50\": %.6g, \"ttft_ms_p99\": %.6g, "
      "\"itl_ms_p50\": %.6g, \"itl_ms_p99\": %.6g}\n",
      r.concurrency, r.requests, r.requests - r.ok, r.wall_s, r.ok / r.wall_s,
      static_cast<unsigned long long>(r.tokens), static_cast<double>(r.tokens) / r.wall_s,
      1e3 * percentile(r.ttft, 0.5), 1e3 * percentile(r.ttft, 0.99), 1e3 * percentile(r.itl, 0.5),
      1e3 * percentile(r.itl, 0.99));
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
  LevelResult res{concurrency, o.requests, 0, wall, 0, {}, {}};
  for (const Outcome& r : outcomes) {
    if (!r.ok) continue;
    ++res.ok;
    res.tokens += r.tokens;
    res.ttft.push_back(r.ttft_s);
    res.itl.insert(res.itl.end(), r.gaps_s.begin(), r.gaps_s.end());
  }
  if (o.json) {
    print_json_level(res);
  } else {
    print_table_level(res);
  }
  std::fflush(stdout);
}

// "http://HOST:PORT[/...]" (HOST an IPv4 address or localhost) into o.host / o.port.
void parse_url(const std::string& url, Options& o) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) kUsage.fail("--url must start with http:// (no TLS), got '" + url + "'");
  const std::string authority = url.substr(scheme.size(), url.find('/', scheme.size()) - scheme.size());
  const size_t colon = authority.rfind(':');
  if (colon == std::string::npos || colon == 0) kUsage.fail("--url needs http://HOST:PORT, got '" + url + "'");
  o.host = authority.substr(0, colon);
  if (o.host == "localhost") o.host = "127.0.0.1";
  in_addr probe{};
  if (inet_pton(AF_INET, o.host.c_str(), &probe) != 1) {
    kUsage.fail("--url host must be an IPv4 address or localhost, got '" + o.host + "'");
  }
  o.port = ds::cli::parse_number<uint16_t>(kUsage, "--url port", authority.substr(colon + 1), 1);
}

}  // namespace

namespace ds::bench_http {

int run(int argc, char** argv) {
  Options o;
  ds::cli::ArgReader args(kUsage, argc, argv);
  for (std::string a; args.next(a);) {
    if (a == "--port") {
      o.port = ds::cli::parse_number<uint16_t>(kUsage, a, args.value(), 1);
    } else if (a == "--host") {
      o.host = args.value();
    } else if (a == "--url") {
      parse_url(args.value(), o);
    } else if (a == "--concurrency") {
      o.concurrency = ds::cli::parse_list<uint32_t>(kUsage, a, args.value(), 1, 4096);
    } else if (a == "--requests") {
      o.requests = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 1);
    } else if (a == "--prompt-tokens") {
      o.prompt_tokens = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 1, 1u << 20);
    } else if (a == "--max-tokens") {
      o.max_tokens = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 1, 1u << 20);
    } else if (a == "--vocab") {
      o.vocab = ds::cli::parse_number<uint32_t>(kUsage, a, args.value(), 2, 1u << 24);
    } else if (a == "--sampling") {
      o.sampling = args.value();
      if (o.sampling.find(':') == std::string::npos || o.sampling.front() == ',' || o.sampling.front() == '{') {
        kUsage.fail("--sampling takes JSON members without braces, e.g. '\"presence_penalty\":1.5'");
      }
    } else if (a == "--api-key") {
      o.api_key = args.value();
    } else if (a == "--output" || a == "-o") {
      const std::string v = args.value();
      if (v != "table" && v != "json") kUsage.fail("--output must be table or json, got '" + v + "'");
      o.json = v == "json";
    } else {
      args.unknown();
    }
  }
  if (o.port == 0) kUsage.fail("--port (or --url) is required");
  if (!o.json) {
    std::printf("prompt %u tokens, %u output tokens per request (streaming, greedy, ignore_eos%s%s)\n\n",
                o.prompt_tokens, o.max_tokens, o.sampling.empty() ? "" : ", ", o.sampling.c_str());
    std::printf(
        "| concurrency | requests | failed | wall s | requests/s | output tok/s | TTFT p50 / p99 ms | "
        "inter-token p50 / p99 ms |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  }
  for (size_t i = 0; i < o.concurrency.size(); ++i) run_level(o, o.concurrency[i], static_cast<uint32_t>(i));
  return 0;
}

}  // namespace ds::bench_http
