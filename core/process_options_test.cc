#include "core/process_options.h"

#include <stdlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::HasSubstr;

// Owns argv strings for Parse.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    args_.insert(args_.begin(), "prog");
    for (std::string& a : args_) ptrs_.push_back(a.data());
  }
  int argc() { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

class ProcessOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("ASYNCPS_METRICS_PORT");
    unsetenv("ASYNCPS_TRANSPORT");
    unsetenv("ASYNCPS_COMPRESSION");
    unsetenv("ASYNCPS_PULL_COMPRESSION");
    unsetenv("ASYNCPS_LOG_LEVEL");
    unsetenv("ASYNCPS_CLUSTER_TOKEN");
    unsetenv("ASYNCPS_ELASTIC");
    unsetenv("ASYNCPS_INITIAL_PS");
    unsetenv("ASYNCPS_PS_MAX_VARIABLE_BYTES");
    unsetenv("ASYNCPS_ALLOW_NONFINITE_GRADIENTS");
    unsetenv("ASYNCPS_METRICS_BIND_ADDRESS");
    unsetenv("ASYNCPS_METRICS_MAX_CONNECTIONS");
    unsetenv("ASYNCPS_METRICS_THREADS");
    unsetenv("ASYNCPS_PS_REPLICAS");
    unsetenv("ASYNCPS_PS_HEARTBEAT_TIMEOUT");
    unsetenv("ASYNCPS_DISPATCHER_WORK_DIR");
  }
};

TEST_F(ProcessOptionsTest, DefaultsWithoutFlagsOrEnvironment) {
  Argv a({});
  auto o = ProcessOptions::Parse(a.argc(), a.argv());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->metrics_port, 0);
  EXPECT_EQ(o->log_level, "info");
  EXPECT_EQ(o->cluster_token, "");
  EXPECT_EQ(o->metrics_bind_address, "127.0.0.1");
  EXPECT_EQ(o->metrics_max_connections, 16);
}

TEST_F(ProcessOptionsTest, FlagsOverrideTheEnvironment) {
  setenv("ASYNCPS_METRICS_PORT", "9100", 1);
  setenv("ASYNCPS_LOG_LEVEL", "debug", 1);
  setenv("ASYNCPS_CLUSTER_TOKEN", "from-env", 1);
  Argv env_only({});
  auto e = ProcessOptions::Parse(env_only.argc(), env_only.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->metrics_port, 9100);
  EXPECT_EQ(e->log_level, "debug");
  EXPECT_EQ(e->cluster_token, "from-env");

  Argv flags({"--metrics_port=-1", "--log_level", "error", "--cluster_token=from-flag"});
  auto f = ProcessOptions::Parse(flags.argc(), flags.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_port, -1);
  EXPECT_EQ(f->log_level, "error");
  EXPECT_EQ(f->cluster_token, "from-flag");
}

TEST_F(ProcessOptionsTest, BadMetricsPortIsAnErrorNamingTheFlag) {
  for (const char* bad : {"http", "", "80x", "65536", "-2", "99999999999"}) {
    Argv a({std::string("--metrics_port=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("--metrics_port")) << bad;
  }
  setenv("ASYNCPS_METRICS_PORT", "nine", 1);
  Argv none({});
  auto o = ProcessOptions::Parse(none.argc(), none.argv());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("ASYNCPS_METRICS_PORT"));
  // A flag without its value is not silently skipped either.
  Argv dangling({"--metrics_port"});
  auto d = ProcessOptions::Parse(dangling.argc(), dangling.argv());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("--metrics_port needs a value"));
  // A good flag wins over the bad variable: the variable is never consulted.
  Argv flag({"--metrics_port=0"});
  EXPECT_TRUE(ProcessOptions::Parse(flag.argc(), flag.argv()).ok());
}

TEST_F(ProcessOptionsTest, BadLogLevelIsAnErrorNamingTheFlag) {
  Argv a({"--log_level=verbose"});
  auto o = ProcessOptions::Parse(a.argc(), a.argv());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("--log_level"));
}

TEST_F(ProcessOptionsTest, FromEnvAndFlagsExitsOnABadValue) {
  Argv a({"--metrics_port=abc"});
  EXPECT_EXIT(ProcessOptions::FromEnvAndFlags(a.argc(), a.argv()), ::testing::ExitedWithCode(2),
              "--metrics_port='abc' is not a port");
}

absl::StatusOr<ProcessOptions> ParseArgs(std::vector<std::string> args) {
  Argv argv(std::move(args));
  return ProcessOptions::Parse(argv.argc(), argv.argv());
}

TEST_F(ProcessOptionsTest, PsLimitDefaults) {
  absl::StatusOr<ProcessOptions> o = ParseArgs({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->ps_max_variable_bytes, uint64_t{8} << 30);
  EXPECT_EQ(o->ps_max_response_bytes, uint64_t{512} << 20);
  EXPECT_FALSE(o->allow_nonfinite_gradients);
}

TEST_F(ProcessOptionsTest, ByteSizesTakeBinarySuffixes) {
  absl::StatusOr<ProcessOptions> o = ParseArgs({"--ps_max_variable_bytes=2GiB", "--ps_max_response_bytes", "64M"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->ps_max_variable_bytes, uint64_t{2} << 30);
  EXPECT_EQ(o->ps_max_response_bytes, uint64_t{64} << 20);
  o = ParseArgs({"--ps_max_variable_bytes=1048576", "--ps_max_response_bytes=3KiB"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->ps_max_variable_bytes, 1048576u);
  EXPECT_EQ(o->ps_max_response_bytes, 3072u);
}

TEST_F(ProcessOptionsTest, BadByteSizesAreErrorsNamingTheFlag) {
  for (const char* bad : {"0", "-5", "lots", "8XB", "99999999999999999999", "20000000T", ""}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<ProcessOptions> o = ParseArgs({std::string("--ps_max_variable_bytes=") + bad});
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("ps_max_variable_bytes"));
  }
}

TEST_F(ProcessOptionsTest, AllowNonfiniteGradients) {
  EXPECT_TRUE(ParseArgs({"--allow_nonfinite_gradients"})->allow_nonfinite_gradients);
  // The bare flag does not swallow the next argument.
  absl::StatusOr<ProcessOptions> o = ParseArgs({"--allow_nonfinite_gradients", "--ps_max_response_bytes=1K"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->allow_nonfinite_gradients);
  EXPECT_EQ(o->ps_max_response_bytes, 1024u);
  EXPECT_TRUE(ParseArgs({"--allow_nonfinite_gradients=true"})->allow_nonfinite_gradients);
  EXPECT_FALSE(ParseArgs({"--allow_nonfinite_gradients=0"})->allow_nonfinite_gradients);
  EXPECT_FALSE(ParseArgs({"--allow_nonfinite_gradients=maybe"}).ok());
}

// Elastic membership (docs/operations.md, "Scaling a running job"): off unless asked for.
TEST_F(ProcessOptionsTest, ElasticFromFlagOrEnvironment) {
  EXPECT_FALSE(ParseArgs({})->elastic);
  EXPECT_TRUE(ParseArgs({"--elastic"})->elastic);
  EXPECT_FALSE(ParseArgs({"--elastic=maybe"}).ok());
  setenv("ASYNCPS_ELASTIC", "1", 1);
  EXPECT_TRUE(ParseArgs({})->elastic);
  EXPECT_FALSE(ParseArgs({"--elastic=false"})->elastic);
}

TEST_F(ProcessOptionsTest, PsLimitsFromTheEnvironmentWhenNoFlag) {
  setenv("ASYNCPS_PS_MAX_VARIABLE_BYTES", "1G", 1);
  setenv("ASYNCPS_ALLOW_NONFINITE_GRADIENTS", "1", 1);
  EXPECT_EQ(ParseArgs({})->ps_max_variable_bytes, uint64_t{1} << 30);
  EXPECT_TRUE(ParseArgs({})->allow_nonfinite_gradients);
  // The flag wins over the environment.
  EXPECT_EQ(ParseArgs({"--ps_max_variable_bytes=2G"})->ps_max_variable_bytes, uint64_t{2} << 30);
}

TEST_F(ProcessOptionsTest, MetricsBindAddressTakesIpv4AndIpv6Literals) {
  EXPECT_EQ(ParseArgs({"--metrics_bind_address=0.0.0.0"})->metrics_bind_address, "0.0.0.0");
  EXPECT_EQ(ParseArgs({"--metrics_bind_address", "::"})->metrics_bind_address, "::");
  EXPECT_EQ(ParseArgs({"--metrics_bind_address=fd00::17"})->metrics_bind_address, "fd00::17");
  setenv("ASYNCPS_METRICS_BIND_ADDRESS", "10.1.2.3", 1);
  EXPECT_EQ(ParseArgs({})->metrics_bind_address, "10.1.2.3");
  EXPECT_EQ(ParseArgs({"--metrics_bind_address=::1"})->metrics_bind_address, "::1");  // the flag wins
}

TEST_F(ProcessOptionsTest, BadMetricsBindAddressIsAnErrorNamingTheFlag) {
  for (const char* bad : {"", "localhost", "0.0.0.0:9100", "[::1]", "256.1.1.1", "1.2.3", "::g"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<ProcessOptions> o = ParseArgs({std::string("--metrics_bind_address=") + bad});
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("--metrics_bind_address"));
  }
  setenv("ASYNCPS_METRICS_BIND_ADDRESS", "any", 1);
  absl::StatusOr<ProcessOptions> o = ParseArgs({});
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("ASYNCPS_METRICS_BIND_ADDRESS='any'"));
  o = ParseArgs({"--metrics_bind_address"});
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("--metrics_bind_address needs a value"));
}

TEST_F(ProcessOptionsTest, MetricsThreadsIsTheOlderNameOfMaxConnections) {
  EXPECT_EQ(ParseArgs({"--metrics_max_connections=40"})->metrics_max_connections, 40);
  EXPECT_EQ(ParseArgs({"--metrics_threads=8"})->metrics_max_connections, 8);
  EXPECT_EQ(ParseArgs({"--metrics_threads=8", "--metrics_max_connections=40"})->metrics_max_connections, 40);
  setenv("ASYNCPS_METRICS_THREADS", "5", 1);
  EXPECT_EQ(ParseArgs({})->metrics_max_connections, 5);
  setenv("ASYNCPS_METRICS_MAX_CONNECTIONS", "6", 1);
  EXPECT_EQ(ParseArgs({})->metrics_max_connections, 6);
  // Either flag wins over either variable.
  EXPECT_EQ(ParseArgs({"--metrics_threads=7"})->metrics_max_connections, 7);
  absl::StatusOr<ProcessOptions> o = ParseArgs({"--metrics_threads=0"});
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("--metrics_threads='0'"));
}

TEST_F(ProcessOptionsTest, InitialPsPutsTheGroupsUnderTheShardMap) {
  absl::StatusOr<ProcessOptions> d = ParseArgs({});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->initial_ps, 0);
  EXPECT_FALSE(d->UsesShardMap());
  EXPECT_EQ(d->InitialPsMembers(3), 3);
  setenv("ASYNCPS_INITIAL_PS", "2", 1);
  absl::StatusOr<ProcessOptions> e = ParseArgs({});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->UsesShardMap()) << "one copy, and still a map: groups can move";
  EXPECT_EQ(e->InitialPsMembers(3), 2);
  EXPECT_EQ(e->InitialPsMembers(2), 2);
  EXPECT_EQ(e->InitialPsMembers(1), 1) << "more than the cluster lists: every PS";
  EXPECT_EQ(ParseArgs({"--initial_ps=1"})->InitialPsMembers(3), 1) << "the flag wins";
  for (const char* bad : {"-1", "two", "5000"}) {
    absl::StatusOr<ProcessOptions> o = ParseArgs({std::string("--initial_ps=") + bad});
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("--initial_ps")) << bad;
  }
}

TEST_F(ProcessOptionsTest, PsReplicasFromFlagOrEnvironment) {
  Argv none({});
  auto d = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ps_replicas, 1);
  setenv("ASYNCPS_PS_REPLICAS", "2", 1);
  auto e = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ps_replicas, 2);
  Argv flag({"--ps_replicas", "3"});
  auto f = ProcessOptions::Parse(flag.argc(), flag.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->ps_replicas, 3);
  for (const char* bad : {"0", "4", "two", ""}) {
    Argv a({std::string("--ps_replicas=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("--ps_replicas")) << bad;
  }
  Argv dangling({"--ps_replicas"});
  EXPECT_FALSE(ProcessOptions::Parse(dangling.argc(), dangling.argv()).ok());
}

TEST_F(ProcessOptionsTest, PsHeartbeatTimeoutIsADuration) {
  Argv none({});
  auto d = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ps_heartbeat_timeout, absl::Seconds(2));
  setenv("ASYNCPS_PS_HEARTBEAT_TIMEOUT", "500ms", 1);
  auto e = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ps_heartbeat_timeout, absl::Milliseconds(500));
  Argv flag({"--ps_heartbeat_timeout=3s"});
  auto f = ProcessOptions::Parse(flag.argc(), flag.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->ps_heartbeat_timeout, absl::Seconds(3));
  for (const char* bad : {"0s", "-1s", "2", "soon", "2h"}) {
    Argv a({std::string("--ps_heartbeat_timeout=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("--ps_heartbeat_timeout")) << bad;
  }
  unsetenv("ASYNCPS_PS_HEARTBEAT_TIMEOUT");
  setenv("ASYNCPS_PS_HEARTBEAT_TIMEOUT", "nope", 1);
  auto env_bad = ProcessOptions::Parse(none.argc(), none.argv());
  EXPECT_THAT(env_bad.status().message(), HasSubstr("ASYNCPS_PS_HEARTBEAT_TIMEOUT"));
}

TEST_F(ProcessOptionsTest, PsLostAfterIsADuration) {
  Argv none({});
  auto d = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ps_lost_after, absl::Seconds(30));
  setenv("ASYNCPS_PS_LOST_AFTER", "90s", 1);
  auto e = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ps_lost_after, absl::Seconds(90));
  Argv flag({"--ps_lost_after=5s"});
  auto f = ProcessOptions::Parse(flag.argc(), flag.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->ps_lost_after, absl::Seconds(5)) << "the flag wins over the environment";
  unsetenv("ASYNCPS_PS_LOST_AFTER");
  for (const char* bad : {"0s", "-1s", "30", "later"}) {
    Argv a({std::string("--ps_lost_after=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("--ps_lost_after")) << bad;
  }
  Argv dangling({"--ps_lost_after"});
  EXPECT_FALSE(ProcessOptions::Parse(dangling.argc(), dangling.argv()).ok());
}

TEST_F(ProcessOptionsTest, DispatcherWorkDirFromFlagOrEnvironment) {
  Argv none({});
  auto d = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dispatcher_work_dir, "");
  setenv("ASYNCPS_DISPATCHER_WORK_DIR", "/tmp/from_env", 1);
  auto e = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->dispatcher_work_dir, "/tmp/from_env");
  Argv flag({"--dispatcher_work_dir", "/tmp/from_flag"});
  auto f = ProcessOptions::Parse(flag.argc(), flag.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->dispatcher_work_dir, "/tmp/from_flag");  // the flag beats the environment
  Argv dangling({"--dispatcher_work_dir"});
  auto bad = ProcessOptions::Parse(dangling.argc(), dangling.argv());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("--dispatcher_work_dir needs a value"));
}

TEST_F(ProcessOptionsTest, TransportFromFlagOrEnvironment) {
  Argv none({});
  auto d = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->transport, WirePrecision::kF32) << "f32 unless asked";
  setenv("ASYNCPS_TRANSPORT", "bf16", 1);
  auto e = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->transport, WirePrecision::kBf16);
  Argv flag({"--transport=f32"});
  auto f = ProcessOptions::Parse(flag.argc(), flag.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->transport, WirePrecision::kF32) << "the flag beats the environment";
  Argv spaced({"--transport", "bf16"});
  auto g = ProcessOptions::Parse(spaced.argc(), spaced.argv());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->transport, WirePrecision::kBf16);
  for (const char* bad : {"fp16", "BF16", ""}) {
    Argv a({std::string("--transport=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("--transport")) << bad;
  }
  Argv dangling({"--transport"});
  EXPECT_THAT(ProcessOptions::Parse(dangling.argc(), dangling.argv()).status().message(),
              HasSubstr("--transport needs a value"));
}

TEST_F(ProcessOptionsTest, CompressionFromFlagOrEnvironment) {
  Argv none({});
  auto d = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->compression.kind, CompressionKind::kNone) << "exact unless asked";
  setenv("ASYNCPS_COMPRESSION", "int8", 1);
  auto e = ProcessOptions::Parse(none.argc(), none.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->compression.kind, CompressionKind::kInt8);
  Argv flag({"--compression=topk:0.05"});
  auto f = ProcessOptions::Parse(flag.argc(), flag.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->compression.kind, CompressionKind::kTopK) << "the flag beats the environment";
  EXPECT_EQ(f->compression.topk_fraction, 0.05);
  for (const char* bad : {"fp16", "topk:2", ""}) {
    Argv a({std::string("--compression=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("--compression")) << bad;
  }
  Argv pull({"--pull_compression=int8"});
  auto p = ProcessOptions::Parse(pull.argc(), pull.argv());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pull_compression.kind, CompressionKind::kInt8);
  Argv topk_pull({"--pull_compression=topk:0.1"});
  EXPECT_EQ(ProcessOptions::Parse(topk_pull.argc(), topk_pull.argv()).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "top-k is for gradients only";
}

}  // namespace
}  // namespace asyncps
