// tests/bench/spawn_floor: the floor for execd's exec round trip: posix_spawn
// and wait of `bash -c true`, N times, printing p50/p90/p99 in microseconds;
// with a third argument, a pause of that many milliseconds before each (the
// think-time floor).
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern char** environ;

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200;
  const char* bash = argc > 2 ? argv[2] : "/bin/bash";
  int pause_ms = argc > 3 ? atoi(argv[3]) : 0;
  std::vector<double> us;
  char* args[] = {const_cast<char*>(bash), const_cast<char*>("-c"), const_cast<char*>("true"), nullptr};
  for (int i = 0; i < n; ++i) {
    if (pause_ms > 0) {
      struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
      nanosleep(&pause, nullptr);
    }
    auto t0 = std::chrono::steady_clock::now();
    pid_t pid;
    if (posix_spawn(&pid, bash, nullptr, nullptr, args, environ) != 0) return 1;
    int st;
    waitpid(pid, &st, 0);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  printf("{\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f}\n", us[us.size() / 2], us[us.size() * 9 / 10],
         us[us.size() * 99 / 100]);
  return 0;
}
