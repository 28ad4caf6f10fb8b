// protocol/envelope: see header.
#include "protocol/envelope.h"

#include "protocol/base64.h"
#include "protocol/changes.h"

#include <simdjson.h>
#include "protocol/json_text.h"

namespace execd::protocol {

const char* stream_name(OutputStream s) { return s == OutputStream::out ? "stdout" : "stderr"; }

namespace {

void append_int(std::string& out, int64_t v) { out += std::to_string(v); }

void append_result_fields(std::string& out, const ExecutionResult& r) {
  out += ",\"exit_code\":";
  if (r.exit_code) append_int(out, *r.exit_code); else out += "null";
  out += ",\"signal\":";
  if (r.signal.empty()) out += "null"; else append_json_string(out, r.signal);
  out += ",\"timed_out\":";
  out += r.timed_out ? "true" : "false";
  out += ",\"interrupted\":";
  out += r.interrupted ? "true" : "false";
  out += ",\"stdout_bytes\":";
  append_int(out, static_cast<int64_t>(r.stdout_bytes));
  out += ",\"stderr_bytes\":";
  append_int(out, static_cast<int64_t>(r.stderr_bytes));
  out += ",\"stdout_sha256\":";
  append_json_string(out, r.stdout_sha256);
  out += ",\"stderr_sha256\":";
  append_json_string(out, r.stderr_sha256);
  out += ",\"user_cpu_ms\":";
  append_int(out, r.user_cpu_ms);
  out += ",\"system_cpu_ms\":";
  append_int(out, r.system_cpu_ms);
  out += ",\"max_rss_kib\":";
  append_int(out, r.max_rss_kib);
  out += ",\"leftover_processes\":";
  append_int(out, r.leftover_processes);
  out += ",\"oom_killed\":";
  out += r.oom_killed ? "true" : "false";
  out += ",\"pids_limit_hit\":";
  out += r.pids_limit_hit ? "true" : "false";
  if (!r.start_error.empty()) {
    out += ",\"start_error\":";
    append_json_string_lossy(out, r.start_error);
  }
}

void append_changes(std::string& out, const ExecutionResult& r) {
  if (!r.changes) return;
  out += ",\"changes\":";
  out += changes_json(*r.changes).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

void EventEncoder::end_event(std::string& out) const {
  out += framing_ == Framing::exact ? "\n" : "\n\n";
}

void EventEncoder::init(std::string& out, std::string_view id, int64_t ts) const {
  out += "{\"type\":\"init\",\"text\":";
  append_json_string_lossy(out, id);
  out += ",\"timestamp\":";
  append_int(out, ts);
  out += '}';
  end_event(out);
}

void EventEncoder::gap(std::string& out, OutputStream s, uint64_t requested, uint64_t available_from, int64_t ts) {
  // Whatever a stream held back belongs before the gap.
  flush(out, s, ts);
  out += "{\"type\":\"gap\",\"stream\":\"";
  out += stream_name(s);
  out += "\",\"requested\":";
  append_int(out, static_cast<int64_t>(requested));
  out += ",\"available_from\":";
  append_int(out, static_cast<int64_t>(available_from));
  out += ",\"timestamp\":";
  append_int(out, ts);
  out += '}';
  end_event(out);
  streams_[static_cast<int>(s)].offset = available_from;
}

void EventEncoder::ping(std::string& out, int64_t ts) const {
  out += "{\"type\":\"ping\",\"text\":\"pong\",\"timestamp\":";
  append_int(out, ts);
  out += '}';
  end_event(out);
}

void EventEncoder::compat_line(std::string& out, OutputStream s, std::string_view line, int64_t ts) const {
  while (line.size() > kMaxCompatLine) {
    size_t cut = kMaxCompatLine;
    size_t tail = utf8_incomplete_tail(reinterpret_cast<const uint8_t*>(line.data()), cut);
    if (tail < cut) cut -= tail;
    compat_event(out, s, line.substr(0, cut), ts);
    line.remove_prefix(cut);
  }
  compat_event(out, s, line, ts);
}

void EventEncoder::compat_event(std::string& out, OutputStream s, std::string_view line, int64_t ts) const {
  out += "{\"type\":\"";
  out += stream_name(s);
  out += "\",\"text\":";
  append_json_string_lossy(out, line);
  out += ",\"timestamp\":";
  append_int(out, ts);
  out += "}\n\n";
}

void EventEncoder::output(std::string& out, OutputStream s, const uint8_t* data, size_t len, int64_t ts) {
  if (framing_ == Framing::exact) {
    exact_chunk(out, s, data, len, ts);
    return;
  }
  if (!split_lines_) {
    if (len) compat_line(out, s, std::string_view(reinterpret_cast<const char*>(data), len), ts);
    return;
  }
  // Contract 4.4: '\n' and '\r' both end a line; a terminator on an empty line
  // is the text "\n", except the '\n' of a "\r\n" pair.
  StreamState& st = streams_[static_cast<int>(s)];
  size_t run = 0;  // start of the not-yet-consumed run within data
  for (size_t i = 0; i < len; ++i) {
    uint8_t c = data[i];
    if (c != '\n' && c != '\r') {
      st.last_was_cr = false;
      continue;
    }
    bool swallowed = c == '\n' && st.last_was_cr;
    st.last_was_cr = c == '\r';
    if (swallowed) {
      run = i + 1;
      continue;
    }
    std::string_view piece(reinterpret_cast<const char*>(data) + run, i - run);
    if (st.pending.empty()) {
      compat_line(out, s, piece.empty() ? std::string_view("\n") : piece, ts);
    } else {
      st.pending.append(piece);
      compat_line(out, s, st.pending, ts);
      st.pending.clear();
    }
    run = i + 1;
  }
  if (run < len) {
    st.pending.append(reinterpret_cast<const char*>(data) + run, len - run);
    if (st.pending.size() > kMaxCompatLine) {
      // Emit the full pieces now; keep only the unfinished remainder.
      size_t keep = st.pending.size() % kMaxCompatLine;
      std::string_view full(st.pending.data(), st.pending.size() - keep);
      size_t tail = utf8_incomplete_tail(reinterpret_cast<const uint8_t*>(full.data()), full.size());
      full.remove_suffix(tail);
      compat_line(out, s, full, ts);
      st.pending.erase(0, full.size());
    }
  }
}

void EventEncoder::exact_event(std::string& out, OutputStream s, const uint8_t* data, size_t len, bool text,
                               int64_t ts) {
  StreamState& st = streams_[static_cast<int>(s)];
  out += "{\"type\":\"";
  out += stream_name(s);
  if (text) {
    out += "\",\"text\":";
    append_json_string(out, std::string_view(reinterpret_cast<const char*>(data), len));
  } else {
    out += "\",\"b64\":\"";
    append_base64(out, data, len);
    out += '"';
  }
  out += ",\"offset\":";
  append_int(out, static_cast<int64_t>(st.offset));
  out += ",\"timestamp\":";
  append_int(out, ts);
  out += "}\n";
  st.offset += len;
}

void EventEncoder::exact_chunk(std::string& out, OutputStream s, const uint8_t* data, size_t len, int64_t ts) {
  StreamState& st = streams_[static_cast<int>(s)];
  std::string joined;
  if (!st.pending.empty()) {
    joined = std::move(st.pending);
    st.pending.clear();
    joined.append(reinterpret_cast<const char*>(data), len);
    data = reinterpret_cast<const uint8_t*>(joined.data());
    len = joined.size();
  }
  // Hold back a character that is cut by the read boundary.
  size_t tail = utf8_incomplete_tail(data, len);
  size_t body = len - tail;
  // Valid runs become text events; an invalid run extends until valid text
  // resumes for a while, so binary output does not shatter into tiny events.
  constexpr size_t kMinTextRun = 32;
  // The common case, a whole chunk of valid text, checked at SIMD speed once
  // (never per run: on binary data that would be quadratic).
  bool all_text = body > 0 && simdjson::validate_utf8(reinterpret_cast<const char*>(data), body);
  if (all_text) exact_event(out, s, data, body, true, ts);
  size_t i = all_text ? body : 0;
  while (i < body) {
    size_t valid = utf8_valid_prefix(data + i, body - i);
    if (valid > 0) {
      exact_event(out, s, data + i, valid, true, ts);
      i += valid;
      continue;
    }
    size_t j = i + 1;
    while (j < body) {
      size_t v = utf8_valid_prefix(data + j, body - j);
      if (v >= kMinTextRun || j + v == body) {
        if (j + v == body && v < kMinTextRun) j = body;
        break;
      }
      j += v + 1;
    }
    if (j > body) j = body;
    exact_event(out, s, data + i, j - i, false, ts);
    i = j;
  }
  if (tail) st.pending.assign(reinterpret_cast<const char*>(data) + body, tail);
}

void EventEncoder::flush(std::string& out, OutputStream s, int64_t ts) {
  StreamState& st = streams_[static_cast<int>(s)];
  if (st.pending.empty()) return;
  if (framing_ == Framing::exact) {
    exact_event(out, s, reinterpret_cast<const uint8_t*>(st.pending.data()), st.pending.size(), false, ts);
  } else {
    compat_line(out, s, st.pending, ts);
  }
  st.pending.clear();
}

void EventEncoder::background_ack(std::string& out, int64_t ts) const {
  out += "{\"type\":\"execution_complete\",\"timestamp\":";
  append_int(out, ts);
  out += '}';
  end_event(out);
}

void EventEncoder::terminal(std::string& out, const ExecutionResult& r, int64_t ts) const {
  if (!r.status.empty()) {
    // A code run: how the kernel ended it. Exact framing adds the proof of
    // what it printed.
    out += "{\"type\":\"execution_complete\",\"execution_time\":";
    append_int(out, r.execution_time_ms);
    out += ",\"timestamp\":";
    append_int(out, ts);
    out += ",\"status\":";
    append_json_string(out, r.status);
    if (r.execution_count) {
      out += ",\"execution_count\":";
      append_int(out, *r.execution_count);
    }
    if (framing_ == Framing::exact) {
      out += ",\"stdout_bytes\":";
      append_int(out, static_cast<int64_t>(r.stdout_bytes));
      out += ",\"stderr_bytes\":";
      append_int(out, static_cast<int64_t>(r.stderr_bytes));
      out += ",\"stdout_sha256\":";
      append_json_string(out, r.stdout_sha256);
      out += ",\"stderr_sha256\":";
      append_json_string(out, r.stderr_sha256);
    }
    append_changes(out, r);
    out += '}';
    return end_event(out);
  }
  bool success = r.exit_code && *r.exit_code == 0;
  if (framing_ == Framing::exact || success) {
    out += "{\"type\":\"execution_complete\",\"execution_time\":";
    append_int(out, r.execution_time_ms);
  } else {
    // The SDKs read the exit code from error.evalue (as the Go daemon sends it).
    std::string evalue, traceback;
    if (!r.start_error.empty()) {
      evalue = traceback = r.start_error;
    } else if (r.exit_code) {
      evalue = std::to_string(*r.exit_code);
      traceback = "exit status " + evalue;
    } else {
      evalue = "-1";
      traceback = "signal: " + (r.signal_text.empty() ? std::string("killed") : r.signal_text);
    }
    out += "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":";
    append_json_string_lossy(out, evalue);
    out += ",\"traceback\":[";
    append_json_string_lossy(out, traceback);
    out += "]},\"execution_time\":";
    append_int(out, r.execution_time_ms);
  }
  out += ",\"timestamp\":";
  append_int(out, ts);
  append_result_fields(out, r);
  append_changes(out, r);
  out += '}';
  end_event(out);
}

void EventEncoder::event(std::string& out, std::string_view json_object) const {
  out += json_object;
  end_event(out);
}

void EventEncoder::error(std::string& out, std::string_view ename, std::string_view evalue, int64_t ts) const {
  out += "{\"type\":\"error\",\"error\":{\"ename\":";
  append_json_string_lossy(out, ename);
  out += ",\"evalue\":";
  append_json_string_lossy(out, evalue);
  out += ",\"traceback\":[";
  append_json_string_lossy(out, evalue);
  out += "]},\"timestamp\":";
  append_int(out, ts);
  out += '}';
  end_event(out);
}

}  // namespace execd::protocol
