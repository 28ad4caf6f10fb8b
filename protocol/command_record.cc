// protocol/command_record: see header.
#include "protocol/command_record.h"

#include <nlohmann/json.hpp>

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
  return j;
}

void result_from(const nlohmann::json& j, ExecutionResult& r) {
  if (j.at("exit_code").is_number_integer()) r.exit_code = j.at("exit_code").get<int>();
  r.signal = j.at("signal").get<std::string>();
  r.signal_text = j.at("signal_text").get<std::string>();
  r.start_error = j.at("start_error").get<std::string>();
  r.timed_out = j.at("timed_out").get<bool>();
  r.interrupted = j.at("interrupted").get<bool>();
  r.execution_time_ms = j.at("execution_time_ms").get<int64_t>();
  r.stdout_bytes = j.at("stdout_bytes").get<uint64_t>();
  r.stderr_bytes = j.at("stderr_bytes").get<uint64_t>();
  r.stdout_sha256 = j.at("stdout_sha256").get<std::string>();
  r.stderr_sha256 = j.at("stderr_sha256").get<std::string>();
  r.user_cpu_ms = j.at("user_cpu_ms").get<int64_t>();
  r.system_cpu_ms = j.at("system_cpu_ms").get<int64_t>();
  r.max_rss_kib = j.at("max_rss_kib").get<int64_t>();
  // Absent from records written before containment.
  r.leftover_processes = j.value("leftover_processes", 0);
  r.oom_killed = j.value("oom_killed", false);
  r.pids_limit_hit = j.value("pids_limit_hit", false);
}
}  // namespace

std::string encode_stored_command(const StoredCommand& r) {
  ojson j;
  j["v"] = 1;
  j["id"] = r.id;
  j["content"] = r.content;
  j["fingerprint"] = r.fingerprint;
  j["background"] = r.background;
  j["tty"] = r.tty;
  j["stdin"] = r.stdin_open;
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

std::optional<StoredCommand> decode_stored_command(std::string_view file) {
  size_t nl = file.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  std::string_view line = file.substr(0, nl);
  std::string_view rest = file.substr(nl + 1);
  if (rest.size() < 7 + 64 || rest.substr(0, 7) != "sha256:" || rest.substr(7, 64) != sha256_hex(line))
    return std::nullopt;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    if (j.at("v").get<int>() != 1) return std::nullopt;
    StoredCommand r;
    r.id = j.at("id").get<std::string>();
    r.content = j.at("content").get<std::string>();
    r.fingerprint = j.at("fingerprint").get<std::string>();
    r.background = j.at("background").get<bool>();
    r.tty = j.at("tty").get<bool>();
    r.stdin_open = j.at("stdin").get<bool>();
    r.started_ns = j.at("started_ns").get<int64_t>();
    r.finished_ns = j.at("finished_ns").get<int64_t>();
    r.pgid = j.at("pgid").get<int64_t>();
    r.boot_id = j.at("boot_id").get<std::string>();
    r.start_ticks = j.at("start_ticks").get<uint64_t>();
    r.finished = j.at("finished").get<bool>();
    r.lost = j.at("lost").get<bool>();
    result_from(j.at("result"), r.result);
    r.output_total = j.at("output_total").get<uint64_t>();
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::string request_fingerprint(const CommandRequest& req) {
  ojson j;
  j["command"] = req.command;
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
  return sha256_hex(j.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

}  // namespace execd::protocol
