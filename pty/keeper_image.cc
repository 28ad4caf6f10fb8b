// pty/keeper_image: see header. The build passes the keeper's path as
// EXECD_KEEPER_IMAGE and builds the keeper first.
#include "pty/keeper_image.h"

#ifdef EXECD_KEEPER_IMAGE
__asm__(".section .rodata.execd_keeper_image,\"a\"\n"
        ".balign 16\n"
        ".globl execd_keeper_image_begin\n"
        ".hidden execd_keeper_image_begin\n"
        "execd_keeper_image_begin:\n"
        ".incbin \"" EXECD_KEEPER_IMAGE "\"\n"
        ".globl execd_keeper_image_end\n"
        ".hidden execd_keeper_image_end\n"
        "execd_keeper_image_end:\n"
        ".previous\n");
extern "C" const char execd_keeper_image_begin[], execd_keeper_image_end[];
#endif

namespace execd::pty {

std::string_view keeper_image() {
#ifdef EXECD_KEEPER_IMAGE
  return {execd_keeper_image_begin, static_cast<size_t>(execd_keeper_image_end - execd_keeper_image_begin)};
#else
  return {};
#endif
}

}  // namespace execd::pty
