#include "data_service/wire.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "net/frame_codec.h"

namespace asyncps::data_service {
namespace {

// `result` encoded as a data worker answers and decoded as a consumer receives it; the frame's
// size in *bytes.
absl::StatusOr<ElementServer::Result> RoundTrip(const ElementServer::Result& result,
                                                Compression compression, size_t* bytes) {
  net::OutMessage out;
  EncodeResult(result, compression, &out);
  const std::string frame = net::EncodeFrameToString(out);
  *bytes = frame.size();
  auto in = net::FrameDecoder::DecodeAll(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()),
      net::FrameLimits(), nullptr);
  if (!in.ok()) return in.status();
  return DecodeResult(*in);
}

ElementServer::Result Batch() {
  ElementServer::Result result;
  result.position = 7;
  Tensor images(DType::kU8, {128, 28, 28});  // mostly zeros, like Fashion-MNIST's borders
  for (int64_t i = 0; i < images.num_elements(); i += 5)
    images.data<uint8_t>()[i] = static_cast<uint8_t>(i % 251);
  result.element = {images, Tensor::FromVector(std::vector<int64_t>{1, 2, 3})};
  return result;
}

TEST(WireTest, ZlibRoundTripIsExactAndSmaller) {
  const ElementServer::Result batch = Batch();
  size_t plain_bytes = 0, zlib_bytes = 0;
  auto plain = RoundTrip(batch, Compression::kNone, &plain_bytes);
  auto zlib = RoundTrip(batch, Compression::kZlib, &zlib_bytes);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(zlib.ok()) << zlib.status();
  EXPECT_LT(zlib_bytes, plain_bytes / 2);
  ASSERT_EQ(zlib->element.size(), 2u);
  EXPECT_EQ(zlib->position, 7);
  for (size_t i = 0; i < 2; ++i) {
    const Tensor& want = batch.element[i];
    const Tensor& got = zlib->element[i];
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    ASSERT_EQ(got.num_bytes(), want.num_bytes());
    EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.num_bytes()), 0)
        << "component " << i;
  }
}

TEST(WireTest, CorruptCompressedBytesAreInvalidArgument) {
  net::OutMessage out;
  EncodeResult(Batch(), Compression::kZlib, &out);
  std::string frame = net::EncodeFrameToString(out);
  // The last payload is the second tensor's deflated bytes (zero-padded to 8): break them.
  for (size_t i = frame.size() - 12; i < frame.size(); ++i)
    frame[i] = static_cast<char>(frame[i] ^ 0x5a);
  auto in = net::FrameDecoder::DecodeAll(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(frame.data()), frame.size()),
      net::FrameLimits(), nullptr);
  ASSERT_TRUE(in.ok()) << in.status();
  auto result = DecodeResult(*in);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
}

TEST(WireTest, UnknownCompressionIsInvalidArgument) {
  net::OutMessage out;
  auto body = out.InitRequestBody<wire::ds::GetElementRequest>();
  EncodeRequest(ElementServer::Request{}, body);
  body.setCompression(9);
  auto decoded = DecodeRequest(body.asReader());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
}

TEST(WireTest, CoordinatedReadFieldsRoundTrip) {
  net::OutMessage out;
  ElementServer::Request request;
  request.num_consumers = 3;
  request.consumer_index = 2;
  request.round = 41;
  request.generation = 1'234'567'890'123ULL;
  auto body = out.InitRequestBody<wire::ds::GetElementRequest>();
  EncodeRequest(request, body);
  auto decoded = DecodeRequest(body.asReader());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->num_consumers, 3);
  EXPECT_EQ(decoded->consumer_index, 2);
  EXPECT_EQ(decoded->round, 41);
  EXPECT_EQ(decoded->generation, 1'234'567'890'123ULL);
}

}  // namespace
}  // namespace asyncps::data_service
