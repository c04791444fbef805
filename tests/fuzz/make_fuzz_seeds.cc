// Writes the fuzzer's seed corpus: byte streams of whole connections (a valid handshake, then
// requests to every PS and worker method) made with the project's own encoder.
//   make_fuzz_seeds OUT_DIR
#include <cstdio>
#include <fstream>
#include <utility>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/compression.h"
#include "core/dtype.h"
#include "core/optimizer_config.h"
#include "core/tensor.h"
#include "net/frame_codec.h"
#include "net/handshake.h"
#include "net/message.h"
#include "net/peer.h"
#include "ps/ps.capnp.h"
#include "net/raw_client_testing.h"
#include "worker/worker.capnp.h"
#include "ps/shard_initializer.h"
#include "ps/ps_wire.h"
#include "tests/fuzz/server_fuzz_entry.h"

namespace asyncps::fuzz {
namespace {

std::string Hello(const std::string& role) {
  return net::testutil::HelloFrame(kFuzzToken, FuzzServerNonce(), role, 0, 1);
}

std::string Request(net::OutMessage m, const std::string& method) {
  static uint64_t id = 1;
  return net::testutil::RequestFrame(std::move(m), id++, method);
}

uint8_t F32() { return static_cast<uint8_t>(DType::kF32); }

// The body of a ps.CreateVariable in `m` for an f32 [4, 3] variable `name`, its initializer and
// optimizer left to the caller.
wire::CreateVariableRequest::Builder CreateF32Body(net::OutMessage& m, const std::string& name) {
  auto req = m.InitRequestBody<wire::CreateVariableRequest>();
  req.setName(name);
  req.setDtype(F32());
  auto shape = req.initShape(2);
  shape.set(0, 4);
  shape.set(1, 3);
  return req;
}

std::string CreateVariable(const std::string& name, const std::string& init_kind, const std::string& optimizer) {
  net::OutMessage m;
  auto req = CreateF32Body(m, name);
  ps::InitializerSpec spec;
  spec.kind = init_kind;
  spec.value = 0.5;
  spec.seed = 7;
  if (init_kind == "tensor") spec.tensor = Tensor::FromVector<float>({4, 3}, std::vector<float>(12, 1.0f));
  ps::InitializerToWire(spec, m, req.initInitializer());
  auto opt = req.initOptimizer();
  opt.setType(optimizer);
  opt.setLearningRate(0.1f);
  opt.setBeta1(0.9f);
  opt.setBeta2(0.999f);
  opt.setEpsilon(1e-7f);
  return Request(std::move(m), "ps.CreateVariable");
}

// ps.CreateVariable of an f32 [4, 3] Adam variable whose optimizer uses every staleness and
// decay field (maxStaleness, stalenessAwareLr, decaySteps, decayAlpha).
std::string CreateDecayedVariable(const std::string& name) {
  net::OutMessage m;
  auto req = CreateF32Body(m, name);
  ps::InitializerToWire(ps::InitializerSpec(), m, req.initInitializer());
  const OptimizerConfig config =
      opt::StalenessAwareLr(opt::MaxStaleness(opt::CosineDecay(opt::Adam(0.1f), 100, 0.1f), 8));
  ps::OptimizerToWire(&config, req.initOptimizer());
  return Request(std::move(m), "ps.CreateVariable");
}

// ps.Read answered in bf16 (valuesAs = the bf16 wire code).
std::string ReadBf16(const std::string& name) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::ReadRequest>();
  req.initNames(1).set(0, name);
  req.setValuesAs(kBf16WireCode);
  return Request(std::move(m), "ps.Read");
}

// A bf16 gradient naming base version `base`, dense or by rows, with a fused readAfter of the
// variable answered in bf16.
std::string PushBf16(const std::string& name, bool rows, int64_t base) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::PushGradientsRequest>();
  auto g = req.initGradients(1)[0];
  g.setName(name);
  g.setBaseVersion(base);
  if (rows) {
    m.AddTensorAsBf16(Tensor::FromVector<float>({1, 3}, {0.1f, 0.2f, 0.3f}), g.initValue());
    m.AddTensor(Tensor::FromVector<int64_t>({1}, {2}), g.initIds());
    g.setHasIds(true);
  } else {
    m.AddTensorAsBf16(Tensor::FromVector<float>({4, 3}, std::vector<float>(12, 0.01f)), g.initValue());
  }
  req.initReadAfter(1).set(0, name);
  req.setReadAfterAs(kBf16WireCode);
  return Request(std::move(m), "ps.PushGradients");
}

// A compressed gradient (core/compression.h) for a [4, 3] f32 variable: int8 blocks or top-k
// (3 of 12), encoded by the worker's own codecs; `oversized` claims a shape of 2^20 rows (the
// PS refuses it before expanding it). The int8 push reads the variable after it.
std::string PushCompressed(const std::string& name, uint8_t code, bool oversized = false) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::PushGradientsRequest>();
  auto g = req.initGradients(1)[0];
  g.setName(name);
  std::vector<float> values = {0.1f, -0.2f, 0.3f, 0.05f, -0.5f, 0.6f, 0.01f, 0.2f, -0.9f, 0.4f, 0.0f, 0.7f};
  std::vector<uint8_t> bytes;
  if (code == kInt8BlockWireCode) {
    bytes.resize(Int8EncodedBytes(values.size()));
    EncodeInt8InPlace(values.data(), values.size(), bytes.data());
    req.initReadAfter(1).set(0, name);
  } else {
    bytes.resize(TopKEncodedBytes(TopKCount(values.size(), 0.25)));
    EncodeTopKInPlace(values.data(), values.size(), 0.25, bytes.data());
  }
  Tensor payload(DType::kU8, {static_cast<int64_t>(bytes.size())});
  std::memcpy(payload.raw_data(), bytes.data(), bytes.size());
  m.AddEncoded(code, payload, oversized ? Shape{int64_t{1} << 20, 3} : Shape{4, 3}, g.initValue());
  return Request(std::move(m), "ps.PushGradients");
}

std::string Read(const std::string& name) {
  net::OutMessage m;
  m.InitRequestBody<wire::ReadRequest>().initNames(1).set(0, name);
  return Request(std::move(m), "ps.Read");
}

std::string Update(const std::string& name, wire::UpdateKind kind, bool rows) {
  net::OutMessage m;
  auto u = m.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
  u.setName(name);
  u.setKind(kind);
  if (rows) {
    m.AddTensor(Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6}), u.initValue());
    m.AddTensor(Tensor::FromVector<int64_t>({2}, {0, 3}), u.initIds());
    u.setHasIds(true);
  } else {
    m.AddTensor(Tensor::FromVector<float>({4, 3}, std::vector<float>(12, 2.0f)), u.initValue());
  }
  return Request(std::move(m), "ps.Update");
}

std::string Push(const std::string& name, bool rows) {
  net::OutMessage m;
  auto g = m.InitRequestBody<wire::PushGradientsRequest>().initGradients(1)[0];
  g.setName(name);
  if (rows) {
    m.AddTensor(Tensor::FromVector<float>({1, 3}, {0.1f, 0.2f, 0.3f}), g.initValue());
    m.AddTensor(Tensor::FromVector<int64_t>({1}, {2}), g.initIds());
    g.setHasIds(true);
  } else {
    m.AddTensor(Tensor::FromVector<float>({4, 3}, std::vector<float>(12, 0.01f)), g.initValue());
  }
  return Request(std::move(m), "ps.PushGradients");
}

std::string Gather(const std::string& name) {
  net::OutMessage m;
  auto l = m.InitRequestBody<wire::GatherRequest>().initLookups(1)[0];
  l.setName(name);
  m.AddTensor(Tensor::FromVector<int64_t>({3}, {0, 1, 3}), l.initIds());
  return Request(std::move(m), "ps.Gather");
}

std::string Empty(const std::string& method) {
  net::OutMessage m;
  m.InitRequestBody<wire::Empty>();
  return Request(std::move(m), method);
}

std::string SetDirectory() {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::SetDirectoryRequest>();
  req.setVersion(1);
  auto v = req.initVariables(1)[0];
  v.setName("w");
  v.setDtype(F32());
  auto shape = v.initShape(2);
  shape.set(0, 4);
  shape.set(1, 3);
  auto shard = v.initShards(1)[0];
  shard.setName("w");
  shard.setPs(0);
  shard.setRowBegin(0);
  shard.setRowEnd(4);
  return Request(std::move(m), "worker.SetDirectory");
}

std::string CreateResource(uint64_t id) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::CreateResourceRequest>();
  req.setId(id);
  req.setFactory("counter");
  auto arg = req.initArgs(1)[0];
  arg.setName("k");
  arg.setValue("v");
  return Request(std::move(m), "worker.CreateResource");
}

std::string Run(uint64_t closure, uint64_t resource) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::RunRequest>();
  req.setFunction("sum_args");
  req.setClosureId(closure);
  auto args = req.initArgs(2);
  m.AddTensor(Tensor::FromVector<float>({2}, {1.5f, -2}), args[0].initTensor());
  args[1].setResource(resource);
  return Request(std::move(m), "worker.Run");
}

std::string Cancel(uint64_t closure) {
  net::OutMessage m;
  m.InitRequestBody<wire::CancelRequest>().initClosureIds(1).set(0, closure);
  return Request(std::move(m), "worker.Cancel");
}

std::string DeleteResource(uint64_t id) {
  net::OutMessage m;
  m.InitRequestBody<wire::DeleteResourceRequest>().setId(id);
  return Request(std::move(m), "worker.DeleteResource");
}

using net::testutil::PointerField;

capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

// Inputs of the classes that crashed or wedged servers before the decode-error boundary and
// the handshake limits (issue 7), kept as regressions.
std::vector<std::pair<std::string, std::string>> Regressions() {
  std::vector<std::pair<std::string, std::string>> out;
  {
    net::OutMessage m;
    PointerField(m.envelope().initHello(), "role").initAs<wire::Empty>();
    out.push_back({"hello_role_is_a_struct", net::EncodeFrameToString(m)});
  }
  {
    net::OutMessage m;
    PointerField(m.envelope().initHello(), "role").setAs<capnp::Data>(AsData("chief"));
    out.push_back({"hello_role_without_nul", net::EncodeFrameToString(m)});
  }
  {
    net::OutMessage m;
    PointerField(m.envelope().initRequest(), "method").setAs<capnp::Data>(AsData("ps.Read"));
    out.push_back({"method_without_nul_after_handshake", Hello("chief") + net::EncodeFrameToString(m)});
  }
  {
    net::OutMessage m;
    m.envelope().initRequest().getBody().initAs<capnp::List<int64_t>>(2);
    out.push_back({"body_is_a_list", Hello("chief") + Request(std::move(m), "ps.Gather")});
  }
  {
    net::OutMessage m;
    PointerField(m.InitRequestBody<wire::ReadRequest>(), "names").initAs<capnp::List<wire::Empty>>(2);
    out.push_back({"names_are_structs", Hello("chief") + Request(std::move(m), "ps.Read")});
  }
  {
    const uint32_t table[2] = {0, 1u << 28};  // a 2 GiB frame before the handshake
    out.push_back({"huge_frame_before_handshake", std::string(reinterpret_cast<const char*>(table), sizeof(table))});
  }
  return out;
}

bool WriteAll(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  for (const auto& [name, bytes] : files) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return false;
    }
  }
  std::printf("wrote %zu files to %s\n", files.size(), dir.c_str());
  return true;
}

std::string Join(int index, const std::string& address) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::JoinRequest>();
  req.setIndex(index);
  req.setAddress(address);
  return Request(std::move(m), "membership.Join");
}

std::string Leave(int index) {
  net::OutMessage m;
  m.InitRequestBody<wire::LeaveRequest>().setIndex(index);
  return Request(std::move(m), "membership.Leave");
}

std::string JoinPs(int index, const std::string& address) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::JoinPsRequest>();
  req.setIndex(index);
  req.setAddress(address);
  return Request(std::move(m), "membership.JoinPs");
}

std::string LeavePs(int index) {
  net::OutMessage m;
  m.InitRequestBody<wire::LeavePsRequest>().setIndex(index);
  return Request(std::move(m), "membership.LeavePs");
}

int Main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: make_fuzz_seeds CORPUS_DIR [REGRESSIONS_DIR]\n");
    return 2;
  }
  const std::string chief = Hello("chief");
  std::vector<std::pair<std::string, std::string>> seeds = {
      {"hello_chief", chief},
      {"hello_worker", Hello("worker")},
      {"ps_dense", chief + CreateVariable("w", "zeros", "adam") + Read("w") +
                       Update("w", wire::UpdateKind::ADD, false) + Push("w", false) + Read("w")},
      {"ps_sparse", chief + CreateVariable("e", "uniform", "sgd") + Gather("e") +
                        Update("e", wire::UpdateKind::ASSIGN, true) + Push("e", true) + Gather("e")},
      {"ps_initializers", chief + CreateVariable("a", "constant", "") + CreateVariable("b", "truncated_normal", "momentum") +
                              CreateVariable("c", "glorot_uniform", "adagrad") + CreateVariable("d", "tensor", "ftrl") +
                              Empty("ps.ListVariables") + Empty("ps.Health")},
      {"ps_update_kinds", chief + CreateVariable("u", "ones", "") + Update("u", wire::UpdateKind::SUB, false) +
                              Update("u", wire::UpdateKind::MUL, false) + Update("u", wire::UpdateKind::DIV, true) +
                              Update("u", wire::UpdateKind::MIN, false) + Update("u", wire::UpdateKind::MAX, true)},
      {"ps_bf16_versions", chief + CreateDecayedVariable("s") + ReadBf16("s") + PushBf16("s", false, 0) +
                               PushBf16("s", true, 1) + PushBf16("s", false, 1) + ReadBf16("s") + Read("s")},
      {"worker_all", chief + SetDirectory() + CreateResource(5) + Run(1, 5) + Cancel(1) + Empty("worker.Heartbeat") +
                         DeleteResource(5) + Run(2, 5)},
      {"worker_role_denied", Hello("worker") + Run(3, 0) + CreateVariable("x", "zeros", "")},
      // The chief's membership methods (--elastic), as worker 0: joins, then joins as another
      // worker (refused), with a bad address (refused), leaves, leaves as another (refused).
      {"membership", Hello("worker") + Join(0, "127.0.0.1:5") + Join(3, "127.0.0.1:6") + Join(0, "no port") +
                         Leave(0) + Leave(2)},
      // Last, so that the request ids of the seeds above stay as they were.
      {"ps_compressed", chief + CreateVariable("k", "zeros", "adam") + PushCompressed("k", kInt8BlockWireCode) +
                            PushCompressed("k", kTopKWireCode) + PushCompressed("k", kTopKWireCode, true) + Read("k")},
      // Elastic PS (issue 37), as ps 0: joins, joins as another PS (refused), with a bad address
      // (refused), leaves, leaves as another (refused).
      {"membership_ps", Hello("ps") + JoinPs(0, "127.0.0.1:5") + JoinPs(3, "127.0.0.1:6") + JoinPs(0, "no port") +
                            LeavePs(0) + LeavePs(2)},
  };
  if (!WriteAll(argv[1], seeds)) return 1;
  if (argc == 3 && !WriteAll(argv[2], Regressions())) return 1;
  return 0;
}

}  // namespace
}  // namespace asyncps::fuzz

int main(int argc, char** argv) { return asyncps::fuzz::Main(argc, argv); }
