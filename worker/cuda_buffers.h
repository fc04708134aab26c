// Grow-only buffers of the CUDA backend (worker/cuda_backend.cpp): a step's scratch and its small
// host control arrays grow to the largest step seen and are then reused, so the decode path
// allocates nothing once they have grown.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/check.h"

namespace ds::cuda_buffers {

// A grow-only device buffer (scratch of an op whose size varies with the step).
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() { cudaFree(dev_); }
  void* get(size_t bytes, cudaStream_t stream, size_t reserve = 0) {
    if (bytes > cap_) {
      bytes = std::max(bytes, reserve);
      DS_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old buffer may still be in use
      DS_CUDA_CHECK(cudaFree(dev_));
      dev_ = nullptr;
      cap_ = 0;
      DS_CUDA_CHECK(cudaMalloc(&dev_, bytes));
      cap_ = bytes;
    }
    return dev_;
  }

 private:
  void* dev_ = nullptr;
  size_t cap_ = 0;
};

// A device copy of a small host array, remembering what it last received so identical uploads
// (the positions of every attention layer of a step) are queued only once.
class ControlBuffer {
 public:
  // Device copy of `bytes` bytes at `host`, queued on `stream` (pageable async copies are staged
  // by the driver, so `host` may change once this returns). `reserve`: grow to at least this
  // much at once. Growth is to the next power of two at least: each growth synchronizes the
  // stream, and some arrays grow a little every few steps (a decoding sequence's block table
  // gains an entry every block_size tokens), which without it cost a sync each time.
  const void* put(const void* host, size_t bytes, cudaStream_t stream, size_t reserve = 0) {
    const auto* src = static_cast<const uint8_t*>(host);
    if (bytes == last_.size() && std::memcmp(src, last_.data(), bytes) == 0) return dev_;
    dev_ = buffer_.get(bytes, stream, std::max(reserve, std::bit_ceil(bytes)));
    DS_CUDA_CHECK(cudaMemcpyAsync(dev_, src, bytes, cudaMemcpyHostToDevice, stream));
    last_.assign(src, src + bytes);
    return dev_;
  }

 private:
  DeviceScratch buffer_;
  void* dev_ = nullptr;
  std::vector<uint8_t> last_;
};

// A grow-only pinned host buffer: device-to-host copies into it are true async DMA, no staging.
class PinnedScratch {
 public:
  PinnedScratch() = default;
  PinnedScratch(const PinnedScratch&) = delete;
  PinnedScratch& operator=(const PinnedScratch&) = delete;
  ~PinnedScratch() { cudaFreeHost(host_); }
  void* get(size_t bytes) {
    if (bytes > cap_) {
      DS_CUDA_CHECK(cudaFreeHost(host_));  // callers synchronize before reusing: nothing in flight
      host_ = nullptr;
      cap_ = 0;
      DS_CUDA_CHECK(cudaMallocHost(&host_, bytes));
      cap_ = bytes;
    }
    return host_;
  }

 private:
  void* host_ = nullptr;
  size_t cap_ = 0;
};

// A device copy of a host array that may be large (over the ~64 KiB a pageable async copy
// stages without waiting): the bytes go through pinned slots, so the host never waits for the
// stream to reach the copy (a pageable copy that large can block the host until then, losing the
// overlap of the next step's host work with this step's kernels). A slot is reused only after its
// last copy completed (its event); the device buffer is reused in stream order.
class PinnedUpload {
 public:
  PinnedUpload() = default;
  PinnedUpload(const PinnedUpload&) = delete;
  PinnedUpload& operator=(const PinnedUpload&) = delete;
  ~PinnedUpload() {
    for (Slot& s : slots_) {
      if (s.copied != nullptr) cudaEventDestroy(s.copied);
    }
  }
  const void* put(const void* host, size_t bytes, cudaStream_t stream) {
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    if (s.copied == nullptr) {
      DS_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    } else {
      DS_CUDA_CHECK(cudaEventSynchronize(s.copied));  // kSlots steps ago: long done in practice
    }
    const size_t grown = std::bit_ceil(std::max<size_t>(bytes, size_t{64} << 10));
    void* pinned = s.host.get(bytes > s.cap ? grown : s.cap);
    s.cap = std::max(s.cap, bytes > s.cap ? grown : s.cap);
    std::memcpy(pinned, host, bytes);
    void* dev = device_.get(bytes, stream, grown);
    DS_CUDA_CHECK(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, stream));
    DS_CUDA_CHECK(cudaEventRecord(s.copied, stream));
    return dev;
  }

 private:
  static constexpr size_t kSlots = 4;
  struct Slot {
    PinnedScratch host;
    size_t cap = 0;
    cudaEvent_t copied = nullptr;
  };
  Slot slots_[kSlots];
  size_t next_ = 0;
  DeviceScratch device_;
};

}  // namespace ds::cuda_buffers
