// Helpers shared by the CPU kernel tests: seeded random data and error metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace ds::cpu::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  std::vector<float> vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

// max_i |a_i - b_i| / max_i |b_i|: error relative to the scale of the reference tensor.
template <typename A, typename B>
double rel_error(const A& a, const B& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

template <typename A, typename B>
double max_abs_diff(const A& a, const B& b) {
  double diff = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return diff;
}

}  // namespace ds::cpu::test
