// Deterministic driver for the GGUF fuzz entry point (no libFuzzer needed): feeds every
// truncation of the fixture header, then N random mutations (byte flips, splices, length
// field corruption). Prints a summary; a crash or abort fails the test.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_gguf_replay SEED.gguf ITERATIONS\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<uint8_t> seed(std::istreambuf_iterator<char>(in), {});
  if (seed.size() < 64) {
    std::fprintf(stderr, "seed file too small\n");
    return 2;
  }
  // The metadata region is what the parser reads; keep mutations there, plus a data sliver.
  const size_t header = seed.size() < (1u << 20) ? seed.size() : (1u << 20);
  std::vector<uint8_t> base(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(header));
  size_t runs = 0;
  for (size_t n = 0; n < 4096 && n < base.size(); ++n, ++runs) LLVMFuzzerTestOneInput(base.data(), n);
  std::mt19937_64 rng(20261129);
  const long iters = std::atol(argv[2]);
  for (long i = 0; i < iters; ++i, ++runs) {
    std::vector<uint8_t> m(base.begin(),
                           base.begin() + static_cast<std::ptrdiff_t>(8192 + rng() % (base.size() - 8192)));
    const int kind = static_cast<int>(rng() % 3);
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % m.size();
      if (kind == 0) m[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      if (kind == 1) m[at] = static_cast<uint8_t>(rng());
      if (kind == 2 && at + 8 <= m.size()) {  // corrupt a plausible 64-bit length field
        const uint64_t v = rng() % 4 == 0 ? ~uint64_t{0} : rng() % 100000;
        for (int b = 0; b < 8; ++b) m[at + b] = static_cast<uint8_t>(v >> (8 * b));
      }
    }
    LLVMFuzzerTestOneInput(m.data(), m.size());
  }
  std::printf("fuzz_gguf_replay: %zu inputs, no crash\n", runs);
  return 0;
}
