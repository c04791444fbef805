#include "examples/wordnet_supersense/wordnet_reader.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::wordnet {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A made-up data.adj: a licence header (lines starting with spaces), a head adjective with
// pointers, satellites with markers "(ip)" / "(p)" / "(a)", a multiword lemma.
constexpr char kAdj[] =
    "  1 This software and database is being provided to you, the LICENSEE, by  \n"
    "  2 Princeton University under the following license. | not a gloss  \n"
    "00001740 00 a 01 able 0 005 = 05200169 n 0000 = 05616246 n 0000 + 05616246 n 0101 + "
    "05200169 n 0101 ! 00002098 a 0101 | (usually followed by `to') having the means; \"able to "
    "swim\"  \n"
    "00014358 00 s 02 abounding 0 galore(ip) 0 001 & 00013887 a 0000 | existing in abundance  \n"
    "00019731 00 s 03 Handy 0 ready_to_hand(p) 0 Main(a) 1 000 | easy to reach | kept  \n";

// A verb line with frames after the pointers.
constexpr char kVerbLine[] =
    "00004032 29 v 02 sigh 0 suspire 4 002 @ 00001740 v 0000 + 07129602 n 0202 01 + 02 00 | heave "
    "or utter a sigh  ";

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/wordnet_reader_test_XXXXXX";
    const int fd = mkstemp(name);
    path_ = name;
    close(fd);
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(WordnetReaderTest, ParsesLinesAndSkipsLicence) {
  TempFile file(kAdj);
  auto synsets = ReadDataFile(file.path(), 'a');
  ASSERT_TRUE(synsets.ok()) << synsets.status();
  ASSERT_EQ(synsets->size(), 3u);
  const Synset& able = (*synsets)[0];
  EXPECT_EQ(able.offset, 1740);
  EXPECT_EQ(able.lex_filenum, 0);
  EXPECT_EQ(able.ss_type, 'a');
  EXPECT_THAT(able.lemmas, ElementsAre("able"));
  EXPECT_EQ(able.gloss, "(usually followed by `to') having the means; \"able to swim\"");
  EXPECT_THAT((*synsets)[1].lemmas, ElementsAre("abounding", "galore"));
  EXPECT_EQ((*synsets)[1].ss_type, 's');
  // Markers removed, lower-cased, '_' kept; a second '|' belongs to the gloss.
  EXPECT_THAT((*synsets)[2].lemmas, ElementsAre("handy", "ready_to_hand", "main"));
  EXPECT_EQ((*synsets)[2].gloss, "easy to reach | kept");
}

TEST(WordnetReaderTest, VerbFramesAfterPointers) {
  auto s = ParseDataLine(kVerbLine, 'v');
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->lex_filenum, 29);
  EXPECT_THAT(s->lemmas, ElementsAre("sigh", "suspire"));
  EXPECT_EQ(s->gloss, "heave or utter a sigh");
}

TEST(WordnetReaderTest, MarkersStayOutsideAdjectiveFiles) {
  auto s = ParseDataLine("00000001 03 n 01 c(a) 0 000 | x", 'n');
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->lemmas, ElementsAre("c(a)"));
}

TEST(WordnetReaderTest, MalformedLinesAreErrors) {
  EXPECT_THAT(
      std::string(ParseDataLine("00001740 00 a 01 able 0 000 no bar", 'a').status().message()),
      HasSubstr("'|'"));
  EXPECT_THAT(std::string(ParseDataLine("00001740 45 a 01 able 0 000 | g", 'a').status().message()),
              HasSubstr("lex_filenum"));
  EXPECT_THAT(std::string(ParseDataLine("00001740 00 a 03 able 0 000 | g", 'a').status().message()),
              HasSubstr("w_cnt"));
  EXPECT_THAT(
      std::string(
          ParseDataLine("00001740 00 a 01 able 0 002 ! 1 a 0000 | g", 'a').status().message()),
      HasSubstr("p_cnt"));
  EXPECT_THAT(std::string(ParseDataLine("00001740 00 x 01 able 0 000 | g", 'a').status().message()),
              HasSubstr("ss_type"));
  TempFile file(std::string(kAdj) + "garbage line | g\n");
  auto bad = ReadDataFile(file.path(), 'a');
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(":6: "));  // file and line number
  EXPECT_TRUE(absl::IsNotFound(ReadDataFile("/nonexistent/data.noun", 'n').status()));
}

TEST(WordnetReaderTest, TokensAndKeys) {
  Synset s;
  s.ss_type = 'n';
  s.lemmas = {"ice_cream"};
  s.gloss = "Frozen dessert; \"they ate it\"";
  EXPECT_THAT(Tokens(s), ElementsAre("pos:n", "lemma:ice_cream", "ice", "cream", "frozen",
                                     "dessert", "they", "ate", "it"));
  const std::vector<int64_t> keys = FeatureKeys(s);
  // pos, lemma, 2 words + 1 bigram, 5 gloss words + 4 bigrams.
  EXPECT_EQ(keys.size(), 1u + 1u + 3u + 9u);
  for (int64_t k : keys) EXPECT_GE(k, 0);
  // Stable across runs and machines: FNV-1a 64 of "ice" with the top bit cleared.
  EXPECT_EQ(HashToken("ice"), static_cast<int64_t>(0x2b95dc192bcc3840ull & 0x7fffffffffffffffull))
      << std::hex << HashToken("ice");
  EXPECT_EQ(keys[2], HashToken("ice"));
  EXPECT_EQ(FeatureKeys(s), keys);
}

TEST(WordnetReaderTest, TestSplitDependsOnFileAndOffset) {
  int test = 0;
  Synset s;
  for (int64_t offset = 0; offset < 10'000; ++offset) {
    s.offset = offset;
    test += IsTestSynset(s) ? 1 : 0;
  }
  EXPECT_GT(test, 800);
  EXPECT_LT(test, 1200);
}

TEST(WordnetReaderTest, RealDatabase) {
  if (std::ifstream(std::string(kDefaultDir) + "/data.noun").fail()) {
    GTEST_SKIP() << "WordNet is not installed at " << kDefaultDir
                 << " (Debian package wordnet-base; scripts/install_deps.sh installs it)";
  }
  auto corpus = ReadCorpus();
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->train.size() + corpus->test.size(), 117'659u);
  EXPECT_EQ(corpus->num_classes, kNumClasses);
  EXPECT_GT(corpus->test.size(), 10'000u);
  EXPECT_LT(corpus->test.size(), 13'000u);
}

}  // namespace
}  // namespace asyncps::wordnet
