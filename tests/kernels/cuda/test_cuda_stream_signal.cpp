// Stream-ordered host-word signals (kernels/cuda/stream_signal.h), the --early-handoff hand-off
// between two stages: on memory registered the way a hidden-state ring is (shared mapping,
// cudaHostRegister portable + mapped), a stream's wait holds every later copy until the host
// sets the word, and a stream's write lands only after the copy queued before it.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cuda/stream_signal.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace ds::cuda::test {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kValue = 0x80000003u;

// A shared anonymous mapping registered like a ring (worker/daemon/pinned_ring.cpp).
class RegisteredBytes {
 public:
  explicit RegisteredBytes(size_t bytes) : bytes_(bytes) {
    base_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(cudaHostRegister(base_, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped), cudaSuccess);
  }
  ~RegisteredBytes() {
    cudaHostUnregister(base_);
    munmap(base_, bytes_);
  }
  uint32_t* word() { return static_cast<uint32_t*>(base_); }  // first 64 bytes: the word
  float* data() { return reinterpret_cast<float*>(static_cast<char*>(base_) + 4096); }

 private:
  void* base_ = nullptr;
  size_t bytes_;
};

bool landed(const uint32_t* word) {
  return __atomic_load_n(word, __ATOMIC_ACQUIRE) == kValue;
}

TEST(CudaStreamSignal, WaitHoldsLaterCopiesUntilTheWordIsSet) {
  DS_REQUIRE_GPU();
  constexpr size_t n = 1 << 16;
  RegisteredBytes host(4096 + n * sizeof(float));
  std::fill(host.data(), host.data() + n, 0.0f);
  *host.word() = 0;
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(stream_wait_host_word(s, host.word(), kValue), cudaSuccess) << "stream memory operations unavailable";
  ASSERT_EQ(cudaMemcpyAsync(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the copy ran before the word was set";
  for (size_t i = 0; i < n; ++i) host.data()[i] = static_cast<float>(i) * 0.5f;  // the rows land ...
  __atomic_store_n(host.word(), kValue, __ATOMIC_RELEASE);                       // ... then the word
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<float>(i) * 0.5f) << "row " << i;
  cudaStreamDestroy(s);
  cudaFree(dev);
}

// 64 MB down, then the word: once the host sees the word, every byte is there.
TEST(CudaStreamSignal, WriteLandsAfterTheCopyBeforeIt) {
  DS_REQUIRE_GPU();
  constexpr size_t n = size_t{16} << 20;
  RegisteredBytes host(4096 + n * sizeof(float));
  std::fill(host.data(), host.data() + n, -1.0f);
  *host.word() = 0;
  std::vector<float> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 4099);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, src.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(stream_write_host_word(s, host.word(), kValue), cudaSuccess) << "stream memory operations unavailable";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!landed(host.word()) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(landed(host.word()));
  EXPECT_EQ(std::memcmp(host.data(), src.data(), n * sizeof(float)), 0) << "the word came before the rows";
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
  cudaFree(dev);
}

TEST(CudaStreamSignal, UnregisteredOrNullWordsAreRefused) {
  DS_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  uint32_t plain = 0;  // pageable, not registered: no device address
  EXPECT_NE(stream_write_host_word(s, &plain, kValue), cudaSuccess);
  EXPECT_NE(stream_wait_host_word(s, nullptr, kValue), cudaSuccess);
  cudaGetLastError();
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess) << "a refused call queues nothing";
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace ds::cuda::test
