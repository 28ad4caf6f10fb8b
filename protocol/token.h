// protocol/token: access-token comparison that takes the same time whatever
// prefix of the secret a guess shares, so the token cannot be found byte by
// byte from response timings.
#pragma once

#include <string_view>

namespace execd::protocol {

bool token_equal(std::string_view expected, std::string_view given);

}  // namespace execd::protocol
