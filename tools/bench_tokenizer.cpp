// deltaserve-bench-tokenizer MODEL.gguf: encodes a synthetic 100k-character mixed text
// (English prose, C++ code, CJK, digits, emoji) on one thread and prints chars, tokens,
// milliseconds and MB/s, best of 5 runs, with the BPE piece cache cold (cleared before each
// run) and warm (filled by the previous run).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/utf8.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace {

constexpr size_t kTargetChars = 100000;
constexpr int kRuns = 5;

// Deterministic generator so every run and machine measures the same text.
struct Lcg {
  uint64_t s = 0x9E3779B97F4A7C15ULL;
  uint32_t next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(s >> 33);
  }
  uint32_t below(uint32_t n) { return next() % n; }
};

const char* const kWords[] = {"the",     "model",     "server",     "request",   "token",   "latency",
                              "because", "which",     "throughput", "memory",    "Layer",   "attention",
                              "cache",   "quickly",   "about",      "would",     "they're", "it's",
                              "we'll",   "inference", "batch",      "scheduler", "GPU",     "weights"};
const char* const kCode[] = {"for (int i = 0; i < n; ++i) {\n",
                             "  sum += x[i] * w[i];\n",
                             "}\n",
                             "if (ptr == nullptr) return -1;\n",
                             "    auto it = map.find(key);\n",
                             "def forward(self, x):\n    return self.proj(x)\n",
                             "#include <vector>\n",
                             "\tconst float scale = 1.0f / std::sqrt(d);\n",
                             "x = np.zeros((64, 128))\n"};
const char* const kEmoji[] = {"😀", "🚀", "🦙", "✅", "👍🏽", "😶‍🌫️", "🎉", "❤️"};

void append_prose(Lcg& r, std::string& s) {
  const int n = 5 + static_cast<int>(r.below(20));
  for (int i = 0; i < n; ++i) {
    s += kWords[r.below(std::size(kWords))];
    s += r.below(8) == 0 ? ", " : " ";
  }
  s += ". ";
}

void append_cjk(Lcg& r, std::string& s) {
  const int n = 10 + static_cast<int>(r.below(40));
  for (int i = 0; i < n; ++i) {
    // Mostly common Han (first 2000 of the block), some kana and Hangul.
    const uint32_t pick = r.below(10);
    const uint32_t cp = pick < 7 ? 0x4E00 + r.below(2000) : pick < 9 ? 0x3041 + r.below(80) : 0xAC00 + r.below(400);
    ds::utf8::append(s, cp);
  }
  s += "。\n";
}

void append_digits(Lcg& r, std::string& s) {
  s += std::to_string(r.next()) + "." + std::to_string(r.below(1000)) + " ";
}

std::string make_text() {
  Lcg r;
  std::string s;
  while (ds::utf8::length(s) < kTargetChars) {
    switch (r.below(5)) {
      case 0:
        append_prose(r, s);
        break;
      case 1:
        s += kCode[r.below(std::size(kCode))];
        break;
      case 2:
        append_cjk(r, s);
        break;
      case 3:
        append_digits(r, s);
        break;
      default:
        s += kEmoji[r.below(std::size(kEmoji))];
        append_prose(r, s);
        break;
    }
  }
  // Trim to exactly kTargetChars code points.
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t bytes = 0;
  for (size_t c = 0; c < kTargetChars; ++c) bytes += ds::utf8::step(p + bytes, s.size() - bytes).len;
  s.resize(bytes);
  return s;
}

// Best wall time of kRuns encodes, in milliseconds.
double best_ms(const ds::Tokenizer& tok, const std::string& text, bool cold, size_t& n_tokens) {
  double best = 1e30;
  for (int i = 0; i < kRuns; ++i) {
    if (cold) tok.clear_cache();
    const auto t0 = std::chrono::steady_clock::now();
    n_tokens = tok.encode(text, false).size();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: deltaserve-bench-tokenizer MODEL.gguf\n", stderr);
    return 2;
  }
  try {
    const ds::Tokenizer tok = ds::Tokenizer::from_file(argv[1]);
    const std::string text = make_text();
    std::printf("text: %zu chars, %zu bytes; pre-tokenizer %s\n", ds::utf8::length(text), text.size(),
                ds::pre_tokenizer_name(tok.pre_tokenizer()));
    for (const bool cold : {true, false}) {
      size_t n_tokens = 0;
      const double ms = best_ms(tok, text, cold, n_tokens);
      std::printf("%-5s cache: chars %zu  tokens %zu  %.3f ms  %.1f MB/s  (best of %d)\n", cold ? "cold" : "warm",
                  ds::utf8::length(text), n_tokens, ms, static_cast<double>(text.size()) / 1e3 / ms, kRuns);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-bench-tokenizer: %s\n", e.what());
    return 1;
  }
}
