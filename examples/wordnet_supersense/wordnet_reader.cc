#include "examples/wordnet_supersense/wordnet_reader.h"

#include <cctype>
#include <fstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "asyncps/status.h"

namespace asyncps::wordnet {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv1a(absl::string_view bytes, uint64_t h = kFnvOffset) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

int64_t NonNegative(uint64_t h) { return static_cast<int64_t>(h & 0x7fffffffffffffffull); }

// A bigram's key: the two words with a separator no token contains.
int64_t HashBigram(absl::string_view a, absl::string_view b) {
  return NonNegative(Fnv1a(b, Fnv1a("\x1f", Fnv1a(a))));
}

absl::Status Malformed(absl::string_view what, absl::string_view line) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed WordNet data line (", what, "): ", line.substr(0, 80)));
}

// Lower-case words of `text`: runs of letters, digits and apostrophes.
std::vector<std::string> Words(absl::string_view text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '\'') {
      word.push_back(static_cast<char>(std::tolower(u)));
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

}  // namespace

int64_t HashToken(absl::string_view token) { return NonNegative(Fnv1a(token)); }

absl::StatusOr<Synset> ParseDataLine(absl::string_view line, char file_pos) {
  const size_t bar = line.find('|');
  if (bar == absl::string_view::npos) return Malformed("no '|' before the gloss", line);
  std::vector<absl::string_view> f = absl::StrSplit(line.substr(0, bar), ' ', absl::SkipEmpty());
  if (f.size() < 6) return Malformed("too few fields", line);
  Synset s;
  s.file_pos = file_pos;
  if (!absl::SimpleAtoi(f[0], &s.offset) || s.offset < 0) return Malformed("offset", line);
  if (!absl::SimpleAtoi(f[1], &s.lex_filenum) || s.lex_filenum < 0 ||
      s.lex_filenum >= kNumClasses) {
    return Malformed("lex_filenum outside 00..44", line);
  }
  if (f[2].size() != 1 || absl::string_view("nvasr").find(f[2][0]) == absl::string_view::npos) {
    return Malformed("ss_type", line);
  }
  s.ss_type = f[2][0];
  int32_t w_cnt = 0;
  if (!absl::SimpleHexAtoi(f[3], &w_cnt) || w_cnt < 1) return Malformed("w_cnt", line);
  size_t at = 4;
  if (f.size() < at + 2 * static_cast<size_t>(w_cnt) + 1)
    return Malformed("fewer words than w_cnt", line);
  for (int32_t i = 0; i < w_cnt; ++i, at += 2) {
    absl::string_view word = f[at];
    // Adjectives may carry a syntactic marker: "galore(ip)", "ready_to_hand(p)", "(a)".
    if (file_pos == 'a' && absl::EndsWith(word, ")")) {
      if (size_t paren = word.rfind('('); paren != absl::string_view::npos && paren > 0)
        word = word.substr(0, paren);
    }
    s.lemmas.push_back(absl::AsciiStrToLower(word));
  }
  int32_t p_cnt = 0;
  if (!absl::SimpleAtoi(f[at], &p_cnt) || p_cnt < 0) return Malformed("p_cnt", line);
  ++at;
  // Each pointer is "symbol offset pos source/target"; verb frames may follow.
  if (f.size() < at + 4 * static_cast<size_t>(p_cnt))
    return Malformed("fewer pointers than p_cnt", line);
  s.gloss = std::string(absl::StripAsciiWhitespace(line.substr(bar + 1)));
  return s;
}

absl::StatusOr<std::vector<Synset>> ReadDataFile(const std::string& path, char file_pos) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<Synset> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    // The licence header: lines that start with spaces.
    if (line.empty() || line[0] == ' ') continue;
    absl::StatusOr<Synset> s = ParseDataLine(line, file_pos);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": ", s.status().message()));
    }
    out.push_back(*std::move(s));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return out;
}

std::vector<std::string> Tokens(const Synset& synset) {
  std::vector<std::string> tokens = {absl::StrCat("pos:", std::string(1, synset.ss_type))};
  for (const std::string& lemma : synset.lemmas) {
    tokens.push_back(absl::StrCat("lemma:", lemma));
    for (std::string& w : Words(lemma)) tokens.push_back(std::move(w));
  }
  for (std::string& w : Words(synset.gloss)) tokens.push_back(std::move(w));
  return tokens;
}

std::vector<int64_t> FeatureKeys(const Synset& synset) {
  std::vector<int64_t> keys;
  keys.push_back(HashToken(absl::StrCat("pos:", std::string(1, synset.ss_type))));
  auto add_sequence = [&](const std::vector<std::string>& words) {
    for (size_t i = 0; i < words.size(); ++i) {
      keys.push_back(HashToken(words[i]));
      if (i > 0) keys.push_back(HashBigram(words[i - 1], words[i]));
    }
  };
  for (const std::string& lemma : synset.lemmas) {
    keys.push_back(HashToken(absl::StrCat("lemma:", lemma)));
    add_sequence(Words(lemma));
  }
  add_sequence(Words(synset.gloss));
  return keys;
}

bool IsTestSynset(const Synset& synset) {
  const std::string id = absl::StrCat(std::string(1, synset.file_pos), ":", synset.offset);
  return Fnv1a(id) % 10 == 0;
}

absl::StatusOr<Corpus> ReadCorpus(const std::string& dir) {
  Corpus corpus;
  absl::flat_hash_set<int> labels;
  for (const auto& [name, pos] :
       {std::pair<const char*, char>{"noun", 'n'}, {"verb", 'v'}, {"adj", 'a'}, {"adv", 'r'}}) {
    ASSIGN_OR_RETURN(std::vector<Synset> synsets,
                     ReadDataFile(absl::StrCat(dir, "/data.", name), pos));
    for (const Synset& s : synsets) {
      labels.insert(s.lex_filenum);
      Example e{FeatureKeys(s), s.lex_filenum};
      (IsTestSynset(s) ? corpus.test : corpus.train).push_back(std::move(e));
    }
  }
  corpus.num_classes = static_cast<int>(labels.size());
  return corpus;
}

}  // namespace asyncps::wordnet
