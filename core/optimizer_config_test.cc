#include "core/optimizer_config.h"

#include <gtest/gtest.h>

namespace asyncps {
namespace {

constexpr OptimizerKind kAllKinds[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                       OptimizerKind::kAdagrad, OptimizerKind::kAdam,
                                       OptimizerKind::kFtrl};

TEST(OptimizerKindTest, NamesRoundTrip) {
  for (OptimizerKind kind : kAllKinds) {
    absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind(OptimizerKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_STREQ(OptimizerKindName(OptimizerKind::kAdam), "adam");
}

TEST(OptimizerKindTest, RejectsUnknownEmptyAndMiscasedNames) {
  for (const char* name : {"rmsprop", "", "Adam", "sgd "}) {
    absl::StatusOr<OptimizerKind> parsed = ParseOptimizerKind(name);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
}

// The builders' defaults and the struct's field initialisers come from the same constants:
// a config built by hand for SGD equals opt::SGD().
TEST(OptimizerBuildersTest, DefaultsAgreeWithTheStruct) {
  const OptimizerConfig by_hand;
  const OptimizerConfig sgd = opt::SGD();
  EXPECT_EQ(sgd.kind, OptimizerKind::kSgd);
  EXPECT_EQ(sgd.learning_rate, by_hand.learning_rate);
  const OptimizerConfig adam = opt::Adam();
  EXPECT_EQ(adam.kind, OptimizerKind::kAdam);
  EXPECT_EQ(adam.learning_rate, kDefaultAdamLearningRate);
  EXPECT_EQ(adam.beta_1, by_hand.beta_1);
  EXPECT_EQ(adam.beta_2, by_hand.beta_2);
  EXPECT_EQ(adam.epsilon, by_hand.epsilon);
  const OptimizerConfig ftrl = opt::Ftrl(0.5f, 0.1f);
  EXPECT_EQ(ftrl.kind, OptimizerKind::kFtrl);
  EXPECT_EQ(ftrl.l1, 0.1f);
  EXPECT_EQ(ftrl.initial_accumulator_value, by_hand.initial_accumulator_value);
  const OptimizerConfig momentum = opt::Momentum(0.1f, 0.9f, true);
  EXPECT_EQ(momentum.kind, OptimizerKind::kMomentum);
  EXPECT_TRUE(momentum.nesterov);
}

}  // namespace
}  // namespace asyncps
