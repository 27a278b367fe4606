// FastRound: one round of the decentralised path for agreed cached
// allreduces (engine/fast_path.h): what one rank says in it, and what every
// rank decides from all ranks' messages.
//
// In round r every rank sends every other rank one message: the cached
// tensors it has ready for the fast path (each a "hit" carrying its data,
// already prescaled), the cached tensors it has sent through rank 0's
// negotiation instead ("slow"), and whether it cannot take part at all
// ("no fast": it has joined, or rank 0 records a timeline). decide() is a
// pure function of the n messages, so every rank that holds them reaches
// the same verdicts without asking rank 0:
//   - Run:  every rank hit the tensor and none said no fast. Every rank
//           reduces the n contributions itself, in rank order.
//   - Back: some rank said slow for it, or some rank said no fast. Every
//           rank holding it for the fast path hands it to the negotiation.
//   - Wait: some ranks hit it and the others said nothing yet.
#pragma once

#include <cstdint>
#include <vector>

namespace ring {

struct FastItem {
  uint32_t id = 0;     // response-cache id
  bool hit = false;    // true: ready here, `data` holds it; false: slow
  const uint8_t* data = nullptr;  // hit: into the message's buffer
  uint32_t bytes = 0;
};

struct FastMessage {
  uint64_t round = 0;
  bool no_fast = false;
  std::vector<FastItem> items;  // ascending id, each id once
  std::vector<uint8_t> bytes;   // the encoded message; items' data point into it

  // True for an encoded FastMessage: its first byte is kTag, which no
  // RequestList or ResponseList starts with (their first byte is a 0/1
  // flag), so the three share the control mesh's links.
  static bool is_fast(const std::vector<uint8_t>& msg) { return !msg.empty() && msg[0] == kTag; }
  static constexpr uint8_t kTag = 0xFA;
  // Takes `msg` and points items into it. Throws RingError(Internal) for a
  // malformed message (ids out of order, lengths past its end).
  static FastMessage decode(std::vector<uint8_t> msg);
};

// Builds an encoded FastMessage: begin, then items in ascending id, then
// finish().
class FastWriter {
 public:
  FastWriter(uint64_t round, bool no_fast);
  // Appends a hit of `bytes` bytes and returns where to write them.
  uint8_t* hit(uint32_t id, uint32_t bytes);
  void slow(uint32_t id);
  // The encoded message (decode() of it gives back the items).
  std::vector<uint8_t> finish();

 private:
  std::vector<uint8_t> buf_;
  uint32_t count_ = 0;
};

enum class FastVerdict : uint8_t { Wait = 0, Run = 1, Back = 2 };

struct FastDecision {
  bool no_fast = false;  // some rank said no fast: every fast entry goes back
  // (id, verdict) for every id some message names, ascending id.
  std::vector<std::pair<uint32_t, FastVerdict>> verdicts;
};

// The verdicts of one round from every rank's message (msgs[r]: rank r's,
// all of the same round).
FastDecision decide(const std::vector<const FastMessage*>& msgs);

}  // namespace ring
