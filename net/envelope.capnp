@0xbac31a7b11196894;
# Every frame on an asyncps connection is one Envelope (Cap'n Proto stream framing) followed by
# the payloads it lists: raw tensor bytes, each padded with zeros to a multiple of 8 bytes.
# Payloads never pass through Cap'n Proto, so tensor bytes are copied at most once per side.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("asyncps::wire");

struct Envelope {
  requestId @0 :UInt64;
  # Byte size of each payload that follows this message, in order (before padding).
  payloadSizes @1 :List(UInt64);
  union {
    hello @2 :Hello;
    helloAck @3 :HelloAck;
    request @4 :Request;
    response @5 :Response;
    challenge @6 :Challenge;
  }
}

# The handshake never sends the cluster token. The server speaks first with a fresh random
# nonce; the client answers with Hello, whose proof is HMAC-SHA256(token, what the client
# claims || the server's nonce) and which carries a nonce of its own; the server answers with
# HelloAck, whose proof is HMAC-SHA256(token, its identity || the client's nonce), or with a
# refusal and then closes the connection. Each proof is bound to its direction and to the
# identity it vouches for (see net/handshake.h), so an answer seen on one connection is
# worthless on another.
struct Challenge {
  protocolVersion @0 :UInt32;
  nonce @1 :Data;
}

struct Hello {
  protocolVersion @0 :UInt32;
  role @1 :Text;
  taskIndex @2 :Int32;
  incarnation @3 :UInt64;
  proof @4 :Data;
  nonce @5 :Data;
}

struct HelloAck {
  ok @0 :Bool;
  error @1 :Text;
  role @2 :Text;
  taskIndex @3 :Int32;
  incarnation @4 :UInt64;
  proof @5 :Data;
}

struct Request {
  method @0 :Text;
  # Time the caller will wait; 0 = none. The server skips requests that expired in its queue.
  timeoutMicros @1 :Int64;
  body @2 :AnyPointer;
}

struct Response {
  # absl::StatusCode; 0 = OK.
  code @0 :Int32;
  message @1 :Text;
  body @2 :AnyPointer;
}

# A tensor whose bytes travel as payload `payload` of the same frame.
struct TensorRef {
  dtype @0 :UInt8;
  shape @1 :List(Int64);
  payload @2 :UInt32;
}

# Empty body for methods that take or return nothing.
struct Empty {}
