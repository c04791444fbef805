// Gradient compression with error feedback (PsClient::Options::compression) against real
// PsServices: what a push does not send stays in the worker's residual and goes with a later
// push; a closure re-run on another worker is deduplicated as any push and gives that worker's
// residual back untouched; a worker restarted with a residual loses only that residual; every
// closure's update is applied exactly once. Gradients are small integers and SGD's learning
// rate is 1, so every sum below is exact in f32 and the books balance to the bit:
//   sum of the gradients of the closures applied = -(the variable) + the residuals held + lost.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "core/compression.h"
#include "core/optimizer_config.h"
#include "worker/local_ps_services_testing.h"
#include "worker/ps_client.h"

namespace asyncps {
namespace gradient_compression_test_internal {
namespace {

constexpr char kToken[] = "gradient-compression-test";
constexpr uint64_t kCoordinator = 100;

ps::UpdateTag Closure(uint64_t n) { return ps::UpdateTag{kCoordinator, kCoordinator + n, 1, kCoordinator}; }

std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.flat<float>().begin(), t.flat<float>().end()); }

// A gradient of small integers, different for each `seed`.
Tensor Gradient(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 7 + seed * 13) % 11) - 5);
  return Tensor::FromVector<float>({static_cast<int64_t>(n)}, absl::MakeConstSpan(v));
}

class GradientCompressionTest : public ::testing::Test {
 protected:
  static constexpr size_t kN = 40;

  void SetUp() override {
    auto ps = LocalPsServices::Start(2, kToken);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    ASSERT_TRUE(ps_->Create(PlainPlacement("w", {static_cast<int64_t>(kN)}, 0), opt::SGD(1.0f)).ok());
    VariablePlacement rows = PlainPlacement("emb", {4, 2}, 1);
    ASSERT_TRUE(ps_->Create(rows, opt::SGD(1.0f)).ok());
  }

  // A worker's client: topk:0.25 unless told.
  std::unique_ptr<PsClient> Worker(const std::string& compression = "topk:0.25") {
    PsClient::Options options;
    options.compression = ParseCompression(compression).value();
    return std::make_unique<PsClient>(ps_->client().connections(), ps_->directory(), options);
  }

  std::vector<float> W() {
    auto read = ps_->client().Read({"w"});
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? Floats((*read)[0]) : std::vector<float>();
  }

  // Checks the books: -w + each residual in `held` == `pushed` (the sum of the gradients of
  // the closures the PS applied), element by element, exactly.
  void ExpectBooksBalance(const std::vector<float>& pushed, const std::vector<std::vector<float>>& held) {
    const std::vector<float> w = W();
    ASSERT_EQ(w.size(), kN);
    for (size_t i = 0; i < kN; ++i) {
      float total = -w[i];
      for (const std::vector<float>& r : held) total += r.empty() ? 0.0f : r[i];
      EXPECT_EQ(total, pushed[i]) << "element " << i;
    }
  }

  static void Add(std::vector<float>& sum, const Tensor& g) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += g.data<float>()[i];
  }

  std::unique_ptr<LocalPsServices> ps_;
};

TEST_F(GradientCompressionTest, TopKKeepsWhatItDoesNotSendAndSendsItLater) {
  auto worker = Worker();
  std::vector<float> pushed(kN, 0.0f);
  for (int step = 0; step < 6; ++step) {
    const Tensor g = Gradient(kN, step);
    const std::vector<float> before = W();
    ASSERT_TRUE(worker->PushGradients({{"w", g, std::nullopt}}, Closure(step + 1)).ok());
    Add(pushed, g);
    const std::vector<float> after = W();
    size_t moved = 0;
    for (size_t i = 0; i < kN; ++i) moved += after[i] != before[i];
    EXPECT_LE(moved, TopKCount(kN, 0.25)) << "only the top quarter travels";
    ExpectBooksBalance(pushed, {worker->residuals().Peek("w")});
  }
  const std::vector<float> residual = worker->residuals().Peek("w");
  EXPECT_NE(std::accumulate(residual.begin(), residual.end(), 0.0f, [](float a, float b) { return a + std::abs(b); }),
            0.0f)
      << "the test needs a residual left behind";
}

// Buffers come back for a later push of the same size (no allocation per step), never one of
// another size.
TEST(GradientResidualsTest, RecycledBuffersAreReusedBySize) {
  GradientResiduals residuals;
  std::vector<float> a = residuals.Buffer(100);
  ASSERT_EQ(a.size(), 100u);
  const float* storage = a.data();
  residuals.Recycle(std::move(a));
  std::vector<float> other = residuals.Buffer(50);
  EXPECT_EQ(other.size(), 50u);
  std::vector<float> again = residuals.Buffer(100);
  EXPECT_EQ(again.data(), storage) << "the recycled buffer of that size";
  // A Give that adds into a residual held recycles the one given.
  residuals.Give("s", std::vector<float>(100, 1.0f));
  residuals.Give("s", std::move(again));
  EXPECT_EQ(residuals.Buffer(100).data(), storage);
  std::vector<const float*> kept;
  for (size_t i = 0; i < GradientResiduals::kSpareBuffers + 4; ++i) {
    std::vector<float> b(8);
    kept.push_back(b.data());
    residuals.Recycle(std::move(b));
  }
  // The first kSpareBuffers recycled are kept (the rest freed): each comes back once.
  std::vector<std::vector<float>> taken;  // all alive at once: no address is handed out twice
  for (size_t i = 0; i < GradientResiduals::kSpareBuffers; ++i) {
    taken.push_back(residuals.Buffer(8));
    EXPECT_NE(std::find(kept.begin(), kept.begin() + GradientResiduals::kSpareBuffers, taken.back().data()),
              kept.begin() + GradientResiduals::kSpareBuffers)
        << i;
  }
}

TEST_F(GradientCompressionTest, Int8WithErrorFeedbackIsExactForValuesItHolds) {
  auto worker = Worker("int8");
  std::vector<float> g(kN, 3.0f);
  g[0] = 127;  // the block's scale is 1: every integer in [-127, 127] is exact
  const Tensor t = Tensor::FromVector<float>({static_cast<int64_t>(kN)}, absl::MakeConstSpan(g));
  ASSERT_TRUE(worker->PushGradients({{"w", t, std::nullopt}}, Closure(1)).ok());
  std::vector<float> expected(kN);
  for (size_t i = 0; i < kN; ++i) expected[i] = -g[i];
  EXPECT_EQ(W(), expected);
  EXPECT_EQ(worker->residuals().Peek("w"), std::vector<float>(kN, 0.0f));
}

// Closure 2 ran on worker A (applied), then is re-run on worker B, which holds a residual of
// its own from closure 1 and computes another gradient: the PS skips B's push as applied
// before, and B's residual is what it was, so nothing of closure 2 counts twice and nothing of
// closure 1 is lost.
TEST_F(GradientCompressionTest, AClosureReRunOnAnotherWorkerIsAppliedOnceAndKeepsItsResidual) {
  auto a = Worker(), b = Worker();
  std::vector<float> pushed(kN, 0.0f);
  const Tensor g1 = Gradient(kN, 1), g2 = Gradient(kN, 2), g2_rerun = Gradient(kN, 3);
  ASSERT_TRUE(b->PushGradients({{"w", g1, std::nullopt}}, Closure(1)).ok());
  Add(pushed, g1);
  const std::vector<float> b_residual = b->residuals().Peek("w");
  ASSERT_FALSE(b_residual.empty());
  ASSERT_TRUE(a->PushGradients({{"w", g2, std::nullopt}}, Closure(2)).ok());
  Add(pushed, g2);
  const std::vector<float> w_before = W();
  // The re-run, through the fused push-and-read as the main job pushes: applied nothing, and
  // answers the values.
  auto rerun = b->PushGradientsAndReadAsync({{"w", g2_rerun, std::nullopt}}, {"w"}, Closure(2)).Get();
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_EQ(Floats(rerun->values[0]), w_before);
  EXPECT_EQ(W(), w_before) << "closure 2 applied once";
  EXPECT_EQ(b->residuals().Peek("w"), b_residual) << "the re-run gave B's residual back";
  ExpectBooksBalance(pushed, {a->residuals().Peek("w"), b->residuals().Peek("w")});
}

// Worker A pushes closures 1-3 and dies with a residual; its replacement (a new process: no
// residual) runs closures 4-5 and then closure 3 again (the coordinator sent it back to the
// queue): the PS skips that one. Every closure is applied once; what is lost is A's residual,
// exactly.
TEST_F(GradientCompressionTest, AWorkerRestartedWithAResidualLosesOnlyThatResidual) {
  std::vector<float> pushed(kN, 0.0f);
  std::vector<float> lost;
  {
    auto a = Worker();
    for (int c = 1; c <= 3; ++c) {
      const Tensor g = Gradient(kN, c);
      ASSERT_TRUE(a->PushGradients({{"w", g, std::nullopt}}, Closure(c)).ok());
      Add(pushed, g);
    }
    lost = a->residuals().Peek("w");
  }  // A dies: its residual with it
  ASSERT_FALSE(lost.empty());
  auto replacement = Worker();
  for (int c = 4; c <= 5; ++c) {
    const Tensor g = Gradient(kN, c);
    ASSERT_TRUE(replacement->PushGradients({{"w", g, std::nullopt}}, Closure(c)).ok());
    Add(pushed, g);
  }
  const std::vector<float> w_before = W();
  const std::vector<float> residual_before = replacement->residuals().Peek("w");
  ASSERT_TRUE(replacement->PushGradients({{"w", Gradient(kN, 9), std::nullopt}}, Closure(3)).ok());
  EXPECT_EQ(W(), w_before) << "closure 3 was applied by A: its re-run applies nothing";
  EXPECT_EQ(replacement->residuals().Peek("w"), residual_before);
  ExpectBooksBalance(pushed, {lost, replacement->residuals().Peek("w")});
}

// A push the PS refuses (here: NaN in the gradient) applies nothing and leaves the residual as
// it was: the closure's re-run computes its gradient again.
TEST_F(GradientCompressionTest, ARefusedPushGivesTheResidualBack) {
  auto worker = Worker();
  ASSERT_TRUE(worker->PushGradients({{"w", Gradient(kN, 1), std::nullopt}}, Closure(1)).ok());
  const std::vector<float> residual = worker->residuals().Peek("w");
  const std::vector<float> w = W();
  std::vector<float> bad = Floats(Gradient(kN, 2));
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  const Tensor t = Tensor::FromVector<float>({static_cast<int64_t>(kN)}, absl::MakeConstSpan(bad));
  EXPECT_EQ(worker->PushGradients({{"w", t, std::nullopt}}, Closure(2)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(W(), w);
  EXPECT_EQ(worker->residuals().Peek("w"), residual);
}

// Closures running at once on one worker (the main job runs three) push the same shard
// together through the fused push-and-read: each takes the residual or finds it taken, and the
// books still balance to the bit once all are answered. (Run under TSan too: the residual store
// is shared by the callers' threads and the client's I/O thread, which settles the residuals.)
TEST_F(GradientCompressionTest, ConcurrentPushesOfOneShardKeepTheBooks) {
  auto worker = Worker();
  constexpr int kThreads = 4, kPushesEach = 8;
  std::vector<std::vector<float>> pushed_by(kThreads, std::vector<float>(kN, 0.0f));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPushesEach; ++i) {
        const int closure = 1 + t * kPushesEach + i;
        const Tensor g = Gradient(kN, closure);
        auto done = worker->PushGradientsAndReadAsync({{"w", g, std::nullopt}}, {"w"}, Closure(closure)).Get();
        EXPECT_TRUE(done.ok()) << done.status();
        if (done.ok()) Add(pushed_by[t], g);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<float> pushed(kN, 0.0f);
  for (const std::vector<float>& p : pushed_by) {
    for (size_t i = 0; i < kN; ++i) pushed[i] += p[i];
  }
  ExpectBooksBalance(pushed, {worker->residuals().Peek("w")});
}

// Row gradients and per-push "none" travel exactly, whatever the client's compression; they
// leave no residual.
TEST_F(GradientCompressionTest, RowGradientsAndAPerPushNoneAreExact) {
  auto worker = Worker("int8");
  const Tensor rows = Tensor::FromVector<float>({2, 2}, {0.1f, 0.2f, 0.3f, 0.4f});
  ASSERT_TRUE(worker->PushGradients({{"emb", rows, Tensor::FromVector<int64_t>({3, 1})}}).ok());
  auto emb = ps_->client().Read({"emb"});
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(Floats((*emb)[0]), (std::vector<float>{0, 0, -0.3f, -0.4f, 0, 0, -0.1f, -0.2f}));
  std::vector<float> g(kN, 0.01f);
  g[1] = 0.7f;  // int8 would round 0.01 (0.7 / 127 steps)
  const Tensor t = Tensor::FromVector<float>({static_cast<int64_t>(kN)}, absl::MakeConstSpan(g));
  GradientUpdate exact{"w", t, std::nullopt, Compression{}};
  ASSERT_TRUE(worker->PushGradients({exact}).ok());
  std::vector<float> expected(kN);
  for (size_t i = 0; i < kN; ++i) expected[i] = -g[i];
  EXPECT_EQ(W(), expected);
  EXPECT_EQ(worker->residuals().size(), 0u);
}

// Quantized reads (Options::pull int8): each value comes within half an int8 step (its
// block's largest magnitude / 254) of the PS's, sharded variables too, and through the fused
// push-and-read; the PS keeps its f32 values.
TEST_F(GradientCompressionTest, Int8PullsComeWithinHalfAStep) {
  VariablePlacement table;
  table.name = "table";
  table.dtype = DType::kF32;
  table.shape = {300, 2};
  table.shards = {{"table/part_0", 0, 0, 150}, {"table/part_1", 1, 150, 300}};
  ASSERT_TRUE(ps_->Create(table, opt::SGD(1.0f)).ok());
  std::vector<float> values(600);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i % 37) - 0.013f * (i % 5);
  const Tensor exact = Tensor::FromVector<float>({300, 2}, absl::MakeConstSpan(values));
  ASSERT_TRUE(ps_->client().Update({{"table", UpdateKind::kAssign, exact, std::nullopt}}).ok());
  PsClient::Options options;
  options.pull = ParsePullCompression("int8").value();
  PsClient worker(ps_->client().connections(), ps_->directory(), options);
  auto check = [&](const Tensor& read, const std::vector<float>& want) {
    ASSERT_EQ(read.shape(), (Shape{300, 2}));
    const std::vector<float> got = Floats(read);
    bool some_rounded = false;
    for (size_t shard = 0; shard < 2; ++shard) {  // each shard is encoded on its own
      for (size_t b = shard * 300; b < shard * 300 + 300; b += kInt8BlockSize) {
        const size_t end = std::min(shard * 300 + 300, b + kInt8BlockSize);
        float max_abs = 0;
        for (size_t i = b; i < end; ++i) max_abs = std::max(max_abs, std::abs(want[i]));
        for (size_t i = b; i < end; ++i) {
          EXPECT_LE(std::abs(got[i] - want[i]), max_abs / 254 * 1.001f) << i;
          some_rounded = some_rounded || got[i] != want[i];
        }
      }
    }
    EXPECT_TRUE(some_rounded) << "the test needs values int8 rounds";
  };
  auto read = worker.ReadVersioned({"table"});
  ASSERT_TRUE(read.ok()) << read.status();
  check(read->values[0], values);
  EXPECT_EQ(read->versions.size(), 2u);
  const Tensor g = Tensor::FromVector<float>({300, 2}, std::vector<float>(600, 0.5f));
  auto fused = worker.PushGradientsAndReadAsync({{"table", g, std::nullopt}}, {"table"}).Get();
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::vector<float> after(600);
  for (size_t i = 0; i < 600; ++i) after[i] = values[i] - 0.5f;
  check(fused->values[0], after);
  auto kept = ps_->client().Read({"table"});
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(Floats((*kept)[0]), after) << "the PS keeps f32, and the push was exact (compression none)";
}

}  // namespace
}  // namespace gradient_compression_test_internal
}  // namespace asyncps
