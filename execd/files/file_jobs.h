// execd/files/file_jobs: running one blocking filesystem job on the libuv
// threadpool (through a FileService) and answering the exchange with its
// result (if the client is still there: the job is an Awaitable). Shared by
// the /files and /directories handlers and the E2B filesystem service; owns
// the fs::Error -> HTTP response mapping.
#pragma once

#include <uv.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"
#include "fs/error.h"
#include "fs/permissions.h"
#include "protocol/file_requests.h"

namespace execd::files {

// The HTTP status and envelope code of a file system error kind.
struct FileStatus {
  int status;
  std::string_view code;
};
FileStatus file_error_status(fs::ErrorKind kind);

// A complete plain response, built on a pool thread, sent on the loop.
struct FileReply {
  int status = 200;
  std::string content_type;  // "" = none (empty success)
  std::string body;
  std::vector<std::string> headers;

  static FileReply empty() { return {}; }
  static FileReply json(const nlohmann::json& value);
  static FileReply error(int status, std::string_view code, std::string_view message);
  static FileReply from(const fs::Error& error);
};

// Tells the journal of a change made through `svc` (naming its session).
void journal_change(const FileService& svc, std::string op, std::vector<std::string> paths);

// Runs `job` on the threadpool (through the gate); its reply is sent if the client is still
// there. `job` must only touch what it captured (no Connection, no loop).
// `done`, if given, runs on the loop with the reply (whether or not the
// client is still there).
void run_file_job(FileService& svc, http::Exchange& ex, std::function<FileReply()> job,
                  std::function<void(const FileReply&)> done = nullptr);

// Runs `blocking` on the threadpool, then `then` on the loop with the
// exchange, if the client is still there.
void run_blocking(uv_loop_t* loop, http::Exchange& ex, std::function<void()> blocking,
                  std::function<void(http::Exchange&)> then);

// A session's or terminal's working directory: `$VAR` and `~` expanded with
// `env`, then created (mkdir -p). Blocking: call it on the threadpool. Empty
// stays empty; on failure `error` says why.
struct WorkingDir {
  std::string path, error;
};
WorkingDir make_working_dir(const std::vector<std::string>& env, const std::string& requested);

// Sends a reply on the loop thread.
void send_reply(http::Exchange& ex, const FileReply& reply);

// Compact JSON; invalid UTF-8 in names becomes U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& value);

// The permissions a request asked for, as fs/ applies them.
fs::PermissionSpec to_permission_spec(const protocol::FilePermissions& p);

}  // namespace execd::files
