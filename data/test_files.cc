#include "data/test_files.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/status_macros.h"

namespace asyncps::data::testutil {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/asyncps_data_XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  dir_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

std::string Gzip(const std::string& bytes) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip wrapper rather than zlib's.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    std::abort();
  }
  std::string out(deflateBound(&zs, bytes.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void WriteGzipFile(const std::string& path, const std::string& bytes) {
  WriteFile(path, Gzip(bytes));
}

std::string IdxBytes(uint8_t type_code, const std::vector<uint32_t>& dims,
                     const std::string& payload) {
  std::string out = {'\0', '\0', static_cast<char>(type_code), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
  }
  return out + payload;
}

absl::StatusOr<std::vector<Element>> Drain(Iterator& it) {
  std::vector<Element> out;
  while (true) {
    absl::StatusOr<Element> e = it.Next();
    if (!e.ok()) {
      if (IsEndOfData(e.status())) return out;
      return e.status();
    }
    out.push_back(*std::move(e));
  }
}

absl::StatusOr<std::vector<Element>> DrainDataset(const Dataset& dataset) {
  ASSIGN_OR_RETURN(auto it, dataset.MakeIterator());
  return Drain(*it);
}

std::vector<int64_t> Int64s(const std::vector<Element>& elements) {
  std::vector<int64_t> out;
  for (const Element& e : elements) out.push_back(*e.at(0).data<int64_t>());
  return out;
}

}  // namespace asyncps::data::testutil
