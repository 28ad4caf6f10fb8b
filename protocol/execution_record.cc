// protocol/execution_record: see header.
#include "protocol/execution_record.h"

#include <simdjson.h>

#include <nlohmann/json.hpp>

#include "protocol/changes.h"
#include "protocol/journal.h"

namespace execd::protocol {

using ojson = nlohmann::ordered_json;

namespace {
ojson result_json(const ExecutionResult& r) {
  ojson j;
  j["exit_code"] = r.exit_code ? ojson(*r.exit_code) : ojson();
  j["signal"] = r.signal;
  j["signal_text"] = r.signal_text;
  j["start_error"] = r.start_error;
  j["timed_out"] = r.timed_out;
  j["interrupted"] = r.interrupted;
  j["execution_time_ms"] = r.execution_time_ms;
  j["stdout_bytes"] = r.stdout_bytes;
  j["stderr_bytes"] = r.stderr_bytes;
  j["stdout_sha256"] = r.stdout_sha256;
  j["stderr_sha256"] = r.stderr_sha256;
  j["user_cpu_ms"] = r.user_cpu_ms;
  j["system_cpu_ms"] = r.system_cpu_ms;
  j["max_rss_kib"] = r.max_rss_kib;
  j["leftover_processes"] = r.leftover_processes;
  j["oom_killed"] = r.oom_killed;
  j["pids_limit_hit"] = r.pids_limit_hit;
  if (!r.status.empty()) j["status"] = r.status;
  if (r.execution_count) j["execution_count"] = *r.execution_count;
  if (r.changes) j["changes"] = changes_json(*r.changes);
  return j;
}

// Decoding reads what the encoder writes; a field that is missing or of
// another type fails the record (a torn or edited line), except those older
// records lack, which default.
class Fields {
 public:
  explicit Fields(simdjson::dom::object obj) : obj_(obj) {}
  bool ok() const { return ok_; }
  template <class T>
  T get(std::string_view key) {
    T v{};
    if (obj_[key].get(v)) ok_ = false;
    return v;
  }
  template <class T>
  T get_or(std::string_view key, T fallback) {
    simdjson::dom::element e;
    if (obj_[key].get(e)) return fallback;
    T v{};
    if (e.get(v)) ok_ = false;
    return v;
  }
  std::string str(std::string_view key) { return std::string(get<std::string_view>(key)); }
  std::string str_or(std::string_view key) { return std::string(get_or<std::string_view>(key, {})); }
  std::optional<int64_t> opt_int(std::string_view key) {
    simdjson::dom::element e;
    if (obj_[key].get(e) || e.is_null()) return std::nullopt;
    int64_t v = 0;
    if (e.get(v)) ok_ = false;
    return v;
  }
  // An array of strings, or absent (records of shell commands).
  bool strings_or(std::string_view key, std::vector<std::string>& out) {
    simdjson::dom::array arr;
    if (obj_[key].get(arr)) return true;
    for (auto item : arr) {
      std::string_view s;
      if (item.get(s)) return false;
      out.emplace_back(s);
    }
    return true;
  }
  simdjson::dom::object object(std::string_view key) {
    simdjson::dom::object o;
    if (obj_[key].get(o)) ok_ = false;
    return o;
  }

 private:
  simdjson::dom::object obj_;
  bool ok_ = true;
};

bool result_from(simdjson::dom::object obj, ExecutionResult& r) {
  Fields f(obj);
  if (auto code = f.opt_int("exit_code")) r.exit_code = static_cast<int>(*code);
  r.signal = f.str("signal");
  r.signal_text = f.str("signal_text");
  r.start_error = f.str("start_error");
  r.timed_out = f.get<bool>("timed_out");
  r.interrupted = f.get<bool>("interrupted");
  r.execution_time_ms = f.get<int64_t>("execution_time_ms");
  r.stdout_bytes = f.get<uint64_t>("stdout_bytes");
  r.stderr_bytes = f.get<uint64_t>("stderr_bytes");
  r.stdout_sha256 = f.str("stdout_sha256");
  r.stderr_sha256 = f.str("stderr_sha256");
  r.user_cpu_ms = f.get<int64_t>("user_cpu_ms");
  r.system_cpu_ms = f.get<int64_t>("system_cpu_ms");
  r.max_rss_kib = f.get<int64_t>("max_rss_kib");
  // Absent from records written before containment, and before code runs.
  r.leftover_processes = static_cast<int>(f.get_or<int64_t>("leftover_processes", 0));
  r.oom_killed = f.get_or<bool>("oom_killed", false);
  r.pids_limit_hit = f.get_or<bool>("pids_limit_hit", false);
  r.status = f.str_or("status");
  if (auto n = f.opt_int("execution_count")) r.execution_count = *n;
  simdjson::dom::element changes;
  if (!obj["changes"].get(changes)) {
    // Kept as written; a record whose list does not read back keeps the rest.
    std::string text = simdjson::minify(changes);
    if (auto s = decode_changes_json(text)) r.changes = std::make_shared<const ChangeSummary>(std::move(*s));
  }
  return f.ok();
}
}  // namespace

std::string encode_stored_execution(const StoredExecution& r) {
  ojson j;
  j["v"] = 1;
  j["kind"] = r.kind;
  j["id"] = r.id;
  j["content"] = r.content;
  if (!r.argv.empty()) j["argv"] = r.argv;
  j["fingerprint"] = r.fingerprint;
  j["cwd"] = r.cwd;
  j["uid"] = r.uid ? ojson(*r.uid) : ojson();
  j["gid"] = r.gid ? ojson(*r.gid) : ojson();
  j["owner"] = r.owner;
  j["language"] = r.language;
  j["background"] = r.background;
  j["tty"] = r.tty;
  j["stdin"] = r.stdin_open;
  j["stdin_accepted"] = r.stdin_accepted;
  j["started_ns"] = r.started_ns;
  j["finished_ns"] = r.finished_ns;
  j["pgid"] = r.pgid;
  j["boot_id"] = r.boot_id;
  j["start_ticks"] = r.start_ticks;
  j["finished"] = r.finished;
  j["lost"] = r.lost;
  j["result"] = result_json(r.result);
  j["output_total"] = r.output_total;
  std::string line = j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  std::string out = line;
  out += "\nsha256:";
  out += sha256_hex(line);
  out += "\n";
  return out;
}

std::optional<StoredExecution> decode_stored_execution(std::string_view file) {
  size_t nl = file.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  std::string_view line = file.substr(0, nl);
  std::string_view rest = file.substr(nl + 1);
  if (rest.size() < 7 + 64 || rest.substr(0, 7) != "sha256:" || rest.substr(7, 64) != sha256_hex(line))
    return std::nullopt;
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(line.data(), line.size()).get(obj)) return std::nullopt;
  Fields f(obj);
  if (f.get<int64_t>("v") != 1) return std::nullopt;
  StoredExecution r;
  r.kind = f.get_or<std::string_view>("kind", "command");
  r.id = f.str("id");
  r.content = f.str("content");
  if (!f.strings_or("argv", r.argv)) return std::nullopt;
  r.fingerprint = f.str("fingerprint");
  r.cwd = f.str_or("cwd");
  if (auto uid = f.opt_int("uid")) r.uid = static_cast<uint32_t>(*uid);
  if (auto gid = f.opt_int("gid")) r.gid = static_cast<uint32_t>(*gid);
  r.owner = f.str_or("owner");
  r.language = f.str_or("language");
  r.background = f.get<bool>("background");
  r.tty = f.get<bool>("tty");
  r.stdin_open = f.get<bool>("stdin");
  r.stdin_accepted = f.get_or<uint64_t>("stdin_accepted", 0);
  r.started_ns = f.get<int64_t>("started_ns");
  r.finished_ns = f.get<int64_t>("finished_ns");
  r.pgid = f.get<int64_t>("pgid");
  r.boot_id = f.str("boot_id");
  r.start_ticks = f.get<uint64_t>("start_ticks");
  r.finished = f.get<bool>("finished");
  r.lost = f.get<bool>("lost");
  r.output_total = f.get<uint64_t>("output_total");
  if (!f.ok() || !result_from(f.object("result"), r.result) || !f.ok()) return std::nullopt;
  return r;
}

std::string request_fingerprint(const CommandRequest& req) {
  ojson j;
  j["command"] = req.command;
  if (!req.argv.empty()) j["argv"] = req.argv;
  j["cwd"] = req.cwd;
  j["background"] = req.background;
  j["timeout"] = req.timeout_ms;
  j["uid"] = req.uid ? ojson(*req.uid) : ojson();
  j["gid"] = req.gid ? ojson(*req.gid) : ojson();
  ojson envs = ojson::object();
  for (const auto& [k, v] : req.envs) envs[k] = v;  // std::map: sorted
  j["envs"] = envs;
  j["tty"] = req.tty;
  j["rows"] = req.rows;
  j["cols"] = req.cols;
  j["stdin"] = req.stdin_open;
  if (!req.track_changes.empty()) j["track_changes"] = req.track_changes;
  return sha256_hex(j.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

}  // namespace execd::protocol
