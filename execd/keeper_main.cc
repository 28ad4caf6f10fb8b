// execd-keeper: the keeper alone (pty/keeper_process), built as a small
// static executable that execd embeds (pty/keeper_image) and execs from a
// sealed memfd for each run without cgroups. Not installed, not started by
// hand: its arguments are execd's.
#include <cstdio>
#include <cstring>

#include "pty/keeper_process.h"

int main(int argc, char** argv) {
  // execd's start-up check that the kernel lets it exec the keeper.
  if (argc == 2 && strcmp(argv[1], "--probe") == 0) return 0;
  if (!execd::pty::is_keeper_invocation(argc, argv)) {
    fprintf(stderr, "execd-keeper: part of execd, which starts it for each run\n");
    return 2;
  }
  execd::pty::keeper_main(argc, argv);
}
