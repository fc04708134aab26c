// The decode path's small kernels as programmatic dependent launches (kernels/cuda/
// dependent_launch.h, common.cuh launch_dependent_if_enabled): every converted op family runs the
// same chain on the same inputs with the stream's switch off and on, and the results must be
// bit-identical (no tolerance: the switch changes when a kernel may start, never its arithmetic).
//
// What makes a missing wait visible: each op's main input is written by pdl_probe's late copy,
// which releases the next kernel at once and writes only ~kDelayUs later, into a buffer poisoned
// with NaN bits. An op that read (or wrote) before its griddepcontrol.wait would see the poison
// or race the copy; ProbeCatchesAKernelWithoutItsWait shows the probe does catch such a kernel.
// The ops' inputs chain: each one's input is (a late copy of) the previous op's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/conv_l2_decode.h"
#include "kernels/cuda/dependent_launch.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/l2_norm_heads.h"
#include "kernels/cuda/logit_digest.h"
#include "kernels/cuda/norm.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/pdl_probe.h"

namespace ds::cuda::test {
namespace {

constexpr unsigned kDelayUs = 100;  // far longer than any launch latency (a few us)
constexpr int kRepeats = 4;         // dependent runs compared with the one ordinary run
constexpr float kEps = 1e-6f;

// Dependent launches exist from sm_90 on; below, the switch stays off and there is nothing to test.
#define DS_REQUIRE_PDL()                                                                                     \
  do {                                                                                                       \
    DS_REQUIRE_GPU();                                                                                        \
    if (!::ds::cuda::current_device_is_sm90_or_newer()) GTEST_SKIP() << "no dependent launches below sm_90"; \
  } while (0)

// A stream of its own, unregistered again when the test ends.
class Stream {
 public:
  Stream() { DS_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    set_dependent_launches(s_, false);
    cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// dst (n 32-bit words) poisoned with NaN bits, then written from src by the late copy.
void late(const void* src, void* dst, size_t n_words, cudaStream_t s) {
  DS_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, n_words * 4, s));
  DS_CUDA_CHECK(launch_late_copy(src, dst, n_words, kDelayUs, s));
}

// Appends device array `a` (after a stream sync) to `out` as raw words.
template <typename T>
void append(std::vector<uint32_t>* out, const DeviceArray<T>& a, cudaStream_t s) {
  DS_CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<T> h = a.download();
  const size_t words = h.size() * sizeof(T) / 4;
  const size_t at = out->size();
  out->resize(at + words);
  std::memcpy(out->data() + at, h.data(), words * 4);
}

// `run` queues a chain on the stream and returns its outputs. Once with the switch off (the
// reference), then kRepeats times with it on: every run must give the reference's bits.
void expect_same_bits_either_way(const char* what, const std::function<std::vector<uint32_t>(cudaStream_t)>& run) {
  Stream stream;
  set_dependent_launches(stream.get(), false);
  ASSERT_FALSE(dependent_launches(stream.get()));
  const std::vector<uint32_t> want = run(stream.get());
  ASSERT_FALSE(want.empty()) << what;
  set_dependent_launches(stream.get(), true);
  ASSERT_TRUE(dependent_launches(stream.get()));
  for (int rep = 0; rep < kRepeats; ++rep) {
    const std::vector<uint32_t> got = run(stream.get());
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " words differ, dependent run " << rep;
  }
}

// Every float of the reference finite: a chain that read poison would not be (guards the test
// itself against comparing NaN with NaN).
bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

TEST(CudaDependentLaunch, SwitchIsPerStreamAndThreadSafe) {
  DS_REQUIRE_PDL();
  Stream a, b;
  EXPECT_FALSE(dependent_launches(a.get()));
  set_dependent_launches(a.get(), true);
  EXPECT_TRUE(dependent_launches(a.get()));
  EXPECT_FALSE(dependent_launches(b.get()));
  set_dependent_launches(a.get(), true);  // idempotent
  set_dependent_launches(a.get(), false);
  EXPECT_FALSE(dependent_launches(a.get()));
  // Threads toggling their own streams never disturb another's entry.
  set_dependent_launches(b.get(), true);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&wrong, t] {
      Stream own;
      for (int i = 0; i < 2000; ++i) {
        const bool on = ((i + t) % 2) == 0;
        set_dependent_launches(own.get(), on);
        if (dependent_launches(own.get()) != on) ++wrong;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(dependent_launches(b.get()));
  EXPECT_FALSE(dependent_launches(a.get()));
}

// The table holds 64 streams; more stay off (ordinary launches) until a slot frees. Fake handles:
// the registry only compares them.
TEST(CudaDependentLaunch, StreamsBeyondTheTableStayOff) {
  DS_REQUIRE_PDL();
  std::vector<cudaStream_t> fake;
  for (uintptr_t i = 0; i < 70; ++i) fake.push_back(reinterpret_cast<cudaStream_t>(uintptr_t{0x70000000} + 64 * i));
  for (cudaStream_t s : fake) set_dependent_launches(s, true);
  size_t on = 0;
  for (cudaStream_t s : fake) on += dependent_launches(s);
  EXPECT_EQ(on, 64u);  // no other stream is on while this test runs
  EXPECT_TRUE(dependent_launches(fake[0]));
  EXPECT_FALSE(dependent_launches(fake[69]));
  set_dependent_launches(fake[0], false);
  EXPECT_FALSE(dependent_launches(fake[0]));
  set_dependent_launches(fake[69], true);  // takes the freed slot
  EXPECT_TRUE(dependent_launches(fake[69]));
  for (cudaStream_t s : fake) set_dependent_launches(s, false);
  for (cudaStream_t s : fake) EXPECT_FALSE(dependent_launches(s));
}

// The probe's own control: a dependent kernel that never waits copies the poison (or a part of
// it), so a converted kernel without its wait would fail the tests below.
TEST(CudaDependentLaunch, ProbeCatchesAKernelWithoutItsWait) {
  DS_REQUIRE_PDL();
  Stream stream;
  Rng rng(5);
  const size_t n = 4096;
  DeviceArray<float> src(rng.vec(n)), mid(n), dst(n);
  int caught = 0;
  for (int rep = 0; rep < kRepeats; ++rep) {
    late(src.get(), mid.get(), n, stream.get());
    DS_CUDA_CHECK(launch_copy_without_wait(mid.get(), dst.get(), n, stream.get()));
    DS_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    caught += !same_bits(dst.download(), src.download());
  }
  // Most repeats, not all: on the GPU the first launch of a fresh stream sometimes starts too late
  // to overlap. One catch shows the probe can expose it.
  EXPECT_GE(caught, 1) << "the late copy never exposed a kernel that skips its wait";
}

// add_inplace -> add_rms_norm -> rms_norm -> swiglu -> gated_rms_norm (narrow and wide rows) ->
// sigmoid_gate -> l2_norm -> l2_norm_heads, at decode widths: 4096 wide rows take the cluster
// kernels for <= 64 rows and the block-per-row kernels above; 512 the warp-per-row kernels.
TEST(CudaDependentLaunch, NormAndActivationChainGivesTheSameBits) {
  DS_REQUIRE_PDL();
  struct Shape {
    size_t rows, dim;
  };
  for (const Shape sh : {Shape{1, 4096}, Shape{4, 4096}, Shape{80, 4096}, Shape{3, 512}}) {
    const size_t n = sh.rows * sh.dim, half = n / 2;
    Rng rng(17 + sh.rows);
    DeviceArray<float> x0(rng.vec(n)), delta0(rng.vec(n)), delta1(rng.vec(n)), w(rng.vec(sh.dim, 0.5f, 1.5f));
    DeviceArray<float> w128(rng.vec(128, 0.5f, 1.5f)), w1024(rng.vec(1024, 0.5f, 1.5f));
    DeviceArray<float> z(rng.vec(half)), gate(rng.vec(half));
    DeviceArray<float> x(n), x_seen(n), d(n), y(n), a(n), b(n), c(n), g(half), g2(half), o(half), o_wide(half);
    DeviceArray<float> o2(half), sg(half), l(half), l2(half), h(half);
    const auto run = [&](cudaStream_t s) {
      DS_CUDA_CHECK(cudaMemcpyAsync(x.get(), x0.get(), n * 4, cudaMemcpyDeviceToDevice, s));
      late(x.get(), x_seen.get(), n, s);  // reads x late: add_inplace must not write it before its wait
      DS_CUDA_CHECK(add_inplace(x.get(), delta0.get(), n, s));
      late(delta1.get(), d.get(), n, s);
      DS_CUDA_CHECK(add_rms_norm(x.get(), d.get(), w.get(), kEps, sh.rows, sh.dim, y.get(), s));
      late(y.get(), a.get(), n, s);
      DS_CUDA_CHECK(rms_norm(a.get(), sh.dim, w.get(), kEps, sh.rows, sh.dim, b.get(), sh.dim, s));
      late(b.get(), c.get(), n, s);
      DS_CUDA_CHECK(swiglu(c.get(), c.get() + half, half, g.get(), s));
      late(g.get(), g2.get(), half, s);
      DS_CUDA_CHECK(gated_rms_norm(g2.get(), z.get(), w128.get(), kEps, half / 128, 128, o.get(), s));
      late(g.get(), g2.get(), half, s);
      DS_CUDA_CHECK(gated_rms_norm(g2.get(), z.get(), w1024.get(), kEps, half / 1024, 1024, o_wide.get(), s));
      late(o.get(), o2.get(), half, s);
      DS_CUDA_CHECK(sigmoid_gate(o2.get(), 128, gate.get(), 128, half / 128, 128, sg.get(), 128, s));
      late(sg.get(), l.get(), half, s);
      DS_CUDA_CHECK(l2_norm(l.get(), 128, kEps, half / 128, 128, l2.get(), 128, s));
      late(l2.get(), h.get(), half, s);
      DS_CUDA_CHECK(l2_norm_heads(h.get(), 256, half / 256, 2, 128, kEps, s));
      std::vector<uint32_t> out;
      for (const DeviceArray<float>* r : {&x_seen, &x, &y, &b, &g, &o, &o_wide, &sg, &l2, &h}) append(&out, *r, s);
      return out;
    };
    // The reference run computes real numbers (no poison reached the outputs).
    {
      Stream s;
      run(s.get());
      for (const DeviceArray<float>* r : {&x_seen, &x, &y, &b, &g, &o, &o_wide, &sg, &l2, &h}) {
        ASSERT_TRUE(all_finite(r->download())) << sh.rows << "x" << sh.dim;
      }
    }
    expect_same_bits_either_way(sh.dim == 512 ? "norm chain, narrow rows" : "norm chain, wide rows", run);
  }
}

// Conv + SiLU + L2 of one token three steps in a row (the state each step writes is the next
// step's input), then the batched slots form over three sequences.
TEST(CudaDependentLaunch, ConvL2DecodeGivesTheSameBits) {
  DS_REQUIRE_PDL();
  const size_t head_dim = 128, n_norm = 8, channels = (n_norm + 8) * head_dim, kernel = 4, hist = kernel - 1;
  ASSERT_TRUE(conv_silu_l2_token_applies(channels, kernel, n_norm, head_dim));
  Rng rng(23);
  const size_t n_seqs = 3;
  DeviceArray<float> x0(rng.vec(n_seqs * channels)), weight(rng.vec(channels * kernel)),
      state0(rng.vec(n_seqs * hist * channels));
  DeviceArray<float> x(n_seqs * channels), state(n_seqs * hist * channels), y1(channels), y2(channels), y3(channels);
  DeviceArray<float> ys(n_seqs * channels);
  DeviceArray<uint32_t> slots(std::vector<uint32_t>{2, 0, 1});
  const auto run = [&](cudaStream_t s) {
    DS_CUDA_CHECK(cudaMemcpyAsync(state.get(), state0.get(), state.size() * 4, cudaMemcpyDeviceToDevice, s));
    DeviceArray<float>* y[] = {&y1, &y2, &y3};
    for (size_t step = 0; step < 3; ++step) {
      late(x0.get() + step * channels, x.get(), channels, s);
      DS_CUDA_CHECK(conv_silu_l2_token(x.get(), channels, weight.get(), kernel, state.get(), n_norm, head_dim, kEps,
                                       y[step]->get(), s));
    }
    late(x0.get(), x.get(), n_seqs * channels, s);
    DS_CUDA_CHECK(conv_silu_l2_slots(x.get(), channels, weight.get(), kernel, state.get(), hist * channels, slots.get(),
                                     n_seqs, n_norm, head_dim, kEps, ys.get(), s));
    std::vector<uint32_t> out;
    for (const DeviceArray<float>* r : {&y1, &y2, &y3, &ys, &state}) append(&out, *r, s);
    return out;
  };
  expect_same_bits_either_way("conv + silu + l2", run);
  EXPECT_TRUE(all_finite(ys.download()));
}

// Split-K decode attention (split + merge launches), one sequence and a batch of three.
TEST(CudaDependentLaunch, AttentionDecodeGivesTheSameBits) {
  DS_REQUIRE_PDL();
  const size_t H = 8, Hkv = 2, d = 128, block = 16, n_blocks = 40, row = Hkv * d;
  Rng rng(31);
  DeviceArray<float> k_pool(rng.vec(n_blocks * block * row)), v_pool(rng.vec(n_blocks * block * row));
  std::vector<int32_t> table(n_blocks);
  for (size_t i = 0; i < n_blocks; ++i) table[i] = static_cast<int32_t>((i * 7) % n_blocks);
  DeviceArray<int32_t> dev_table(table);
  const size_t n_seqs = 3;
  DeviceArray<float> q0(rng.vec(n_seqs * H * d)), q(n_seqs * H * d), out_one(H * d), out_batch(n_seqs * H * d);
  DeviceArray<uint8_t> upload_buf(size_t{1} << 16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t kv_lens[n_seqs] = {37, 300, 1};
  const auto run = [&](cudaStream_t s) {
    const cpu::AttentionShape one{1, 300, H, Hkv, d, H * d, d, row, H * d};
    const cpu::KvPages pages{k_pool.get(), v_pool.get(), dev_table.get(), block};
    late(q0.get(), q.get(), H * d, s);
    DS_CUDA_CHECK(detail::attention_decode(one, q.get(), pages, scale, out_one.get(), s));
    std::vector<AttentionBatchSeq> seqs;
    for (size_t i = 0; i < n_seqs; ++i) seqs.push_back({kv_lens[i], i * H * d, i * H * d, table.data() + i});
    const AttentionBatch b{
        H, Hkv, d, d, row, k_pool.get(), v_pool.get(), block, scale, q.get(), out_batch.get(), seqs.data(), n_seqs};
    // A synchronous copy outside the stream (nothing in it reads upload_buf yet this run), so the
    // late copy of q stays the kernel right before the split launch.
    const DeviceUpload upload = [&](const void* host, size_t bytes) -> const void* {
      if (bytes > upload_buf.size()) return nullptr;
      DS_CUDA_CHECK(cudaMemcpy(upload_buf.get(), host, bytes, cudaMemcpyHostToDevice));
      return upload_buf.get();
    };
    late(q0.get(), q.get(), n_seqs * H * d, s);
    DS_CUDA_CHECK(attention_decode_batch(b, upload, s));
    std::vector<uint32_t> out;
    for (const DeviceArray<float>* r : {&out_one, &out_batch}) append(&out, *r, s);
    return out;
  };
  expect_same_bits_either_way("decode attention", run);
  EXPECT_TRUE(all_finite(out_batch.download()));
}

// The device logit digest (chunks + merge launches) of two rows.
TEST(CudaDependentLaunch, LogitDigestGivesTheSameBits) {
  DS_REQUIRE_PDL();
  const size_t rows = 2, vocab = 5000;
  const uint32_t k = 20;
  Rng rng(37);
  DeviceArray<float> logits0(rng.vec(rows * vocab, -8.0f, 8.0f)), logits(rows * vocab);
  DeviceArray<uint8_t> scratch(logit_digest_scratch_bytes(rows, vocab, k));
  DeviceArray<uint8_t> digest(rows * sizeof(DigestRow));
  const auto run = [&](cudaStream_t s) {
    late(logits0.get(), logits.get(), rows * vocab, s);
    DS_CUDA_CHECK(
        logit_digest_rows(logits.get(), rows, vocab, k, scratch.get(), reinterpret_cast<DigestRow*>(digest.get()), s));
    std::vector<uint32_t> out;
    append(&out, digest, s);
    return out;
  };
  expect_same_bits_either_way("logit digest", run);
}

// embed_rows (ids written late) -> gather_rows -> scatter_rows, each input written late.
TEST(CudaDependentLaunch, EmbedGatherScatterGiveTheSameBits) {
  DS_REQUIRE_PDL();
  const size_t vocab = 100, dim = 256, n_ids = 6;
  Rng rng(41);
  DeviceArray<float> table(rng.vec(vocab * dim));
  const cpu::WeightView view{GgmlType::F32, table.get(), vocab, dim, dim * sizeof(float)};
  DeviceArray<int32_t> ids0(std::vector<int32_t>{5, 99, 0, 42, 42, 7}), ids(n_ids);
  DeviceArray<uint32_t> pick(std::vector<uint32_t>{4, 1, 3}), place(std::vector<uint32_t>{9, 0, 5});
  DeviceArray<float> e(n_ids * dim), e2(n_ids * dim), g(3 * dim), g2(3 * dim), dst0(rng.vec(10 * dim)), dst(10 * dim);
  const auto run = [&](cudaStream_t s) {
    DS_CUDA_CHECK(cudaMemcpyAsync(dst.get(), dst0.get(), dst.size() * 4, cudaMemcpyDeviceToDevice, s));
    late(ids0.get(), ids.get(), n_ids, s);
    DS_CUDA_CHECK(embed_rows(view, ids.get(), n_ids, e.get(), s));
    late(e.get(), e2.get(), n_ids * dim, s);
    DS_CUDA_CHECK(gather_rows(e2.get(), pick.get(), 3, dim, g.get(), s));
    late(g.get(), g2.get(), 3 * dim, s);
    DS_CUDA_CHECK(scatter_rows(g2.get(), place.get(), 3, dim, dst.get(), s));
    std::vector<uint32_t> out;
    for (const DeviceArray<float>* r : {&e, &g, &dst}) append(&out, *r, s);
    return out;
  };
  expect_same_bits_either_way("embed / gather / scatter", run);
  EXPECT_TRUE(all_finite(dst.download()));
}

}  // namespace
}  // namespace ds::cuda::test
