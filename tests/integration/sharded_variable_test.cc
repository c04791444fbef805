// TensorFlow's ParameterServerStrategy placement and ShardedVariable tests
// (parameter_server_strategy_v2_test.py, sharded_variable_test.py), against real PS processes.
#include <memory>

#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "partitioners/partitioner.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;

class ShardedVariableTest : public ::testing::Test {
 protected:
  // Starts `num_ps` parameter servers (once per test) and a strategy with `partitioner`.
  void StartCluster(int num_ps, std::shared_ptr<const Partitioner> partitioner) {
    if (cluster_ == nullptr || cluster_->chief_spec().num_ps() != num_ps) {
      chief_.reset();
      LocalCluster::Options o;
      o.num_ps = num_ps;
      o.num_workers = 1;
      auto cluster = LocalCluster::Start(o);
      ASSERT_TRUE(cluster.ok()) << cluster.status();
      cluster_ = std::move(*cluster);
    }
    auto chief = cluster_->MakeChief(std::move(partitioner));
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
  }

  void TearDown() override {
    chief_.reset();
    cluster_.reset();
  }

  static std::shared_ptr<const Partitioner> Fixed(int shards) {
    return std::shared_ptr<const Partitioner>(FixedShardsPartitioner::Create(shards).value());
  }

  static Tensor Rows(int64_t rows, int64_t cols) {
    Tensor t(DType::kF32, {rows, cols});
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
    return t;
  }

  static std::vector<int64_t> ShardRows(const ShardedVariable& v) {
    std::vector<int64_t> rows;
    for (const auto& s : v.shards()) rows.push_back(s.row_end - s.row_begin);
    return rows;
  }
  static std::vector<int> ShardPs(const ShardedVariable& v) {
    std::vector<int> ps;
    for (const auto& s : v.shards()) ps.push_back(s.ps);
    return ps;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
};

// TF testDefaultNoPartition / round-robin placement on 3 PS.
TEST_F(ShardedVariableTest, PlainVariablesGoRoundRobin) {
  StartCluster(3, nullptr);
  std::vector<int> placed;
  for (const char* name : {"v1", "v2", "v3", "v4"}) {
    auto v = chief_->strategy().CreateVariable(name, init::Ones({3}));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->num_shards(), 1u);
    EXPECT_EQ(v->shards()[0].name, name);
    placed.push_back(v->shards()[0].ps);
  }
  EXPECT_EQ(placed, (std::vector<int>{0, 1, 2, 0}));
}

// TF testBasic: a (5, 2) variable split by FixedShardsPartitioner(2) into 3 + 2 rows.
TEST_F(ShardedVariableTest, FiveByTwoSplitsThreePlusTwoOnTwoPs) {
  StartCluster(2, Fixed(2));
  auto v = chief_->strategy().CreateVariable("v", init::FromTensor(Rows(5, 2)));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(ShardRows(*v), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ShardPs(*v), (std::vector<int>{0, 1}));
  EXPECT_EQ(v->shards()[0].name, "v/part_0");
  EXPECT_EQ(v->shards()[1].name, "v/part_1");
  auto value = v->Read();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_TRUE(value->Equals(Rows(5, 2)));
  // Plain variables created afterwards continue the same round-robin counter.
  auto w = chief_->strategy().CreateVariable("w", init::Zeros({}));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->shards()[0].ps, 0);
}

// 10 rows into 4 shards -> 3,3,2,2 on ps 0,1,0,1; asking 4 shards of 3 rows gives 3 shards.
TEST_F(ShardedVariableTest, DivStrategyAndShardCap) {
  StartCluster(2, Fixed(4));
  auto v = chief_->strategy().CreateVariable("ten", init::Zeros({10, 4}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(ShardRows(*v), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(ShardPs(*v), (std::vector<int>{0, 1, 0, 1}));
  auto small = chief_->strategy().CreateVariable("three", init::Zeros({3, 4}));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(ShardRows(*small), (std::vector<int64_t>{1, 1, 1}));
}

TEST_F(ShardedVariableTest, LargeMinSizePartitionerGivesPlainVariables) {
  StartCluster(2, std::shared_ptr<const Partitioner>(MinSizePartitioner::Create(64 << 20, 2).value()));
  auto v = chief_->strategy().CreateVariable("dense", init::Zeros({100, 100}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->num_shards(), 1u);
  EXPECT_EQ(v->shards()[0].name, "dense");
}

// A partitioner answering nonsense is rejected before anything is created.
class ConstantPartitioner : public Partitioner {
 public:
  explicit ConstantPartitioner(std::vector<int> answer) : answer_(std::move(answer)) {}
  absl::StatusOr<std::vector<int>> Partition(const Shape&, DType) const override { return answer_; }
  std::string DebugString() const override { return "constant"; }

 private:
  std::vector<int> answer_;
};

TEST_F(ShardedVariableTest, InvalidPartitionerResultsAreRejected) {
  for (const std::vector<int>& bad : {std::vector<int>{}, std::vector<int>{0, 1}, std::vector<int>{1, 2},
                                      std::vector<int>{2, 2}}) {
    StartCluster(2, std::make_shared<ConstantPartitioner>(bad));
    auto v = chief_->strategy().CreateVariable("bad", init::Zeros({4, 4}));
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    EXPECT_FALSE(chief_->strategy().GetVariable("bad").ok());
  }
}

// TF sharded_variable_test testScatterOps on uneven shards: 32 rows in 3 shards (11/11/10).
TEST_F(ShardedVariableTest, UnevenScatterAcrossShards) {
  StartCluster(2, Fixed(3));
  auto v = chief_->strategy().CreateVariable("table", init::FromTensor(Rows(32, 2)));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(ShardRows(*v), (std::vector<int64_t>{11, 11, 10}));
  const Tensor ids = Tensor::FromVector<int64_t>({0, 10, 11, 12, 30, 31});
  Tensor delta(DType::kF32, {6, 2});
  for (int64_t i = 0; i < 12; ++i) delta.data<float>()[i] = 1000.0f * static_cast<float>(i + 1);
  ASSERT_TRUE(v->ScatterAdd(ids, delta).ok());
  auto value = v->Read();
  ASSERT_TRUE(value.ok());
  Tensor expected = Rows(32, 2);
  const int64_t rows[] = {0, 10, 11, 12, 30, 31};
  for (int k = 0; k < 6; ++k) {
    for (int c = 0; c < 2; ++c) expected.data<float>()[rows[k] * 2 + c] += delta.data<float>()[k * 2 + c];
  }
  EXPECT_TRUE(value->Equals(expected)) << value->DebugString(64);

  ASSERT_TRUE(v->ScatterUpdate(Tensor::FromVector<int64_t>({31, 0}), Tensor::FromVector<float>({2, 2}, {-1, -2, -3, -4}))
                  .ok());
  auto rows_back = v->Gather(Tensor::FromVector<int64_t>({0, 31}));
  ASSERT_TRUE(rows_back.ok());
  EXPECT_TRUE(rows_back->Equals(Tensor::FromVector<float>({2, 2}, {-3, -4, -1, -2})));
  ASSERT_TRUE(v->ScatterMax(Tensor::FromVector<int64_t>({5}), Tensor::FromVector<float>({1, 2}, {-1, 100})).ok());
  rows_back = v->Gather(Tensor::FromVector<int64_t>({5}));
  ASSERT_TRUE(rows_back.ok());
  EXPECT_TRUE(rows_back->Equals(Tensor::FromVector<float>({1, 2}, {10, 100})));
}

// TF testEmbeddingLookup: ids [0, 3, 4] on shards of 2, 2 and 1 rows.
TEST_F(ShardedVariableTest, EmbeddingLookupAcrossShards) {
  StartCluster(2, Fixed(3));
  auto v = chief_->strategy().CreateVariable("emb", init::FromTensor(Rows(5, 3)));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(ShardRows(*v), (std::vector<int64_t>{2, 2, 1}));
  auto rows = v->Gather(Tensor::FromVector<int64_t>({0, 3, 4}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->Equals(Tensor::FromVector<float>({3, 3}, {0, 1, 2, 9, 10, 11, 12, 13, 14})));
  // Duplicates and any order, i32 ids too.
  rows = v->Gather(Tensor::FromVector<int32_t>({4, 0, 4}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->Equals(Tensor::FromVector<float>({3, 3}, {12, 13, 14, 0, 1, 2, 12, 13, 14})));
}

TEST_F(ShardedVariableTest, OutOfRangeIdsChangeNothing) {
  StartCluster(2, Fixed(2));
  auto v = chief_->strategy().CreateVariable("t", init::FromTensor(Rows(4, 1)));
  ASSERT_TRUE(v.ok());
  // The last id is bad: no shard may apply the earlier good ones.
  absl::Status s = v->ScatterAdd(Tensor::FromVector<int64_t>({0, 3, 4}), Tensor::FromVector<float>({3, 1}, {1, 1, 1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_EQ(v->Gather(Tensor::FromVector<int64_t>({-1})).status().code(), absl::StatusCode::kOutOfRange);
  auto value = v->Read();
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(value->Equals(Rows(4, 1)));
  // Wrong shapes and dtypes are rejected too.
  EXPECT_FALSE(v->Assign(Rows(3, 1)).ok());
  EXPECT_FALSE(v->AssignAdd(Tensor::FromVector<int64_t>({4, 1}, {1, 1, 1, 1})).ok());
  value = v->Read();
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(value->Equals(Rows(4, 1)));
}

TEST_F(ShardedVariableTest, ShardedInitialisationEqualsUnsharded) {
  StartCluster(2, nullptr);
  auto whole = chief_->strategy().CreateVariable("whole", init::GlorotUniform({13, 8}, /*seed=*/42));
  ASSERT_TRUE(whole.ok());
  auto a = whole->Read();  // before its strategy is replaced: handles live as long as it
  StartCluster(2, Fixed(5));
  auto sharded = chief_->strategy().CreateVariable("sharded", init::GlorotUniform({13, 8}, /*seed=*/42));
  ASSERT_TRUE(sharded.ok());
  EXPECT_EQ(ShardRows(*sharded), (std::vector<int64_t>{3, 3, 3, 2, 2}));
  auto b = sharded->Read();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->Equals(*b));
  const double limit = std::sqrt(6.0 / (13 + 8));
  for (float x : a->flat<float>()) EXPECT_LE(std::fabs(x), limit);
}

TEST_F(ShardedVariableTest, DenseUpdatesSplitAcrossShards) {
  StartCluster(2, Fixed(2));
  auto v = chief_->strategy().CreateVariable("d", init::Ones({5, 2}));
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->AssignAdd(Rows(5, 2)).ok());
  ASSERT_TRUE(v->AssignSub(Tensor::FromVector<float>({5, 2}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1})).ok());
  auto value = v->Read();
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(value->Equals(Rows(5, 2)));
}

}  // namespace
}  // namespace asyncps
