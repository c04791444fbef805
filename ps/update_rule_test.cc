#include "ps/update_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace asyncps::ps {
namespace {

std::unique_ptr<UpdateRule> MustCreate(const OptimizerConfig& config) {
  absl::StatusOr<std::unique_ptr<UpdateRule>> opt = UpdateRule::Create(config);
  EXPECT_TRUE(opt.ok()) << opt.status();
  return opt.ok() ? std::move(*opt) : nullptr;
}

OptimizerConfig Config(const std::string& kind_name, float lr) {
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(kind_name);
  EXPECT_TRUE(kind.ok()) << kind.status();
  OptimizerConfig c;
  c.kind = kind.value_or(OptimizerKind::kSgd);
  c.learning_rate = lr;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Reference rules: one element at a time, in double, written from the TF/Keras documentation
// independently of update_rule.cc (FTRL uses the clip form of keras/src/optimizers/ftrl.py rather
// than the sign/select form of the kernel). `s` holds the slots in slots() order.

using RefFn = void (*)(const OptimizerConfig& c, double& w, double* s, double g, int64_t t);

void RefSgd(const OptimizerConfig& c, double& w, double* /*s*/, double g, int64_t /*t*/) {
  w = w - double{c.learning_rate} * g;
}

void RefMomentum(const OptimizerConfig& c, double& w, double* s, double g, int64_t /*t*/) {
  const double lr = c.learning_rate;
  const double mu = c.momentum;
  double& velocity = s[0];
  velocity = mu * velocity - lr * g;
  w = c.nesterov ? w + mu * velocity - lr * g : w + velocity;
}

void RefAdagrad(const OptimizerConfig& c, double& w, double* s, double g, int64_t /*t*/) {
  double& acc = s[0];
  acc = acc + g * g;
  w = w - double{c.learning_rate} * g / (std::sqrt(acc) + double{c.epsilon});
}

void RefAdam(const OptimizerConfig& c, double& w, double* s, double g, int64_t t) {
  const double b1 = c.beta_1;
  const double b2 = c.beta_2;
  const double lr_t = double{c.learning_rate} * std::sqrt(1.0 - std::pow(b2, double(t))) /
                      (1.0 - std::pow(b1, double(t)));
  double& m = s[0];
  double& v = s[1];
  m = b1 * m + (1.0 - b1) * g;
  v = b2 * v + (1.0 - b2) * g * g;
  w = w - lr_t * m / (std::sqrt(v) + double{c.epsilon});
}

void RefFtrl(const OptimizerConfig& c, double& w, double* s, double g, int64_t /*t*/) {
  const double lr = c.learning_rate;
  const double power = c.learning_rate_power;
  const double l1 = c.l1;
  const double l2 = double{c.l2} + double{c.beta} / (2.0 * lr);
  double& accum = s[0];
  double& linear = s[1];
  const double g_shrunk = g + 2.0 * double{c.l2_shrinkage} * w;
  const double new_accum = accum + g * g;
  const double sigma = (std::pow(new_accum, -power) - std::pow(accum, -power)) / lr;
  linear = linear + g_shrunk - sigma * w;
  const double quadratic = std::pow(new_accum, -power) / lr + 2.0 * l2;
  w = (std::clamp(linear, -l1, l1) - linear) / quadratic;
  accum = new_accum;
}

RefFn RefFor(const OptimizerConfig& c) {
  switch (c.kind) {
    case OptimizerKind::kSgd:
      return c.momentum > 0.0f ? RefMomentum : RefSgd;
    case OptimizerKind::kMomentum:
      return RefMomentum;
    case OptimizerKind::kAdagrad:
      return RefAdagrad;
    case OptimizerKind::kAdam:
      return RefAdam;
    case OptimizerKind::kFtrl:
      return RefFtrl;
  }
  return RefFtrl;
}

// ---------------------------------------------------------------------------------------------
// Harness: the f32 state a PS keeps, and the same state in double for the reference.

struct State {
  std::vector<float> var;
  std::vector<std::vector<float>> slots;

  std::vector<float*> SlotPointers(int64_t offset = 0) {
    std::vector<float*> out;
    for (auto& s : slots) out.push_back(s.data() + offset);
    return out;
  }
};

State InitialState(const UpdateRule& opt, std::vector<float> var) {
  State st;
  const size_t n = var.size();
  st.var = std::move(var);
  for (const SlotSpec& spec : opt.slots()) st.slots.emplace_back(n, spec.initial_value);
  return st;
}

void ApplyDense(const UpdateRule& opt, State& st, const std::vector<float>& grad, int64_t step) {
  std::vector<float*> slots = st.SlotPointers();
  opt.Apply(st.var.data(), grad.data(), slots, static_cast<int64_t>(st.var.size()), step);
}

// Applies row by row, as the PS does for a sparse update that touches every row.
void ApplyRows(const UpdateRule& opt, State& st, const std::vector<float>& grad, int64_t row_len,
               int64_t step) {
  const int64_t rows = static_cast<int64_t>(st.var.size()) / row_len;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float*> slots = st.SlotPointers(r * row_len);
    opt.Apply(st.var.data() + r * row_len, grad.data() + r * row_len, slots, row_len, step);
  }
}

struct RefState {
  std::vector<double> var;
  std::vector<std::vector<double>> slots;
};

RefState InitialRefState(const std::vector<float>& var, const std::vector<float>& slot_inits) {
  RefState st;
  st.var.assign(var.begin(), var.end());
  for (float init : slot_inits) st.slots.emplace_back(var.size(), double{init});
  return st;
}

void ApplyRef(const OptimizerConfig& c, RefState& st, const std::vector<float>& grad,
              int64_t step) {
  const RefFn fn = RefFor(c);
  std::vector<double> s(st.slots.size());
  for (size_t i = 0; i < st.var.size(); ++i) {
    for (size_t k = 0; k < s.size(); ++k) s[k] = st.slots[k][i];
    fn(c, st.var[i], s.data(), double{grad[i]}, step);
    for (size_t k = 0; k < s.size(); ++k) st.slots[k][i] = s[k];
  }
}

// |actual - expected| <= atol + rtol * |expected| for var and every slot; reports how many
// elements fail and the first one.
testing::AssertionResult Near(const State& actual, const RefState& expected, double atol,
                              double rtol) {
  auto check = [&](const std::string& what, const std::vector<float>& a,
                   const std::vector<double>& e) -> std::string {
    if (a.size() != e.size()) return absl::StrCat(what, ": size ", a.size(), " vs ", e.size());
    int64_t bad = 0;
    std::string first;
    for (size_t i = 0; i < a.size(); ++i) {
      const double diff = std::abs(double{a[i]} - e[i]);
      if (!(diff <= atol + rtol * std::abs(e[i]))) {
        if (bad++ == 0) first = absl::StrCat(what, "[", i, "] = ", a[i], ", expected ", e[i]);
      }
    }
    return bad == 0 ? "" : absl::StrCat(bad, " mismatches, first ", first);
  };
  std::string err = check("var", actual.var, expected.var);
  for (size_t k = 0; err.empty() && k < actual.slots.size(); ++k) {
    err = check(absl::StrCat("slot ", k), actual.slots[k], expected.slots[k]);
  }
  if (err.empty()) return testing::AssertionSuccess();
  return testing::AssertionFailure() << err;
}

// ---------------------------------------------------------------------------------------------
// Every optimizer, several hyper-parameter settings, against the reference.

struct NamedConfig {
  std::string name;
  OptimizerConfig config;
};

// Short, so ctest's name (which carries the parameter's printout) fits one line.
void PrintTo(const NamedConfig& nc, std::ostream* os) { *os << nc.name; }

std::vector<NamedConfig> AllConfigs() {
  std::vector<NamedConfig> out;
  out.push_back({"sgd", Config("sgd", 0.1f)});
  {
    OptimizerConfig c = Config("momentum", 0.05f);
    c.momentum = 0.9f;
    out.push_back({"momentum", c});
    c.nesterov = true;
    out.push_back({"nesterov", c});
    c.kind = OptimizerKind::kSgd;  // Keras SGD(momentum=0.9, nesterov=True)
    out.push_back({"sgd_nesterov", c});
  }
  out.push_back({"adagrad", Config("adagrad", 0.1f)});
  {
    OptimizerConfig c = Config("adagrad", 0.3f);
    c.initial_accumulator_value = 0.0f;
    c.epsilon = 1e-3f;
    out.push_back({"adagrad_zero_init", c});
  }
  out.push_back({"adam", Config("adam", 0.01f)});
  {
    OptimizerConfig c = Config("adam", 0.2f);
    c.beta_1 = 0.5f;
    c.beta_2 = 0.8f;
    c.epsilon = 1e-3f;
    out.push_back({"adam_custom", c});
  }
  out.push_back({"ftrl", Config("ftrl", 0.1f)});
  {
    OptimizerConfig c = Config("ftrl", 0.2f);
    c.l1 = 0.05f;
    c.l2 = 0.1f;
    c.l2_shrinkage = 0.02f;
    c.beta = 0.5f;
    out.push_back({"ftrl_regularised", c});
    c.learning_rate_power = -0.3f;
    c.initial_accumulator_value = 0.5f;
    out.push_back({"ftrl_power", c});
    c.learning_rate_power = 0.0f;
    out.push_back({"ftrl_fixed_rate", c});
  }
  return out;
}

class OptimizerReferenceTest : public testing::TestWithParam<NamedConfig> {};

const std::vector<float> kVar0 = {0.5f, -1.25f, 2.0f, 0.0f, -0.3f, 1.7f, -2.2f, 0.05f};
const std::vector<std::vector<float>> kGrads = {
    {0.1f, -0.4f, 0.0f, 1.5f, -0.02f, 0.3f, 0.7f, -1.1f},
    {-0.2f, -0.3f, 0.6f, 0.0f, 0.05f, 0.3f, -0.9f, 0.4f},
    {0.25f, 0.8f, -0.1f, -0.5f, 0.0f, -0.6f, 0.2f, 0.01f},
};

TEST_P(OptimizerReferenceTest, ThreeStepsMatchDoubleReference) {
  const OptimizerConfig& c = GetParam().config;
  std::unique_ptr<UpdateRule> opt = MustCreate(c);
  ASSERT_NE(opt, nullptr);
  State st = InitialState(*opt, kVar0);
  std::vector<float> inits;
  for (const SlotSpec& s : opt->slots()) inits.push_back(s.initial_value);
  RefState ref = InitialRefState(kVar0, inits);
  for (int64_t step = 1; step <= 3; ++step) {
    ApplyDense(*opt, st, kGrads[step - 1], step);
    ApplyRef(c, ref, kGrads[step - 1], step);
    EXPECT_TRUE(Near(st, ref, 1e-6, 1e-5)) << "after step " << step;
  }
}

TEST_P(OptimizerReferenceTest, RowWiseEqualsDense) {
  std::unique_ptr<UpdateRule> opt = MustCreate(GetParam().config);
  ASSERT_NE(opt, nullptr);
  // 5 rows of 7: odd widths so rows straddle SIMD packets differently from the dense pass.
  constexpr int64_t kRowLen = 7;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> var0(5 * kRowLen);
  for (float& x : var0) x = dist(rng);
  State dense = InitialState(*opt, var0);
  State rows = InitialState(*opt, var0);
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> grad(var0.size());
    for (float& x : grad) x = dist(rng);
    ApplyDense(*opt, dense, grad, step);
    ApplyRows(*opt, rows, grad, kRowLen, step);
  }
  // Every operation is correctly rounded on both Eigen's packet path (dense) and its scalar
  // path (the ragged ends of each row), so the two agree bit for bit.
  for (size_t i = 0; i < var0.size(); ++i) EXPECT_EQ(rows.var[i], dense.var[i]) << "var " << i;
  for (size_t k = 0; k < dense.slots.size(); ++k) {
    for (size_t i = 0; i < var0.size(); ++i) {
      EXPECT_EQ(rows.slots[k][i], dense.slots[k][i]) << "slot " << k << " [" << i << "]";
    }
  }
}

// ApplyRows (the PS's sparse path: per-step constants once, then every touched row) must give
// exactly what one Apply per row gives, for rows in any order, leaving other rows alone.
TEST_P(OptimizerReferenceTest, ApplyRowsEqualsPerRowApply) {
  std::unique_ptr<UpdateRule> opt = MustCreate(GetParam().config);
  ASSERT_NE(opt, nullptr);
  const std::vector<std::vector<int64_t>> touched = {{7, 2, 0, 5}, {1, 8, 3}, {4, 2, 6, 0, 8}};
  // 7: ragged rows narrower than a packet; 64: the embedding width the PS bench pushes;
  // 2051: rows spanning a block boundary.
  for (int64_t row_len : {int64_t{7}, int64_t{64}, int64_t{2051}}) {
    SCOPED_TRACE(absl::StrCat("row_len ", row_len));
    constexpr int64_t kRows = 9;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> var0(static_cast<size_t>(kRows * row_len));
    for (float& x : var0) x = dist(rng);
    State per_row = InitialState(*opt, var0);
    State batched = InitialState(*opt, var0);
    for (size_t k = 0; k < touched.size(); ++k) {
      const int64_t step = static_cast<int64_t>(k) + 1;
      const std::vector<int64_t>& rows = touched[k];
      std::vector<float> grads(rows.size() * static_cast<size_t>(row_len));
      for (float& x : grads) x = dist(rng);
      for (size_t i = 0; i < rows.size(); ++i) {
        std::vector<float*> slots = per_row.SlotPointers(rows[i] * row_len);
        opt->Apply(per_row.var.data() + rows[i] * row_len,
                   grads.data() + static_cast<int64_t>(i) * row_len, slots, row_len, step);
      }
      std::vector<float*> slots = batched.SlotPointers();
      std::vector<const float*> grad_rows;
      for (size_t i = 0; i < rows.size(); ++i) grad_rows.push_back(grads.data() + static_cast<int64_t>(i) * row_len);
      opt->ApplyRows(batched.var.data(), slots, row_len, rows, grad_rows, step);
    }
    EXPECT_EQ(batched.var, per_row.var);
    EXPECT_EQ(batched.slots, per_row.slots);
  }
}

// An odd length far above the block size: exercises the vector body, block boundaries and the
// scalar tail against the element-by-element reference.
TEST_P(OptimizerReferenceTest, LargeOddLengthMatchesScalarReference) {
  const OptimizerConfig& c = GetParam().config;
  std::unique_ptr<UpdateRule> opt = MustCreate(c);
  ASSERT_NE(opt, nullptr);
  constexpr size_t kN = 1000003;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> var0(kN);
  for (float& x : var0) x = dist(rng);
  State st = InitialState(*opt, var0);
  std::vector<float> inits;
  for (const SlotSpec& s : opt->slots()) inits.push_back(s.initial_value);
  RefState ref = InitialRefState(var0, inits);
  std::vector<float> grad(kN);
  for (int64_t step = 1; step <= 2; ++step) {
    for (float& x : grad) x = dist(rng);
    ApplyDense(*opt, st, grad, step);
    ApplyRef(c, ref, grad, step);
  }
  EXPECT_TRUE(Near(st, ref, 2e-6, 2e-5));
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerReferenceTest, testing::ValuesIn(AllConfigs()),
                         [](const testing::TestParamInfo<NamedConfig>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------------------------
// Literal numbers worked out by hand (with Python in double for the square roots).

TEST(OptimizerLiteralTest, SgdThreeSteps) {
  std::unique_ptr<UpdateRule> opt = MustCreate(Config("sgd", 0.1f));
  State st = InitialState(*opt, {1.0f, -2.0f});
  for (int64_t step = 1; step <= 3; ++step) ApplyDense(*opt, st, {0.5f, 0.25f}, step);
  EXPECT_NEAR(st.var[0], 0.85, 1e-6);   // 1 - 3 * 0.1 * 0.5
  EXPECT_NEAR(st.var[1], -2.075, 1e-6);  // -2 - 3 * 0.1 * 0.25
}

TEST(OptimizerLiteralTest, MomentumAndNesterovThreeSteps) {
  OptimizerConfig c = Config("momentum", 0.1f);
  c.momentum = 0.9f;
  std::unique_ptr<UpdateRule> plain = MustCreate(c);
  c.nesterov = true;
  std::unique_ptr<UpdateRule> nesterov = MustCreate(c);
  State a = InitialState(*plain, {1.0f});
  State b = InitialState(*nesterov, {1.0f});
  for (int64_t step = 1; step <= 3; ++step) {
    ApplyDense(*plain, a, {1.0f}, step);
    ApplyDense(*nesterov, b, {1.0f}, step);
  }
  // v: -0.1, -0.19, -0.271; var: 0.9, 0.71, 0.439.
  EXPECT_NEAR(a.slots[0][0], -0.271, 1e-6);
  EXPECT_NEAR(a.var[0], 0.439, 1e-6);
  // Same v; var steps by 0.9 * v - 0.1: -0.19, -0.271, -0.3439.
  EXPECT_NEAR(b.slots[0][0], -0.271, 1e-6);
  EXPECT_NEAR(b.var[0], 0.1951, 1e-6);
}

TEST(OptimizerLiteralTest, AdagradThreeSteps) {
  std::unique_ptr<UpdateRule> opt = MustCreate(Config("adagrad", 0.1f));
  State st = InitialState(*opt, {1.0f});
  const double expected[] = {0.904653750166349, 0.835647198994018, 0.7788510187951178};
  for (int64_t step = 1; step <= 3; ++step) {
    ApplyDense(*opt, st, {1.0f}, step);
    EXPECT_NEAR(st.var[0], expected[step - 1], 1e-6) << step;
  }
  EXPECT_NEAR(st.slots[0][0], 3.1, 1e-6);
}

TEST(OptimizerLiteralTest, AdamFirstStepMovesByAboutLearningRate) {
  std::unique_ptr<UpdateRule> opt = MustCreate(Config("adam", 0.1f));
  State st = InitialState(*opt, {1.0f});
  ApplyDense(*opt, st, {0.5f}, 1);
  // Bias correction makes the first step lr * g / (|g| + eps / sqrt(1 - beta_2)).
  EXPECT_NEAR(st.var[0], 0.9000006324515321, 1e-6);
  EXPECT_NEAR(st.slots[0][0], 0.05, 1e-7);     // (1 - 0.9) * 0.5
  EXPECT_NEAR(st.slots[1][0], 0.00025, 1e-8);  // (1 - 0.999) * 0.25
}

TEST(OptimizerLiteralTest, FtrlFirstStep) {
  std::unique_ptr<UpdateRule> opt = MustCreate(Config("ftrl", 0.1f));
  State st = InitialState(*opt, {1.0f});
  ApplyDense(*opt, st, {0.5f}, 1);
  // accum 0.35; linear = 0.5 - (sqrt(.35) - sqrt(.1)) / 0.1; var = -linear * 0.1 / sqrt(.35).
  EXPECT_NEAR(st.slots[0][0], 0.35, 1e-7);
  EXPECT_NEAR(st.slots[1][0], -2.2538021226, 1e-6);
  EXPECT_NEAR(st.var[0], 0.3809620907022995, 1e-6);
}

TEST(OptimizerLiteralTest, FtrlL1ZeroesSmallWeights) {
  OptimizerConfig c = Config("ftrl", 0.1f);
  c.l1 = 10.0f;  // |linear| ~ 2.25 < l1
  std::unique_ptr<UpdateRule> opt = MustCreate(c);
  State st = InitialState(*opt, {1.0f});
  ApplyDense(*opt, st, {0.5f}, 1);
  EXPECT_EQ(st.var[0], 0.0f);
}

TEST(OptimizerLiteralTest, FtrlZeroAccumulatorAndGradientStaysFinite) {
  OptimizerConfig c = Config("ftrl", 0.1f);
  c.initial_accumulator_value = 0.0f;  // quadratic is 0 while the gradient is 0
  std::unique_ptr<UpdateRule> opt = MustCreate(c);
  State st = InitialState(*opt, {1.0f, -1.0f});
  ApplyDense(*opt, st, {0.0f, 0.0f}, 1);
  EXPECT_EQ(st.var[0], 0.0f);
  EXPECT_EQ(st.var[1], 0.0f);
  EXPECT_EQ(st.slots[1][0], 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Adam's step argument.

TEST(AdamStepTest, BiasCorrectionDependsOnStep) {
  std::unique_ptr<UpdateRule> opt = MustCreate(Config("adam", 0.1f));
  State first = InitialState(*opt, {1.0f});
  State second = InitialState(*opt, {1.0f});
  ApplyDense(*opt, first, {0.5f}, 1);
  ApplyDense(*opt, second, {0.5f}, 2);  // same slots, later step: smaller correction
  EXPECT_EQ(first.slots[0][0], second.slots[0][0]);
  EXPECT_EQ(first.slots[1][0], second.slots[1][0]);
  EXPECT_NE(first.var[0], second.var[0]);
  // lr_t(2) = 0.1 * sqrt(1 - 0.999^2) / (1 - 0.9^2); m = 0.05, v = 0.00025.
  const double lr_t2 = 0.1 * std::sqrt(1.0 - 0.999 * 0.999) / (1.0 - 0.81);
  EXPECT_NEAR(second.var[0], 1.0 - lr_t2 * 0.05 / (std::sqrt(0.00025) + 1e-7), 1e-6);
}

TEST(AdamStepTest, StepBelowOneCountsAsOne) {
  std::unique_ptr<UpdateRule> opt = MustCreate(Config("adam", 0.1f));
  State a = InitialState(*opt, {1.0f});
  State b = InitialState(*opt, {1.0f});
  ApplyDense(*opt, a, {0.5f}, 1);
  ApplyDense(*opt, b, {0.5f}, 0);
  EXPECT_EQ(a.var[0], b.var[0]);
  EXPECT_TRUE(std::isfinite(b.var[0]));
}

TEST(OptimizerApplyTest, ZeroLengthIsANoOp) {
  for (const NamedConfig& nc : AllConfigs()) {
    std::unique_ptr<UpdateRule> opt = MustCreate(nc.config);
    ASSERT_NE(opt, nullptr);
    std::vector<float*> slots(opt->slots().size(), nullptr);
    opt->Apply(nullptr, nullptr, slots, 0, 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Slots.

std::vector<std::pair<std::string, float>> SlotList(const UpdateRule& opt) {
  std::vector<std::pair<std::string, float>> out;
  for (const SlotSpec& s : opt.slots()) out.emplace_back(s.name, s.initial_value);
  return out;
}

using Slots = std::vector<std::pair<std::string, float>>;

TEST(OptimizerSlotsTest, NamesAndInitialValues) {
  EXPECT_EQ(SlotList(*MustCreate(Config("sgd", 0.1f))), Slots{});
  EXPECT_EQ(SlotList(*MustCreate(Config("momentum", 0.1f))), (Slots{{"momentum", 0.0f}}));
  OptimizerConfig sgd_momentum = Config("sgd", 0.1f);
  sgd_momentum.momentum = 0.5f;
  EXPECT_EQ(SlotList(*MustCreate(sgd_momentum)), (Slots{{"momentum", 0.0f}}));

  OptimizerConfig adagrad = Config("adagrad", 0.1f);
  EXPECT_EQ(SlotList(*MustCreate(adagrad)), (Slots{{"accumulator", 0.1f}}));
  adagrad.initial_accumulator_value = 0.25f;
  EXPECT_EQ(SlotList(*MustCreate(adagrad)), (Slots{{"accumulator", 0.25f}}));

  EXPECT_EQ(SlotList(*MustCreate(Config("adam", 0.1f))), (Slots{{"m", 0.0f}, {"v", 0.0f}}));

  OptimizerConfig ftrl = Config("ftrl", 0.1f);
  ftrl.initial_accumulator_value = 0.5f;
  EXPECT_EQ(SlotList(*MustCreate(ftrl)), (Slots{{"accumulator", 0.5f}, {"linear", 0.0f}}));
}

TEST(OptimizerSlotsTest, ConfigIsKept) {
  OptimizerConfig c = Config("adam", 0.003f);
  c.beta_1 = 0.8f;
  std::unique_ptr<UpdateRule> opt = MustCreate(c);
  EXPECT_EQ(opt->config().kind, OptimizerKind::kAdam);
  EXPECT_EQ(opt->config().learning_rate, 0.003f);
  EXPECT_EQ(opt->config().beta_1, 0.8f);
}

// ---------------------------------------------------------------------------------------------
// Validation.

TEST(OptimizerCreateTest, AcceptsDefaultsAndBoundaryValues) {
  for (const char* type : {"sgd", "momentum", "adagrad", "adam", "ftrl"}) {
    OptimizerConfig c = Config(type, kDefaultSgdLearningRate);
    EXPECT_TRUE(UpdateRule::Create(c).ok()) << type;
  }
  std::vector<OptimizerConfig> ok;
  ok.push_back(Config("sgd", 0.0f));  // a frozen variable
  {
    OptimizerConfig c = Config("momentum", 0.1f);
    c.momentum = 1.0f;
    ok.push_back(c);
  }
  {
    OptimizerConfig c = Config("adagrad", 0.1f);
    c.initial_accumulator_value = 0.0f;
    ok.push_back(c);
  }
  {
    OptimizerConfig c = Config("adam", 0.1f);
    c.beta_1 = 0.0f;
    c.beta_2 = 0.0f;
    ok.push_back(c);
  }
  {
    OptimizerConfig c = Config("ftrl", 0.1f);
    c.learning_rate_power = 0.0f;
    c.initial_accumulator_value = 0.0f;
    ok.push_back(c);
  }
  {
    // Fields another type would reject are not looked at.
    OptimizerConfig c = Config("sgd", 0.1f);
    c.beta_1 = 5.0f;
    c.learning_rate_power = 3.0f;
    c.epsilon = -1.0f;
    ok.push_back(c);
  }
  for (const OptimizerConfig& c : ok) {
    EXPECT_TRUE(UpdateRule::Create(c).ok()) << OptimizerKindName(c.kind) << ": " << UpdateRule::Create(c).status();
  }
}

TEST(OptimizerCreateTest, RejectsEveryBadConfig) {
  const float kNan = std::nanf("");
  const float kInf = INFINITY;
  struct Bad {
    std::string why;
    OptimizerConfig config;
  };
  std::vector<Bad> bad;
  auto add = [&](std::string why, OptimizerConfig c) { bad.push_back({std::move(why), c}); };

  for (const char* type : {"sgd", "momentum", "adagrad", "adam", "ftrl"}) {
    add(absl::StrCat(type, " lr < 0"), Config(type, -0.1f));
    add(absl::StrCat(type, " lr NaN"), Config(type, kNan));
    add(absl::StrCat(type, " lr inf"), Config(type, kInf));
  }
  for (const char* type : {"sgd", "momentum"}) {
    for (float m : {-0.1f, 1.5f, kNan}) {
      OptimizerConfig c = Config(type, 0.1f);
      c.momentum = m;
      add(absl::StrCat(type, " momentum ", m), c);
    }
  }
  {
    OptimizerConfig c = Config("adagrad", 0.1f);
    c.initial_accumulator_value = -0.1f;
    add("adagrad initial_accumulator_value < 0", c);
    c = Config("adagrad", 0.1f);
    c.epsilon = 0.0f;
    add("adagrad epsilon 0", c);
    c.epsilon = -1e-7f;
    add("adagrad epsilon < 0", c);
  }
  {
    for (float b : {-0.1f, 1.0f, 1.5f, kNan}) {
      OptimizerConfig c = Config("adam", 0.1f);
      c.beta_1 = b;
      add(absl::StrCat("adam beta_1 ", b), c);
      c = Config("adam", 0.1f);
      c.beta_2 = b;
      add(absl::StrCat("adam beta_2 ", b), c);
    }
    for (float e : {0.0f, -1e-7f, kNan, kInf}) {
      OptimizerConfig c = Config("adam", 0.1f);
      c.epsilon = e;
      add(absl::StrCat("adam epsilon ", e), c);
    }
  }
  {
    add("ftrl lr 0", Config("ftrl", 0.0f));
    OptimizerConfig c = Config("ftrl", 0.1f);
    c.learning_rate_power = 0.5f;
    add("ftrl learning_rate_power > 0", c);
    c.learning_rate_power = kNan;
    add("ftrl learning_rate_power NaN", c);
    auto field = [&](const char* name, float OptimizerConfig::*member) {
      OptimizerConfig f = Config("ftrl", 0.1f);
      f.*member = -0.01f;
      add(absl::StrCat("ftrl ", name, " < 0"), f);
      f.*member = kNan;
      add(absl::StrCat("ftrl ", name, " NaN"), f);
    };
    field("initial_accumulator_value", &OptimizerConfig::initial_accumulator_value);
    field("l1", &OptimizerConfig::l1);
    field("l2", &OptimizerConfig::l2);
    field("l2_shrinkage", &OptimizerConfig::l2_shrinkage);
    field("beta", &OptimizerConfig::beta);
  }

  for (const Bad& b : bad) {
    absl::StatusOr<std::unique_ptr<UpdateRule>> opt = UpdateRule::Create(b.config);
    ASSERT_FALSE(opt.ok()) << b.why;
    EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument) << b.why;
    EXPECT_FALSE(opt.status().message().empty()) << b.why;
  }
}

TEST(OptimizerCreateTest, ErrorNamesTheField) {
  OptimizerConfig c = Config("adam", 0.1f);
  c.beta_2 = 1.0f;
  absl::Status status = UpdateRule::Create(c).status();
  EXPECT_NE(status.message().find("beta_2"), std::string::npos) << status;
  // A misspelt kind is refused where the name is parsed (wire, manifest), naming it.
  status = ParseOptimizerKind("sgdd").status();
  EXPECT_NE(status.message().find("sgdd"), std::string::npos) << status;
}

// Staleness-aware learning rate (docs/staleness.md): lr / max(1, staleness).
TEST(StalenessAwareLrTest, ScaleIsOneOverStalenessFromTwoOn) {
  OptimizerConfig c = opt::StalenessAwareLr(Config("sgd", 0.1f));
  EXPECT_EQ(UpdateRule::LearningRateScale(c, 0), 1.0f);
  EXPECT_EQ(UpdateRule::LearningRateScale(c, 1), 1.0f);
  EXPECT_EQ(UpdateRule::LearningRateScale(c, 2), 0.5f);
  EXPECT_EQ(UpdateRule::LearningRateScale(c, 8), 0.125f);
  EXPECT_EQ(UpdateRule::LearningRateScale(Config("sgd", 0.1f), 8), 1.0f) << "off by default";
}

// ApplyScaled(lr_scale) is, bit for bit, Apply of the same rule built with learning_rate *
// lr_scale, for every kind; dense and by rows alike; and a scale of 1 is plain Apply.
TEST(StalenessAwareLrTest, ScaledApplyEqualsApplyWithTheScaledRate) {
  for (const char* kind : {"sgd", "momentum", "adagrad", "adam", "ftrl"}) {
    OptimizerConfig c = Config(kind, 0.2f);
    OptimizerConfig quarter = c;
    quarter.learning_rate = c.learning_rate * 0.25f;
    auto scaled_rule = UpdateRule::Create(c);
    auto reference_rule = UpdateRule::Create(quarter);
    ASSERT_TRUE(scaled_rule.ok() && reference_rule.ok()) << kind;
    const std::vector<float> grad = {0.5f, -1.5f, 2.0f, 0.25f};
    State scaled = InitialState(**scaled_rule, {1.0f, -2.0f, 0.5f, 3.0f});
    State reference = InitialState(**reference_rule, {1.0f, -2.0f, 0.5f, 3.0f});
    State rows = InitialState(**scaled_rule, {1.0f, -2.0f, 0.5f, 3.0f});
    for (int64_t step = 1; step <= 3; ++step) {
      std::vector<float*> s = scaled.SlotPointers();
      (*scaled_rule)->ApplyScaled(scaled.var.data(), grad.data(), s, 4, step, 0.25f);
      ApplyDense(**reference_rule, reference, grad, step);
      std::vector<float*> r = rows.SlotPointers();
      const std::vector<int64_t> ids = {0, 1};
      const std::vector<const float*> grads = {grad.data(), grad.data() + 2};
      (*scaled_rule)->ApplyRowsScaled(rows.var.data(), r, 2, ids, grads, step, 0.25f);
    }
    EXPECT_EQ(scaled.var, reference.var) << kind;
    EXPECT_EQ(scaled.slots, reference.slots) << kind;
    // By rows: the same arithmetic on shorter arrays (vectorised differently), so within 1 ulp.
    for (size_t i = 0; i < rows.var.size(); ++i) {
      EXPECT_NEAR(rows.var[i], reference.var[i], 1e-6f * std::max(1.0f, std::abs(reference.var[i]))) << kind;
    }
    State one = InitialState(**scaled_rule, {1.0f, -2.0f});
    State plain = InitialState(**scaled_rule, {1.0f, -2.0f});
    std::vector<float*> so = one.SlotPointers();
    (*scaled_rule)->ApplyScaled(one.var.data(), grad.data(), so, 2, 1, 1.0f);
    ApplyDense(**scaled_rule, plain, {grad[0], grad[1]}, 1);
    EXPECT_EQ(one.var, plain.var) << kind;
  }
}

TEST(StalenessAwareLrTest, MaxStalenessBelowMinusOneIsRefused) {
  EXPECT_TRUE(UpdateRule::Create(opt::MaxStaleness(Config("adam", 0.1f), 0)).ok());
  EXPECT_TRUE(UpdateRule::Create(opt::MaxStaleness(Config("adam", 0.1f), kUnboundedStaleness)).ok());
  absl::Status status = UpdateRule::Create(opt::MaxStaleness(Config("adam", 0.1f), -2)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("max_staleness"), std::string::npos) << status;
}

// Cosine learning-rate decay (OptimizerConfig::decay_steps; Keras CosineDecay), keyed on the
// version an update is applied at.
double CosineDecayFormula(int64_t version, int64_t decay_steps, double alpha) {
  const double p = static_cast<double>(std::min(version, decay_steps)) / static_cast<double>(decay_steps);
  return (1.0 - alpha) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p)) + alpha;
}

TEST(CosineDecayTest, ScaleFollowsTheFormulaAndStaysAtAlphaPastTheEnd) {
  const OptimizerConfig c = opt::CosineDecay(Config("adam", 0.1f), 1000, 0.1f);
  EXPECT_EQ(c.decay_steps, 1000);
  EXPECT_EQ(c.decay_alpha, 0.1f);
  EXPECT_EQ(UpdateRule::DecayScale(c, 0), 1.0f) << "the full rate at version 0";
  EXPECT_NEAR(UpdateRule::DecayScale(c, 500), 0.55f, 1e-6f);
  EXPECT_NEAR(UpdateRule::DecayScale(c, 1000), 0.1f, 1e-6f);
  EXPECT_NEAR(UpdateRule::DecayScale(c, 5000), 0.1f, 1e-6f) << "alpha from decay_steps on";
  for (int64_t v : {1, 137, 250, 749, 999}) {
    EXPECT_NEAR(UpdateRule::DecayScale(c, v), CosineDecayFormula(v, 1000, double{0.1f}), 1e-6) << v;
  }
  // Falls monotonically from 1 to alpha.
  for (int64_t v = 1; v <= 1000; ++v) {
    EXPECT_LE(UpdateRule::DecayScale(c, v), UpdateRule::DecayScale(c, v - 1)) << v;
  }
  EXPECT_EQ(UpdateRule::DecayScale(Config("adam", 0.1f), 123456), 1.0f) << "off by default";
  EXPECT_EQ(UpdateRule::DecayScale(opt::CosineDecay(Config("sgd", 0.1f), 10, 1.0f), 5), 1.0f)
      << "alpha 1: no decay at all";
}

TEST(CosineDecayTest, InvalidDecayIsRefused) {
  EXPECT_TRUE(UpdateRule::Create(opt::CosineDecay(Config("adam", 0.1f), 0, 0.0f)).ok());
  EXPECT_TRUE(UpdateRule::Create(opt::CosineDecay(Config("adam", 0.1f), 10, 1.0f)).ok());
  struct Bad {
    int64_t steps;
    float alpha;
    const char* field;
  };
  const float kNan = std::nanf("");
  for (const Bad& b : {Bad{-1, 0.0f, "decay_steps"}, Bad{10, -0.01f, "decay_alpha"},
                       Bad{10, 1.5f, "decay_alpha"}, Bad{10, kNan, "decay_alpha"}}) {
    for (const char* kind : {"sgd", "momentum", "adagrad", "adam", "ftrl"}) {
      absl::Status status = UpdateRule::Create(opt::CosineDecay(Config(kind, 0.1f), b.steps, b.alpha)).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << kind << " " << b.steps << " " << b.alpha;
      EXPECT_NE(status.message().find(b.field), std::string::npos) << status;
    }
  }
}

}  // namespace
}  // namespace asyncps::ps
