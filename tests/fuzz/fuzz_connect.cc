// Fuzz target: Connect framing and envd's proto3 JSON messages. The first
// byte picks the split points: an enveloped body read in those pieces gives
// the same messages (and the same verdict) as read whole; the messages
// written again as envelopes read back identically; every envd request
// decoder takes any payload without crashing, and what they decode, written
// back out through the response encoders, is valid JSON whose bytes decode
// to what went in.
#include <cstdlib>
#include <string>
#include <vector>

#include <simdjson.h>

#include "fuzz_input.h"
#include "protocol/base64.h"
#include "protocol/connect.h"
#include "protocol/envd.h"

using namespace execd::protocol;
namespace cn = execd::protocol::connect;
namespace envd = execd::protocol::envd;

namespace {

struct Outcome {
  std::vector<std::pair<uint8_t, std::string>> messages;
  bool ok = true;
  bool finished = true;
};

Outcome read(const std::vector<std::string_view>& pieces) {
  cn::EnvelopeReader r(4096);
  Outcome o;
  for (auto p : pieces) {
    if (!r.feed(p, [&](const cn::EnvelopeReader::Message& m) {
          o.messages.emplace_back(m.flags, std::string(m.payload));
          return true;
        })) {
      o.ok = false;
      break;
    }
  }
  if (o.ok) o.finished = r.finish();
  if (r.buffered() > 4096 + cn::kEnvelopeHeader) std::abort();
  return o;
}

void must_be_json(const std::string& s) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element e;
  if (parser.parse(s).get(e)) std::abort();
}

void exercise_decoders(std::string_view payload) {
  auto start = envd::decode_start(payload);
  if (auto* s = std::get_if<envd::StartRequest>(&start)) {
    envd::ProcessInfo info;
    info.config = s->process;
    info.tag = s->tag;
    must_be_json(envd::list_response({info}));
  }
  auto input = envd::decode_send_input(payload);
  if (auto* in = std::get_if<envd::SendInputRequest>(&input)) {
    std::string out;
    envd::append_data_event(out, envd::DataStream::pty_bytes, reinterpret_cast<const uint8_t*>(in->input.data.data()),
                            in->input.data.size());
    must_be_json(out);
    // The bytes written back decode to what came in.
    size_t q = out.find("\"pty\":\"");
    if (q == std::string::npos) std::abort();
    std::string b64 = out.substr(q + 7, out.find('"', q + 7) - q - 7);
    auto back = base64_decode(b64);
    if (!back || *back != in->input.data) std::abort();
  }
  (void)envd::decode_selector_request(payload);
  (void)envd::decode_update(payload);
  (void)envd::decode_send_signal(payload);
  auto stream = envd::decode_stream_input(payload);
  if (auto* ev = std::get_if<envd::StreamInputEvent>(&stream))
    if (ev->kind == envd::StreamInputEvent::Kind::none && !ev->input.data.empty()) std::abort();
  (void)envd::decode_empty(payload);
  auto path = envd::decode_path_request(payload);
  if (auto* p = std::get_if<envd::PathRequest>(&path)) {
    envd::EntryInfo e;
    e.name = p->path;
    e.path = p->path;
    e.symlink_target = p->path;
    e.metadata[p->path] = p->path;
    must_be_json(envd::entry_response(e));
    envd::FsEvent ev{p->path, envd::EventType::write, e};
    must_be_json(envd::watcher_events_response({ev}));
  }
  (void)envd::decode_move(payload);
  (void)envd::decode_list_dir(payload);
  (void)envd::decode_watch(payload);
  auto wid = envd::decode_watcher_id(payload);
  if (auto* w = std::get_if<envd::WatcherIdRequest>(&wid)) must_be_json(envd::create_watcher_response(w->watcher_id));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Splitter split(data, size);
  std::string_view all = split.all();
  Outcome whole = read({all});
  Outcome pieces = read(split.pieces());
  if (whole.ok != pieces.ok || whole.finished != pieces.finished || whole.messages != pieces.messages) std::abort();

  std::string again;
  for (const auto& [flags, payload] : whole.messages) cn::append_envelope(again, flags, payload);
  Outcome reread = read({again});
  if (!reread.ok || !reread.finished || reread.messages != whole.messages) std::abort();

  for (const auto& m : whole.messages) exercise_decoders(m.second);
  if (whole.messages.empty()) exercise_decoders(all);

  if (auto bytes = envd::decode_proto_bytes(all)) {
    auto back = envd::decode_proto_bytes(base64_encode(*bytes));
    if (!back || *back != *bytes) std::abort();
  }
  std::string end;
  cn::Error err{cn::Code::internal, std::string(all)};
  cn::append_end_stream(end, &err, {{std::string(all), std::string(all)}});
  must_be_json(end.substr(cn::kEnvelopeHeader));
  return 0;
}
