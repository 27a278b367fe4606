// ring_strategy._native.parse: runs one of the engine's parsers of bytes
// that come from other processes on untrusted input, for the fuzz tests.
// Every malformed input must end in a RingError (BadArgument for the
// handshake and endpoints, Internal for control messages), never a crash,
// a hang or an allocation the input's length prefixes ask for unchecked.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "engine/message.h"
#include "transport/handshake.h"
#include "transport/mesh_builder.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Feeds `data` to an accepting handshake of rank 0 in a job of 4, frame by
// frame, as the socket would. Returns once the input runs out.
void feed_handshake(const std::vector<uint8_t>& data) {
  ring::Handshake hs = ring::Handshake::acceptor("fuzz-secret-0123456789abcdef", 0, 4);
  size_t pos = 0;
  try {
    while (hs.expected_input() > 0 && pos + hs.expected_input() <= data.size()) {
      hs.take_output();
      size_t n = hs.expected_input();
      hs.on_input(data.data() + pos);
      pos += n;
    }
  } catch (const ring::HandshakeError& e) {
    throw ring::RingError(ring::ErrorKind::BadArgument, std::string("handshake: ") + e.what());
  }
}

void parse(const std::string& kind, nb::bytes payload) {
  const auto* p = static_cast<const uint8_t*>(payload.data());
  std::vector<uint8_t> data(p, p + payload.size());
  if (kind == "request_list") {
    ring::RequestList::decode(data);
  } else if (kind == "response_list") {
    ring::ResponseList::decode(data, [](const ring::ResponseList&, uint32_t id) -> std::string {
      throw ring::RingError(ring::ErrorKind::Internal, "unknown cache id " + std::to_string(id));
    });
  } else if (kind == "handshake") {
    feed_handshake(data);
  } else if (kind == "endpoint") {
    ring::validate_endpoint(std::string(data.begin(), data.end()), 0);
  } else {
    throw ring::RingError(ring::ErrorKind::BadArgument, "unknown parser '" + kind + "'");
  }
}

}  // namespace

void register_parsers(nb::module_& m) {
  m.def("parse", &parse, "kind"_a, "data"_a,
        "Runs the engine's parser `kind` ('request_list', 'response_list', 'handshake', 'endpoint') on "
        "`data`; raises a RingError subclass when the input is malformed. For fuzz tests.");
}
