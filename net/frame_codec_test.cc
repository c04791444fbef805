#include "net/frame_codec.h"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>
#include <string>

#include "gtest/gtest.h"
#include "net/test_messages.capnp.h"
#include "net/wire_check.h"

namespace asyncps::net {
namespace {

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

OutMessage MakeReadResponse(const std::vector<Tensor>& tensors) {
  OutMessage m;
  m.envelope().setRequestId(42);
  auto body = m.InitResponseBody<testwire::ReadResponse>();
  auto list = body.initTensors(static_cast<unsigned>(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) m.AddTensor(tensors[i], list[static_cast<unsigned>(i)]);
  return m;
}

TEST(FrameCodecTest, RoundTripViewsPayloadInPlaceAndAligned) {
  Tensor a = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::FromVector<int64_t>({5}, {7, 8, 9, 10, 11});
  Tensor c = Tensor::FromVector<uint8_t>({3}, {1, 2, 3});  // needs padding
  OutMessage out = MakeReadResponse({a, c, b});
  const std::string bytes = EncodeFrameToString(out);
  EXPECT_EQ(bytes.size() % 8, 0u);

  size_t consumed = 0;
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), &consumed);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(consumed, bytes.size());
  EXPECT_EQ(in->envelope().getRequestId(), 42u);
  auto refs = in->ResponseBody<testwire::ReadResponse>().getTensors();
  ASSERT_EQ(refs.size(), 3u);
  auto ta = in->TensorAt(refs[0]);
  auto tc = in->TensorAt(refs[1]);
  auto tb = in->TensorAt(refs[2]);
  ASSERT_TRUE(ta.ok() && tb.ok() && tc.ok());
  EXPECT_TRUE(ta->Equals(a));
  EXPECT_TRUE(tb->Equals(b));
  EXPECT_TRUE(tc->Equals(c));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta->raw_data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tb->raw_data()) % 64, 0u);
  EXPECT_TRUE(ta->SharesStorageWith(*tb));  // one block, viewed in place
}

TEST(FrameCodecTest, GapsBetweenPayloadsAreZeroed) {
  // The receive block is allocated uninitialised; only the payload bytes are written, so the
  // decoder must zero the alignment gaps itself (no stale heap bytes reachable).
  Tensor a = Tensor::FromVector<uint8_t>({3}, {0xff, 0xff, 0xff});
  Tensor b = Tensor::FromVector<uint8_t>({1}, {0xff});
  OutMessage out = MakeReadResponse({a, b});
  const std::string bytes = EncodeFrameToString(out);
  for (int trial = 0; trial < 20; ++trial) {
    auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
    ASSERT_TRUE(in.ok()) << in.status();
    auto refs = in->ResponseBody<testwire::ReadResponse>().getTensors();
    auto ta = in->TensorAt(refs[0]);
    auto tb = in->TensorAt(refs[1]);
    ASSERT_TRUE(ta.ok() && tb.ok());
    const auto* first = static_cast<const uint8_t*>(ta->raw_data());
    const auto* second = static_cast<const uint8_t*>(tb->raw_data());
    ASSERT_EQ(second - first, 64);
    for (int i = 3; i < 64; ++i) ASSERT_EQ(first[i], 0) << "byte " << i;
    for (int i = 1; i < 64; ++i) ASSERT_EQ(second[i], 0) << "byte " << i;
  }
}

TEST(FrameCodecTest, TwoFramesBackToBack) {
  OutMessage first = MakeReadResponse({Tensor::Scalar<float>(1.5f)});
  OutMessage second = MakeReadResponse({Tensor::Scalar<double>(-2.0)});
  second.envelope().setRequestId(43);
  const std::string bytes = EncodeFrameToString(first) + EncodeFrameToString(second);
  size_t consumed = 0;
  auto one = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), &consumed);
  ASSERT_TRUE(one.ok());
  auto two = FrameDecoder::DecodeAll(Bytes(bytes).subspan(consumed), FrameLimits(), nullptr);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(one->envelope().getRequestId(), 42u);
  EXPECT_EQ(two->envelope().getRequestId(), 43u);
  auto value = two->TensorAt(two->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value->ScalarAsDouble(), -2.0);
}

TEST(FrameCodecTest, EveryTruncationIsAnError) {
  OutMessage out = MakeReadResponse({Tensor::FromVector<float>({4}, {1, 2, 3, 4})});
  const std::string bytes = EncodeFrameToString(out);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto in = FrameDecoder::DecodeAll(Bytes(bytes.substr(0, n)), FrameLimits(), nullptr);
    EXPECT_FALSE(in.ok()) << "prefix of " << n << " bytes decoded";
  }
}

TEST(FrameCodecTest, GarbageIsAnErrorNotACrash) {
  // Random bytes, and valid frames with random bytes flipped: each either fails to decode
  // with a status, or decodes into a message whose complete check (what servers run before
  // reading a field) returns a status without throwing.
  OutMessage out = MakeReadResponse({Tensor::FromVector<float>({2}, {1, 2}), Tensor::Scalar<int64_t>(3)});
  out.envelope().getResponse().setMessage("some text");
  const std::string valid = EncodeFrameToString(out);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1103515245 + 12345;
    return state >> 16;
  };
  int rejected = 0, decoded = 0, decoded_but_malformed = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::string bytes;
    if (trial % 2 == 0) {
      bytes.assign(256, '\0');
      for (char& c : bytes) c = static_cast<char>(next());
      // Small segment count so the garbage gets past the first check sometimes.
      bytes[0] = static_cast<char>(trial % 3);
      bytes[1] = bytes[2] = bytes[3] = 0;
    } else {
      bytes = valid;
      for (int flips = 1 + static_cast<int>(next() % 4); flips > 0; --flips) {
        bytes[next() % bytes.size()] = static_cast<char>(next());
      }
    }
    absl::StatusOr<InMessage> in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
    if (!in.ok()) {
      EXPECT_EQ(in.status().code(), absl::StatusCode::kInvalidArgument) << in.status();
      ++rejected;
      continue;
    }
    ++decoded;
    absl::Status check;
    EXPECT_NO_THROW(check = CheckEnvelope(*in));
    if (!check.ok()) {
      EXPECT_EQ(check.code(), absl::StatusCode::kInvalidArgument);
      ++decoded_but_malformed;
    }
  }
  // Both outcomes, and the malformed-after-decoding case the complete check exists for, occur.
  EXPECT_GT(rejected, 100);
  EXPECT_GT(decoded, 100);
  EXPECT_GT(decoded_but_malformed, 0);
}

TEST(FrameCodecTest, OversizedHeaderRejectedBeforeAllocation) {
  // A segment table claiming one 2^31-word segment.
  uint32_t table[2] = {0, 0x80000000u};
  std::string bytes(reinterpret_cast<const char*>(table), sizeof(table));
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("exceeds limit"), std::string::npos) << in.status();
}

TEST(FrameCodecTest, TooManySegmentsRejected) {
  uint32_t table[2] = {100000, 1};
  std::string bytes(reinterpret_cast<const char*>(table), sizeof(table));
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("segments"), std::string::npos);
}

TEST(FrameCodecTest, OversizedPayloadRejected) {
  OutMessage out = MakeReadResponse({Tensor(DType::kF32, {1024})});
  const std::string bytes = EncodeFrameToString(out);
  FrameLimits limits;
  limits.max_payload_bytes = 1000;
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), limits, nullptr);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("payloads exceed"), std::string::npos);
}

TEST(FrameCodecTest, TensorRefDisagreeingWithPayloadIsRejected) {
  OutMessage out;
  auto body = out.InitResponseBody<testwire::ReadResponse>();
  auto refs = body.initTensors(3);
  out.AddTensor(Tensor::FromVector<float>({2}, {1, 2}), refs[0]);
  refs[0].initShape(1).set(0, 3);  // claims 3 floats for an 8-byte payload
  refs[1].setPayload(7);            // no such payload
  refs[2].setDtype(99);             // no such dtype
  const std::string bytes = EncodeFrameToString(out);
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
  ASSERT_TRUE(in.ok());
  auto list = in->ResponseBody<testwire::ReadResponse>().getTensors();
  EXPECT_FALSE(in->TensorAt(list[0]).ok());
  EXPECT_FALSE(in->TensorAt(list[1]).ok());
  EXPECT_FALSE(in->TensorAt(list[2]).ok());
}

namespace frame_codec_test_internal {

// Places payload `index` at `dest` (of `size` bytes), everything else in the frame's block.
PayloadPlacer PlaceOne(size_t index, void* dest, size_t size, std::shared_ptr<int> owner) {
  return [=](const InMessage&) {
    PayloadPlacement placement;
    placement.destinations.resize(index + 1);
    placement.destinations[index] = {dest, size};
    placement.owner = owner;
    return placement;
  };
}

}  // namespace frame_codec_test_internal

TEST(FrameCodecTest, APlacedPayloadIsReadStraightToItsDestination) {
  using frame_codec_test_internal::PlaceOne;
  Tensor a = Tensor::FromVector<uint8_t>({3}, {1, 2, 3});      // padded on the wire
  Tensor b = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor c = Tensor::FromVector<int64_t>({2}, {7, 8});
  OutMessage out = MakeReadResponse({a, b, c});
  const std::string bytes = EncodeFrameToString(out);
  for (size_t placed : {0u, 1u}) {
    SCOPED_TRACE(placed);
    std::vector<uint8_t> dest(placed == 0 ? 3 : 24, 0xee);
    auto owner = std::make_shared<int>(0);
    const PayloadPlacer placer = PlaceOne(placed, dest.data(), dest.size(), owner);
    size_t consumed = 0;
    auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), &consumed, &placer);
    ASSERT_TRUE(in.ok()) << in.status();
    EXPECT_EQ(consumed, bytes.size());
    auto refs = in->ResponseBody<testwire::ReadResponse>().getTensors();
    auto ta = in->TensorAt(refs[0]);
    auto tb = in->TensorAt(refs[1]);
    auto tc = in->TensorAt(refs[2]);
    ASSERT_TRUE(ta.ok() && tb.ok() && tc.ok());
    EXPECT_TRUE(ta->Equals(a));
    EXPECT_TRUE(tb->Equals(b));
    EXPECT_TRUE(tc->Equals(c));
    const Tensor& in_place = placed == 0 ? *ta : *tb;
    EXPECT_EQ(in_place.raw_data(), dest.data());
    EXPECT_EQ(std::memcmp(dest.data(), placed == 0 ? a.raw_data() : b.raw_data(), dest.size()), 0);
    // The placement's owner lives as long as the message does.
    EXPECT_GT(owner.use_count(), 1);
    EXPECT_NE(tc->raw_data(), dest.data());
  }
}

TEST(FrameCodecTest, APlacementOfAnotherSizeIsNotTaken) {
  using frame_codec_test_internal::PlaceOne;
  Tensor a = Tensor::FromVector<float>({4}, {1, 2, 3, 4});
  OutMessage out = MakeReadResponse({a});
  const std::string bytes = EncodeFrameToString(out);
  // Too small (it would be overrun) and too large alike: the payload goes to the frame's block.
  for (size_t size : {8u, 32u}) {
    std::vector<uint8_t> dest(size, 0xee);
    const PayloadPlacer placer = PlaceOne(0, dest.data(), size, nullptr);
    auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr, &placer);
    ASSERT_TRUE(in.ok()) << in.status();
    auto t = in->TensorAt(in->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(t->Equals(a));
    EXPECT_NE(t->raw_data(), dest.data());
    EXPECT_EQ(dest, std::vector<uint8_t>(size, 0xee));
  }
}

TEST(FrameCodecTest, APlacerThatThrowsPlacesNothing) {
  Tensor a = Tensor::FromVector<float>({2}, {1, 2});
  OutMessage out = MakeReadResponse({a});
  const std::string bytes = EncodeFrameToString(out);
  const PayloadPlacer placer = [](const InMessage&) -> PayloadPlacement {
    throw std::runtime_error("malformed header");
  };
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr, &placer);
  ASSERT_TRUE(in.ok()) << in.status();
  auto t = in->TensorAt(in->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->Equals(a));
}

TEST(FrameCodecTest, PayloadBlocksOfEverySizeClassAreAlignedZeroPaddedAndOutliveTheMessage) {
  // Sizes on both sides of the small-block classes (one allocation with their count) and of
  // the pooled blocks, alone and several to a frame.
  const std::vector<std::vector<size_t>> frames = {{1}, {4}, {64}, {65}, {128}, {129}, {700}, {768}, {769},
                                                   {5000}, {3, 60, 1}, {100, 600}, {700, 100}};
  uint8_t seed = 1;
  for (const std::vector<size_t>& sizes : frames) {
    std::vector<Tensor> tensors;
    for (size_t size : sizes) {
      Tensor t(DType::kU8, {static_cast<int64_t>(size)});
      for (auto& b : t.flat<uint8_t>()) b = seed++ | 1;  // never 0, so padding is told apart
      tensors.push_back(t);
    }
    OutMessage out = MakeReadResponse(tensors);
    const std::string bytes = EncodeFrameToString(out);
    std::vector<Tensor> views;
    {
      auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
      ASSERT_TRUE(in.ok()) << in.status();
      auto refs = in->ResponseBody<testwire::ReadResponse>().getTensors();
      ASSERT_EQ(refs.size(), sizes.size());
      for (unsigned i = 0; i < refs.size(); ++i) {
        auto t = in->TensorAt(refs[i]);
        ASSERT_TRUE(t.ok()) << t.status();
        const auto* data = static_cast<const uint8_t*>(t->raw_data());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % 64, 0u) << "payload of " << sizes[i] << " bytes";
        const size_t padded = (sizes[i] + 63) / 64 * 64;
        for (size_t b = sizes[i]; b < padded; ++b) ASSERT_EQ(data[b], 0) << "padding byte " << b;
        views.push_back(*t);
      }
    }
    // The message is gone; its tensors still own the block.
    for (size_t i = 0; i < views.size(); ++i) EXPECT_TRUE(views[i].Equals(tensors[i])) << "payload " << i;
  }
}

TEST(FrameCodecTest, HeadersOfOneAndOfManySegmentsRoundTrip) {
  // The segment table of a frame of up to 7 segments goes in the message's own table space,
  // a larger one in an array of its own.
  for (const int names : {1, 40, 400}) {
    const size_t length = names == 1 ? 10 : 900;
    OutMessage out;
    out.envelope().setRequestId(7);
    auto list = out.InitResponseBody<testwire::ReadRequest>().initNames(static_cast<unsigned>(names));
    for (int i = 0; i < names; ++i) {
      list.set(static_cast<unsigned>(i), std::string(length, static_cast<char>('a' + i % 26)));
    }
    const size_t segments = out.builder().getSegmentsForOutput().size();
    if (names == 1) {
      EXPECT_EQ(segments, 1u);
    }
    if (names == 400) {
      EXPECT_GT(segments, 2 * OutMessage::kTableSpaceWords - 1);
    }
    const std::string bytes = EncodeFrameToString(out);
    size_t consumed = 0;
    auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), &consumed);
    ASSERT_TRUE(in.ok()) << in.status() << " (" << segments << " segments)";
    EXPECT_EQ(consumed, bytes.size());
    auto got = in->ResponseBody<testwire::ReadRequest>().getNames();
    ASSERT_EQ(got.size(), static_cast<unsigned>(names));
    for (int i = 0; i < names; ++i) {
      ASSERT_EQ(std::string(got[static_cast<unsigned>(i)].cStr()), std::string(length, static_cast<char>('a' + i % 26)));
    }
  }
}

}  // namespace
}  // namespace asyncps::net
