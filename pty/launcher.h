// pty/launcher: a process started ahead inside a spare cgroup that starts a
// command there on demand, so that starting a command writes nothing to
// cgroup.procs. A cgroup v1 migration (and a v2 one) waits out an RCU grace
// period when the kernel's migration lock was quiet: 6 ms after a 0.1 s
// pause, three times the whole spawn. The launcher pays it while idle.
//
// A launcher (a "spare", named execd-spare) is a clone of the loop thread
// with CLONE_VM | CLONE_FILES: it shares execd's memory and descriptor table
// (no copy of either, a few KiB of stack of its own), is execd's child,
// writes "0" into the spare's cgroup.procs and sleeps in a read. run() hands
// it the vfork child procedure of pty/spawn. The launcher renames itself
// execd-start and clones the command with CLONE_VM | CLONE_VFORK |
// CLONE_PARENT (| CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID): a fresh pid,
// execd's child (reaped by pty::Reaper), born in the launcher's cgroup (no
// migration), running on the launcher's stack while the launcher waits for
// its exec (vfork), then the launcher exits. The loop thread waits, bounded
// (pty/vm_child), on the command's CLEARTID word: the kernel clears and
// wakes it at the exec (or an exit before it).
//
// Why not exec in place (the launcher becoming the command, as it did): a
// launcher's pid was then the command's, so a kill aimed at execd-spare (a
// root `pkill -KILL execd-spare` loop: 1 in 60 `echo` commands died of it)
// landed on a command, and a rename at the take left pkill's window between
// reading the name and killing the pid. Now the pid that was ever named
// execd-spare never becomes a command: a launcher killed at any point takes
// no command with it; killed before its clone, the command starts another
// way (pty/spawn). A launcher that is stopped or traced (or whose command
// is, before its exec) is given up on at the next look of the wait
// (vm_child.h), SIGKILLed with its command, and the command starts another
// way; the spare gets a new launcher.
//
// Rules that follow from the sharing: the launcher makes raw system calls
// only (it runs beside the loop thread, on its thread-local storage: no
// errno, no libc state, no sanitizer interceptors); the command's process,
// until its exec, runs libc on that storage while the loop thread waits
// with raw system calls only; run() is called from the thread that started
// the launcher. The command is a vfork child of the launcher, so its
// oom_score_adj is its own (the kernel skips mm-sharers for vfork children).
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
  // Unit tests only: the loop hands a joining launcher its job instead
  // (run() waits, bounded, for the join too).
  bool wait_joined(int ms);
  // Tells an idle one to exit (it does once its join is done); of no use
  // from here on.
  void retire();
  // Waits (up to `ms`) until it has exited; true if it has.
  bool wait_gone(int ms);
  // SIGKILL, unless the reaper has collected it already (its pid could be
  // another process's by then); of no use from here on.
  void kill();
  // The reaper has collected it: it is in no cgroup any more.
  bool reaped() const;
  // The same, for after this object is gone (the launcher's exit comes
  // after its command's exec).
  std::shared_ptr<const bool> reaped_flag() const;

  // Starts child(arg) as a new process (a vfork child of the launcher, in
  // its cgroup, execd's child) and returns its pid once it has exec'd or
  // exited (child returns only on failure; the process then exits 127).
  // -1 when nothing was started this way: the launcher was gone, failed to
  // clone, or was given up on (`why` says so: stopped, traced, too slow;
  // it is killed, and so is a command process it had started): the caller
  // starts the process another way. Afterwards this object only owns what
  // is left to free; the launcher exits. The command's pid is the caller's.
  pid_t run(void (*child)(void*), void* arg, GiveUp& why);

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
  // The hand-over's wait (run()): the command's pid, or -1.
  pid_t hand_over(GiveUp& why);
};

}  // namespace execd::pty
