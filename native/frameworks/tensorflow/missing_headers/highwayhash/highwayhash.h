// See ../README.md: declarations only, for TensorFlow's xla/printer.h
// (a member of a printer class ring never constructs).
#pragma once
namespace highwayhash {
template <unsigned Target>
class HighwayHashCatT {
  unsigned char opaque_[512];
};
}  // namespace highwayhash
