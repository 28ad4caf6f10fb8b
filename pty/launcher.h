// pty/launcher: a process started ahead inside a spare cgroup that becomes
// a command by exec in place, so that starting a command writes nothing to
// cgroup.procs. A cgroup v1 migration (and a v2 one) waits out an RCU grace
// period when the kernel's migration lock was quiet: 6 ms after a 0.1 s
// pause, three times the whole spawn. The launcher pays it while idle.
//
// A launcher is a clone of the loop thread with CLONE_VM | CLONE_FILES: it
// shares execd's memory and descriptor table (no copy of either, a few KiB of
// stack of its own), is execd's child (its pid becomes the command's, reaped
// by pty::Reaper), writes "0" into the spare's cgroup.procs and sleeps in a
// read. run() hands it the vfork child procedure of pty/spawn: it unshares
// the descriptor table and runs it while the loop thread waits, as it waits
// for a vfork child, until the kernel reports the exec or the exit
// (CLONE_CHILD_CLEARTID: the word is cleared and woken when the shared
// memory is let go).
//
// Rules that follow from the sharing: before run() the launcher makes raw
// system calls only (it runs beside the loop thread, on its thread-local
// storage: no errno, no libc state, no sanitizer interceptors); run() is
// called from the thread that started it; and since the kernel gives every
// process sharing an mm one oom_score_adj, run() puts execd's own back after
// the child has set its own.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "pty/vm_child.h"

namespace execd::pty {

class Reaper;

class Launcher {
 public:
  // Starts one that joins the cgroup(s) of `join_fds` (cgroup.procs, open
  // for writing; they must stay open until joined() or the launcher is
  // gone) and resets the dispositions of `reset_signals` to their defaults.
  // nullptr (error set) where this cannot work (an architecture without
  // the raw system calls below, or the clone failed).
  static std::unique_ptr<Launcher> start(Reaper& reaper, const std::vector<int>& join_fds, const int* reset_signals,
                                         int reset_count, std::string& error);
  // An unused launcher is retired: it reads end-of-file and exits; its stack
  // goes when the reaper has collected it.
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  pid_t pid() const { return pid_; }
  // In its cgroup(s) and waiting. False while it is still joining (the
  // caller may use it anyway: run() then waits for the join too).
  bool joined() const;
  // It failed to join, exited or was killed: of no use.
  bool failed() const;
  // Waits (up to `ms`) for a join under way: true once it is in its
  // cgroup(s) and waiting; false if it failed, died or took longer.
  bool wait_joined(int ms);
  // Tells an idle one to exit (it does once its join is done); of no use
  // from here on.
  void retire();
  // Waits (up to `ms`) until it has exited (or exec'd); true if it has.
  bool wait_gone(int ms);

  // Runs child(arg) in the launcher and returns when the launcher has
  // exec'd or exited (child returns only on failure; the launcher then
  // exits 127). False when the launcher was gone before it took the job:
  // nothing ran, and the caller starts the process another way. After a
  // true return this object only owns what is left to free; the pid is the
  // caller's (unwatched here).
  bool run(void (*child)(void*), void* arg);

  struct Shared;  // the words both sides read and write (launcher.cc)

 private:
  struct Mapping;
  Launcher() = default;
  Reaper* reaper_ = nullptr;
  pid_t pid_ = -1;
  int go_write_ = -1;  // a byte: the job in Shared is ready (the read end is the launcher's)
  Shared* shared_ = nullptr;  // on the launcher's stack mapping, freed with it
  std::shared_ptr<Mapping> mapping_;
  bool used_ = false;
};

}  // namespace execd::pty
