// Deterministic driver for the text fuzz entry points (HTTP requests, JSON bodies) without
// libFuzzer, so CI exercises them on every run: each seed whole and at every truncation, then
// N mutations (byte flips, random bytes, deleted / duplicated slices, splices of two seeds,
// tokens from a dictionary of the formats' delimiters inserted). A crash or abort fails.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

const char* const kDictionary[] = {"\r\n",
                                   "\r\n\r\n",
                                   ": ",
                                   ",",
                                   ";",
                                   "Transfer-Encoding: ",
                                   "Content-Length: ",
                                   "chunked",
                                   "identity",
                                   "gzip",
                                   "Content-Type: ",
                                   "application/json",
                                   "charset=utf-8",
                                   "0\r\n\r\n",
                                   "ffffffffffffffff\r\n",
                                   "POST / HTTP/1.1",
                                   "{",
                                   "}",
                                   "[",
                                   "]",
                                   "\"",
                                   "\\",
                                   "\\u",
                                   "\\ud800",
                                   "\\udc00",
                                   "\\ud83d\\ude00",
                                   ":",
                                   "null",
                                   "true",
                                   "1e999",
                                   "-0",
                                   "\"messages\"",
                                   "\"role\":\"user\"",
                                   "\"content\"",
                                   "\"tool_calls\"",
                                   "\"arguments\"",
                                   "\"extra_body\"",
                                   "\"prompt\"",
                                   "\"stop\"",
                                   "\"logprobs\"",
                                   "\"max_tokens\"",
                                   std::string(1, '\0').c_str()};

std::vector<uint8_t> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void mutate(std::vector<uint8_t>& m, const std::vector<std::vector<uint8_t>>& seeds, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = m.empty() ? 0 : rng() % (m.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (at < m.size()) m[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        if (at < m.size()) m[at] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // delete a slice
        const size_t n = std::min<size_t>(m.size() - std::min(at, m.size()), rng() % 16);
        m.erase(m.begin() + static_cast<std::ptrdiff_t>(at), m.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 3: {  // duplicate a slice
        const size_t n = std::min<size_t>(m.size() - std::min(at, m.size()), rng() % 32);
        const std::vector<uint8_t> slice(m.begin() + static_cast<std::ptrdiff_t>(at),
                                         m.begin() + static_cast<std::ptrdiff_t>(at + n));
        m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), slice.begin(), slice.end());
        break;
      }
      case 4: {  // splice another seed's tail
        const std::vector<uint8_t>& other = seeds[rng() % seeds.size()];
        const size_t from = other.empty() ? 0 : rng() % other.size();
        m.resize(at);
        m.insert(m.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      default: {
        const std::string t = kDictionary[rng() % (sizeof kDictionary / sizeof *kDictionary)];
        m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR ITERATIONS\n", argv[0]);
    return 2;
  }
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) seeds.push_back(read_file(entry.path()));
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds in %s\n", argv[1]);
    return 2;
  }
  size_t runs = 0;
  for (const auto& s : seeds) {
    for (size_t n = 0; n <= s.size(); ++n, ++runs) LLVMFuzzerTestOneInput(s.data(), n);
  }
  std::mt19937_64 rng(20261201);
  const long iters = std::atol(argv[2]);
  for (long i = 0; i < iters; ++i, ++runs) {
    std::vector<uint8_t> m = seeds[rng() % seeds.size()];
    mutate(m, seeds, rng);
    LLVMFuzzerTestOneInput(m.data(), m.size());
  }
  std::printf("%s: %zu inputs, no crash\n", argv[0], runs);
  return 0;
}
