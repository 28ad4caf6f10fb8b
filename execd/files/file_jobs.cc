// execd/files/file_jobs: see header.
#include "execd/files/file_jobs.h"

#include "execd/http/awaiter.h"
#include "execd/journal/journal.h"
#include "execd/work_gate.h"
#include "execd/context.h"
#include "fs/atomic_file.h"
#include "fs/paths.h"

#include <memory>
#include <sstream>

#include "protocol/errors.h"
#include "fs/pool_job.h"

namespace execd::files {

FileReply FileReply::json(const nlohmann::json& value) {
  FileReply r;
  r.content_type = "application/json; charset=utf-8";
  r.body = dump_json(value);
  return r;
}

FileReply FileReply::error(int status, std::string_view code, std::string_view message) {
  FileReply r;
  r.status = status;
  r.content_type = "application/json; charset=utf-8";
  r.body = protocol::error_body(code, message);
  return r;
}

FileStatus file_error_status(fs::ErrorKind kind) {
  namespace codes = protocol::codes;
  switch (kind) {
    case fs::ErrorKind::not_found: return {404, codes::kFileNotFound};
    case fs::ErrorKind::bad_request: return {400, codes::kInvalidRequestBody};
    // 403 and 507 are new: the Go daemon answered both with 500.
    case fs::ErrorKind::forbidden: return {403, codes::kPermissionDenied};
    case fs::ErrorKind::no_space: return {507, codes::kInsufficientStorage};
    case fs::ErrorKind::too_large: return {413, codes::kPayloadTooLarge};
    case fs::ErrorKind::conflict:
    case fs::ErrorKind::internal: break;
  }
  return {500, codes::kRuntimeError};
}

FileReply FileReply::from(const fs::Error& error) {
  FileStatus st = file_error_status(error.kind);
  return FileReply::error(st.status, st.code, error.message);
}

void send_reply(http::Exchange& ex, const FileReply& reply) {
  ex.respond(reply.status, reply.content_type, reply.body, reply.headers);
}

namespace {
// Owned by itself from uv_queue_work until its after-work callback.
struct FileJob : http::Awaitable {
  WorkGate::Ticket work;
  std::function<FileReply()> job;
  std::function<void(const FileReply&)> done;
  FileReply reply;
  // Still waiting at the gate: it never takes a thread (the after-callback
  // runs now, with UV_ECANCELED, and frees the job).
  void client_gone() override { work.gate->cancel(work); }
};
}  // namespace

void run_file_job(FileService& svc, http::Exchange& ex, std::function<FileReply()> job,
                  std::function<void(const FileReply&)> done) {
  auto* w = new FileJob;
  w->job = std::move(job);
  w->done = std::move(done);
  w->work.req.data = w;
  int rc = svc.queue(
      w->work,
      [](uv_work_t* work) {
        auto* w = static_cast<FileJob*>(work->data);
        try {
          w->reply = w->job();
        } catch (const std::exception& e) {  // bad_alloc, json type errors: never cross the pool
          w->reply = FileReply::error(500, protocol::codes::kRuntimeError, e.what());
        }
      },
      [](uv_work_t* work, int status) {
        std::unique_ptr<FileJob> w(static_cast<FileJob*>(work->data));
        if (status == UV_ECANCELED) return;  // never ran: nothing to report
        if (status != 0)
          w->reply = FileReply::error(500, protocol::codes::kRuntimeError,
                                      std::string("file work did not run: ") + uv_strerror(status));
        if (w->done) w->done(w->reply);
        if (http::Exchange* ex = w->exchange()) send_reply(*ex, w->reply);
      });
  if (rc != 0) {
    delete w;
    ex.respond_error(500, protocol::codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
    return;
  }
  http::await(ex, *w);
}

void journal_change(const FileService& svc, std::string op, std::vector<std::string> paths) {
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (!svc.session.empty()) extra["isolated_session"] = svc.session;
  journal::journal_file_change(svc.journal, std::move(op), std::move(paths), std::move(extra), svc.mount);
}

namespace {
struct BlockingJob : http::Awaitable {
  std::function<void()> blocking;
  std::function<void(http::Exchange&)> then;
};
}  // namespace

void run_blocking(uv_loop_t* loop, http::Exchange& ex, std::function<void()> blocking,
                  std::function<void(http::Exchange&)> then) {
  auto job = std::make_unique<BlockingJob>();
  job->blocking = std::move(blocking);
  job->then = std::move(then);
  http::await(ex, *job);
  fs::queue_job<BlockingJob>(
      loop, std::move(job), [](BlockingJob& j) { j.blocking(); },
      [](BlockingJob& j, int) {
        if (http::Exchange* ex = j.exchange()) j.then(*ex);
      });
}

WorkingDir make_working_dir(const std::vector<std::string>& env, const std::string& requested) {
  WorkingDir dir;
  if (requested.empty()) return dir;
  auto expanded = fs::expand_path(requested, [&](std::string_view n) { return env_lookup(env, n); });
  if (!expanded) return dir.error = expanded.error().message, dir;
  if (auto made = fs::make_directory_tree(expanded.value()); !made) return dir.error = made.error().message, dir;
  dir.path = expanded.value();
  return dir;
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

fs::PermissionSpec to_permission_spec(const protocol::FilePermissions& p) {
  fs::PermissionSpec spec;
  spec.owner = p.owner;
  spec.group = p.group;
  if (p.mode) spec.mode = static_cast<mode_t>(*p.mode);
  return spec;
}

}  // namespace execd::files
