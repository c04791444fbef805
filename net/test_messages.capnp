@0xabd2e92b6805ac36;
# Messages for net's own tests: shaped like real service messages (a list of texts, a list of
# tensors, a list of structs, a union) so the transport is tested without knowing any service's
# schema. Compiled only into net's test helpers.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("asyncps::net::testwire");
using import "envelope.capnp".TensorRef;

struct ReadRequest {
  names @0 :List(Text);
}

struct ReadResponse {
  tensors @0 :List(TensorRef);
}

struct Placement {
  name @0 :Text;
  shape @1 :List(Int64);
}

struct SetDirectoryRequest {
  version @0 :UInt64;
  variables @1 :List(Placement);
}

struct Argument {
  union {
    tensor @0 :TensorRef;
    resource @1 :UInt64;
  }
}

struct RunRequest {
  function @0 :Text;
  args @1 :List(Argument);
}
