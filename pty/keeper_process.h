// pty/keeper_process: the keeper's own side (see pty/keeper.h for what a
// keeper is): its main loop, and the walk of a process tree through /proc
// that execd also uses to count a tree. It needs nothing but libc, because
// it is also built alone as the small static `execd-keeper` (execd/keeper_main.cc)
// that execd embeds and execs from memory: exec'ing execd's own binary for
// each run cost 40-50 ms and 7 MiB (22 shared libraries to map and relink).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace execd::pty {

// One record on the keeper's report pipe (well under PIPE_BUF: atomic).
struct KeeperReport {
  enum Kind : int32_t { leader_exited = 1, tree_empty = 2 };
  int32_t kind = 0;
  int32_t wait_status = 0;  // the leader's (leader_exited)
  // RUSAGE_CHILDREN of the keeper when written: everything reaped so far.
  int64_t user_us = 0, system_us = 0, max_rss_kib = 0;
};

// True for `execd --keeper ...`: main() hands over to keeper_main at once.
bool is_keeper_invocation(int argc, char** argv);
// argv: <name> --keeper <leader pid> <execd pid>; fd 3 is the report pipe.
[[noreturn]] void keeper_main(int argc, char** argv);

// Every process below `root`, each once, found through
// /proc/PID/task/TID/children.
std::vector<pid_t> tree_below(pid_t root);
// Gone, a zombie, or on its way out (PF_EXITING).
bool is_gone_or_exiting(pid_t pid);

}  // namespace execd::pty
