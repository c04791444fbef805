#include "deploy/netns_hosts.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::deploy {
namespace {

using ::testing::ElementsAre;

TEST(SubnetHostAddressesTest, HostsFromTheSecondAddress) {
  int bits = 0;
  absl::StatusOr<std::vector<std::string>> a = SubnetHostAddresses("10.213.47.0/24", 3, &bits);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("10.213.47.2", "10.213.47.3", "10.213.47.4"));
  EXPECT_EQ(bits, 24);
  // Across an octet, in a wider subnet.
  a = SubnetHostAddresses("10.1.0.0/16", 256, &bits);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->back(), "10.1.1.1");
  EXPECT_EQ(bits, 16);
}

TEST(SubnetHostAddressesTest, OnlyNetworksInsideTenSlashEight) {
  for (const char* subnet :
       {"192.168.1.0/24", "11.0.0.0/24", "0.0.0.0/0", "10.0.0.0/7", "10.1.2.0/30", "10.1.2.3/24",
        "10.1.2.0", "10.1.2.0/x", "ten/24", ""}) {
    absl::StatusOr<std::vector<std::string>> a = SubnetHostAddresses(subnet, 1, nullptr);
    EXPECT_TRUE(absl::IsInvalidArgument(a.status())) << subnet;
  }
}

TEST(SubnetHostAddressesTest, RefusesMoreHostsThanFit) {
  EXPECT_TRUE(SubnetHostAddresses("10.9.9.0/29", 5, nullptr).ok());  // .2 .. .6
  absl::StatusOr<std::vector<std::string>> a = SubnetHostAddresses("10.9.9.0/29", 6, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(a.status()));
  EXPECT_TRUE(absl::StrContains(a.status().message(), "room for 5")) << a.status();
}

TEST(CheckNetnsNameTest, PlainNamesOnly) {
  EXPECT_TRUE(CheckNetnsName("apsl-123-").ok());
  EXPECT_TRUE(CheckNetnsName("data_worker0").ok());
  for (const char* name :
       {"", "a b", "a/b", "x;rm", "ps:0", "0123456789012345678901234567890123456789x"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CheckNetnsName(name))) << name;
  }
}

TEST(CheckLinkRateTest, WholeNumbersOfTcUnits) {
  for (const char* ok : {"1gbit", "10gbit", "100mbit", "512kbit", "9600bit"}) {
    EXPECT_TRUE(CheckLinkRate(ok).ok()) << ok;
  }
  for (const char* bad : {"", "gbit", "0gbit", "1.5gbit", "-1gbit", "1gbps", "1 gbit", "1GBIT",
                          "10000000gbit", "1gbit; rm -rf /"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CheckLinkRate(bad))) << bad;
  }
}

// Needs root (ip netns): the namespaces exist while the object does and are gone after.
TEST(NetnsHostsTest, CreatesAndDeletesItsNamespaces) {
  if (!CheckNetnsSupport().ok()) GTEST_SKIP() << CheckNetnsSupport().message();
  const std::string prefix = absl::StrCat("apsl-", getpid(), "-t-");
  auto exists = [](const std::string& netns) {
    return std::filesystem::exists("/run/netns/" + netns);
  };
  {
    absl::StatusOr<std::unique_ptr<NetnsHosts>> hosts =
        NetnsHosts::Create(prefix, "10.213.47.0/24", {"a", "b"});
    ASSERT_TRUE(hosts.ok()) << hosts.status();
    ASSERT_EQ((*hosts)->hosts().size(), 2u);
    EXPECT_EQ((*hosts)->hosts()[1].address, "10.213.47.3");
    EXPECT_TRUE(exists(prefix + "a"));
    EXPECT_TRUE(exists(prefix + "b"));
    EXPECT_TRUE(exists(prefix + "sw"));
    EXPECT_EQ((*hosts)->Exec(0, {"true"}).back(), "true");
    // A second cluster with the same prefix is refused, and deletes nothing of the first.
    EXPECT_TRUE(
        absl::IsFailedPrecondition(NetnsHosts::Create(prefix, "10.213.47.0/24", {"c"}).status()));
    EXPECT_TRUE(exists(prefix + "a"));
  }
  EXPECT_FALSE(exists(prefix + "a"));
  EXPECT_FALSE(exists(prefix + "b"));
  EXPECT_FALSE(exists(prefix + "sw"));
}

}  // namespace
}  // namespace asyncps::deploy
