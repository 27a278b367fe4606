// Whether the ranks' requests for one tensor agree, field by field as
// kRequestFields (engine/request_fields.h) says, and the error text when
// they do not.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/message.h"

namespace ring {

// "" when the submitted requests (by_rank[r]; empty for a rank that has
// joined) agree in every field their operation must agree on; otherwise
// "Mismatched <field> for tensor '<name>': <describe_disagreement>" for the
// first field (in table order) that differs. Builds no text when they agree.
std::string disagreement(const std::string& name, const std::vector<std::optional<Request>>& by_rank);

// The ranks grouped by value, in order of first appearance:
// "ranks 0, 2: [3, 4]; rank 1: [4, 4]". Empty values (joined ranks) are left out.
std::string describe_disagreement(const std::vector<std::string>& values_by_rank);

}  // namespace ring
