// pty/keeper_image: the bytes of the static `execd-keeper` (execd/keeper_main.cc),
// linked into execd at build time so that the keeper needs no install step
// and no file of its own: pty/keeper writes them to a sealed memfd once.
#pragma once

#include <string_view>

namespace execd::pty {

// Empty when the build has no keeper image.
std::string_view keeper_image();

}  // namespace execd::pty
