// Test data for collectives on buffers in parts (collectives/parts.h).
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "collectives/parts.h"

namespace ring_test {

// `count` floats in [-1000, 1000), different for each (rank, salt).
inline std::vector<float> random_floats(int rank, size_t count, unsigned salt) {
  std::mt19937 gen(salt * 1000003u + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> d(-1000.0f, 1000.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = d(gen);
  return v;
}

// A buffer of `count` floats cut into parts of random lengths (1 element
// up to a few thousand), each part in memory of its own, allocated in
// shuffled order: in[i] and out[i] hold part i.
struct Scattered {
  std::vector<std::vector<float>> in, out;
  ring::Parts parts;

  Scattered(const std::vector<float>& values, unsigned salt, bool in_place) {
    std::mt19937 gen(salt);
    std::vector<size_t> lens;
    for (size_t done = 0; done < values.size();) {
      size_t len = std::min<size_t>(values.size() - done, 1 + gen() % (gen() % 4 == 0 ? 5000 : 40));
      lens.push_back(len);
      done += len;
    }
    std::vector<size_t> order(lens.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), gen);
    in.resize(lens.size());
    out.resize(lens.size());
    for (size_t i : order) {  // allocation order differs from buffer order
      in[i].resize(lens[i]);
      out[i].assign(lens[i], -7.0f);
    }
    size_t at = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      std::copy(values.begin() + at, values.begin() + at + lens[i], in[i].begin());
      at += lens[i];
      float* o = in_place ? in[i].data() : out[i].data();
      parts.add(in[i].data(), o, lens[i] * sizeof(float));
    }
    if (in_place) out.swap(in);
  }

  std::vector<float> result() const {
    std::vector<float> all;
    for (const auto& o : out) all.insert(all.end(), o.begin(), o.end());
    return all;
  }
};

}  // namespace ring_test
