// execd/power_off: see header.
#include "execd/power_off.h"

#include <spdlog/spdlog.h>
#include <sys/reboot.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "fs/small_file.h"

namespace execd {

// Only in the initial PID namespace: as PID 1 of a container, reboot() would
// end the container by SIGINT instead of the exit status 0 its runtime
// expects. Initial means both: /proc/self/status has a single NSpid (with a
// procfs of an outer namespace, as under `unshare --pid` without
// --mount-proc, it lists one per level), and PID 2 is the kernel's kthreadd
// (PF_KTHREAD; a container's own procfs has no kernel threads).
void power_off_if_machine_init() {
  if (getpid() != 1) return;
  std::optional<std::string> status = fs::read_small_file("/proc/self/status", 1 << 16);
  if (!status) return;
  size_t at = status->find("\nNSpid:");
  if (at == std::string::npos) return;
  size_t end = status->find('\n', at + 1);
  std::string nspid = status->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  char one[8] = "";
  char extra[8] = "";
  if (sscanf(nspid.c_str(), " %7s %7s", one, extra) != 1 || strcmp(one, "1") != 0) return;
  std::optional<std::string> stat = fs::read_small_file("/proc/2/stat", 4096);
  if (!stat) return;
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return;
  unsigned long flags = 0;
  // After ") ": state ppid pgrp session tty_nr tpgid flags
  if (sscanf(stat->c_str() + paren + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1) return;
  constexpr unsigned long kPfKthread = 0x00200000;
  if (!(flags & kPfKthread)) return;
  spdlog::info("execd was the machine's init: powering off");
  sync();
  reboot(RB_POWER_OFF);
  spdlog::error("power off failed: {}", strerror(errno));
}

}  // namespace execd
