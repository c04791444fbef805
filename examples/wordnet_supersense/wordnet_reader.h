#ifndef ASYNCPS_EXAMPLES_WORDNET_SUPERSENSE_WORDNET_READER_H_
#define ASYNCPS_EXAMPLES_WORDNET_SUPERSENSE_WORDNET_READER_H_

// WordNet 3.0 synsets as supersense-classification examples (the fastText setting): each synset
// of data.noun/verb/adj/adv is one example, its features the hashed unigrams and bigrams of its
// part of speech, lemmas and gloss, its label its lexicographer file (lex_filenum, 45 classes:
// "noun.animal", "verb.motion", ...).
//
// Kept beside the example rather than in data/: the file format is WordNet's own and the
// featurisation is this model's choice, neither a general dataset reader. No LibTorch here.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps::wordnet {

// Where Debian's wordnet-base installs the database.
inline constexpr char kDefaultDir[] = "/usr/share/wordnet";
// lex_filenum runs 00..44 in WordNet 3.0.
inline constexpr int kNumClasses = 45;

// One data line, parsed.
struct Synset {
  char file_pos = 'n';              // the data file it came from: n, v, a (adj and satellites), r
  char ss_type = 'n';               // n, v, a, s (adjective satellite), r
  int64_t offset = 0;               // byte offset in its file: unique within the file only
  int lex_filenum = 0;              // the label
  std::vector<std::string> lemmas;  // lower case, '_' kept, adjective markers "(a)" removed
  std::string gloss;                // the text after '|', trimmed
};

// Parses one line of a data.<pos> file (`file_pos` is that pos). InvalidArgument naming what is
// wrong for a malformed line (too few fields, a count that is not a number, a lex_filenum
// outside 0..44, no '|'). Licence lines (they start with a space) are not data lines: the
// caller skips them (ReadDataFile does).
absl::StatusOr<Synset> ParseDataLine(absl::string_view line, char file_pos);

// Every synset of one data file, in file order. NotFound when the file cannot be opened;
// InvalidArgument naming the file and line number of the first malformed line.
absl::StatusOr<std::vector<Synset>> ReadDataFile(const std::string& path, char file_pos);

// One example: a bag of int64 feature keys (duplicates kept: a repeated word weighs more under
// a mean) and its label.
struct Example {
  std::vector<int64_t> keys;
  int label = 0;
};

// The tokens of a synset, in order: "pos:<ss_type>", then per lemma the lemma itself
// ("lemma:ice_cream") and its words ("ice", "cream"), then the gloss's words (lower case,
// split at anything but letters, digits and apostrophes).
std::vector<std::string> Tokens(const Synset& synset);

// The feature keys of a synset: a stable 64-bit hash (FNV-1a; the same on every machine and
// run) of each token, and of each pair of adjacent words within a lemma and within the gloss
// (bigrams). Keys are non-negative.
std::vector<int64_t> FeatureKeys(const Synset& synset);

// The stable hash FeatureKeys uses, of one token.
int64_t HashToken(absl::string_view token);

// True for the fixed test split: about one synset in ten, chosen by a hash of (file, offset)
// so it does not depend on the order of reading.
bool IsTestSynset(const Synset& synset);

struct Corpus {
  std::vector<Example> train;
  std::vector<Example> test;
  int num_classes = 0;  // distinct labels seen
};

// Reads data.noun, data.verb, data.adj and data.adv from `dir` and splits them. The errors of
// ReadDataFile.
absl::StatusOr<Corpus> ReadCorpus(const std::string& dir = kDefaultDir);

}  // namespace asyncps::wordnet

#endif  // ASYNCPS_EXAMPLES_WORDNET_SUPERSENSE_WORDNET_READER_H_
