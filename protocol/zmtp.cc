// protocol/zmtp: see header.
#include "protocol/zmtp.h"

#include <strings.h>

#include <algorithm>
#include <cstring>

namespace execd::protocol::zmtp {

namespace {

constexpr uint8_t kMore = 0x01;
constexpr uint8_t kLong = 0x02;
constexpr uint8_t kCommand = 0x04;
constexpr uint8_t kReserved = 0xF8;
// A PING's context is at most this long (RFC 37).
constexpr size_t kPingContextMax = 16;

std::string printable(std::string_view s, size_t max = 40) {
  std::string out;
  for (char c : s.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > max) out += "...";
  return out;
}

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

}  // namespace

std::string_view socket_type_name(SocketType t) {
  switch (t) {
    case SocketType::dealer: return "DEALER";
    case SocketType::sub: return "SUB";
    case SocketType::req: return "REQ";
  }
  return "";
}

bool compatible(SocketType ours, std::string_view peer) {
  switch (ours) {
    case SocketType::dealer: return peer == "ROUTER" || peer == "DEALER" || peer == "REP";
    case SocketType::sub: return peer == "PUB" || peer == "XPUB";
    case SocketType::req: return peer == "REP" || peer == "ROUTER";
  }
  return false;
}

std::string greeting() {
  std::string g(kGreetingSize, '\0');
  g[0] = static_cast<char>(0xff);
  g[8] = 1;  // the padding a ZMTP 1.0 peer reads as a length; libzmq sends 1 too
  g[9] = 0x7f;
  g[10] = 3;  // version 3.1
  g[11] = 1;
  memcpy(&g[12], "NULL", 4);
  // as-server 0 and the filler stay zero.
  return g;
}

void append_frame_header(std::string& out, uint64_t size, bool more, bool command) {
  uint8_t flags = (more ? kMore : 0) | (command ? kCommand : 0);
  if (size > 255) {
    out += static_cast<char>(flags | kLong);
    for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((size >> shift) & 0xff);
  } else {
    out += static_cast<char>(flags);
    out += static_cast<char>(size);
  }
}

void append_message(std::string& out, const std::vector<std::string_view>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    append_frame_header(out, frames[i].size(), i + 1 < frames.size(), false);
    out.append(frames[i]);
  }
}

std::string command_frame(std::string_view name, std::string_view data) {
  std::string out;
  append_frame_header(out, 1 + name.size() + data.size(), false, true);
  out += static_cast<char>(name.size());
  out.append(name);
  out.append(data);
  return out;
}

void append_property(std::string& out, std::string_view name, std::string_view value) {
  out += static_cast<char>(name.size());
  out.append(name);
  put_u32(out, static_cast<uint32_t>(value.size()));
  out.append(value);
}

bool parse_metadata(std::string_view data, std::vector<Property>& out) {
  size_t at = 0;
  while (at < data.size()) {
    size_t name_len = static_cast<uint8_t>(data[at++]);
    if (name_len == 0 || data.size() - at < name_len + 4) return false;
    std::string_view name = data.substr(at, name_len);
    at += name_len;
    uint32_t value_len = 0;
    for (int i = 0; i < 4; ++i) value_len = (value_len << 8) | static_cast<uint8_t>(data[at++]);
    if (data.size() - at < value_len) return false;
    out.push_back({std::string(name), std::string(data.substr(at, value_len))});
    at += value_len;
  }
  return true;
}

std::string ready_command(SocketType ours) {
  std::string props;
  append_property(props, "Socket-Type", socket_type_name(ours));
  if (ours != SocketType::sub) append_property(props, "Identity", "");
  return command_frame("READY", props);
}

std::string pong_command(std::string_view context) { return command_frame("PONG", context); }

std::string subscribe_frame(std::string_view topic, int peer_minor) {
  if (peer_minor >= 1) return command_frame("SUBSCRIBE", topic);
  std::string body = "\x01";
  body.append(topic);
  std::string out;
  append_message(out, {body});
  return out;
}

std::vector<std::string_view> Message::views() const {
  std::vector<std::string_view> v;
  v.reserve(frames_.size());
  for (size_t i = 0; i < frames_.size(); ++i) v.push_back(frame(i));
  return v;
}

// ---------------------------------------------------------------------------
// Connection

Connection::Connection(SocketType ours, Limits limits) : ours_(ours), limits_(limits) {
  out_ = greeting() + ready_command(ours_);
}

void Connection::fail(std::string why) {
  if (state_ == State::failed) return;
  state_ = State::failed;
  error_ = std::move(why);
  // Nothing of a broken connection is kept: not the message being received,
  // not what waited for the handshake.
  partial_ = Message();
  command_ = std::string();
  waiting_ = std::string();
  body_ = nullptr;
}

bool Connection::on_greeting() {
  const auto* g = reinterpret_cast<const unsigned char*>(greeting_);
  if (greeting_len_ >= 1 && g[0] != 0xff) {
    fail("not a ZMTP peer: its first byte is not 0xFF");
    return false;
  }
  if (greeting_len_ >= 10 && g[9] != 0x7f) {
    fail("not a ZMTP 3 peer: its signature does not end in 0x7F");
    return false;
  }
  if (greeting_len_ >= 11 && g[10] < 3) {
    fail("the peer speaks ZMTP " + std::to_string(g[10]) + ".x; execd speaks 3.0 and later");
    return false;
  }
  if (greeting_len_ < kGreetingSize) return true;
  // A peer newer than 3.1 talks 3.1 to us (the lower version wins).
  peer_minor_ = g[10] > 3 ? 1 : g[11];
  static const char kNull[20] = {'N', 'U', 'L', 'L'};
  if (memcmp(&greeting_[12], kNull, sizeof kNull) != 0) {
    std::string_view mech(&greeting_[12], strnlen(&greeting_[12], 20));
    fail("the peer wants the " + printable(mech) + " mechanism; execd speaks NULL only");
    return false;
  }
  state_ = State::handshake;
  return true;
}

bool Connection::feed(const char* p, size_t n) {
  while (n > 0 && state_ != State::failed) {
    if (state_ == State::greeting) {
      size_t take = std::min(n, kGreetingSize - greeting_len_);
      memcpy(greeting_ + greeting_len_, p, take);
      greeting_len_ += take;
      p += take;
      n -= take;
      on_greeting();
      continue;
    }
    switch (phase_) {
      case Phase::flags: {
        flags_ = static_cast<uint8_t>(*p++);
        --n;
        const bool command = flags_ & kCommand;
        const bool in_message = !partial_.frames_.empty() || skipping_;
        if (flags_ & kReserved) fail("a frame with reserved flag bits set");
        else if (command && (flags_ & kMore)) fail("a command frame with the MORE flag");
        else if (command && in_message) fail("a command inside a multipart message");
        else if (!command && state_ == State::handshake) fail("a message before the handshake ended");
        size_need_ = (flags_ & kLong) ? 8 : 1;
        size_len_ = 0;
        phase_ = Phase::size;
        break;
      }
      case Phase::size: {
        size_t take = std::min(n, size_need_ - size_len_);
        memcpy(size_bytes_ + size_len_, p, take);
        size_len_ += take;
        p += take;
        n -= take;
        if (size_len_ < size_need_) break;
        body_size_ = 0;
        for (size_t i = 0; i < size_need_; ++i) body_size_ = (body_size_ << 8) | size_bytes_[i];
        begin_frame();
        if (state_ == State::failed) break;
        if (body_size_ == 0) end_frame();
        else phase_ = Phase::body;
        break;
      }
      case Phase::body: {
        uint64_t left = body_size_ - body_got_;
        size_t take = left < n ? static_cast<size_t>(left) : n;
        if (body_) memcpy(body_ + body_got_, p, take);
        else skipped_ += take;
        body_got_ += take;
        p += take;
        n -= take;
        if (body_got_ == body_size_) end_frame();
        break;
      }
    }
  }
  return state_ != State::failed;
}

void Connection::begin_frame() {
  body_got_ = 0;
  body_ = nullptr;
  if (flags_ & kCommand) {
    if (body_size_ > limits_.max_command) {
      fail("a command of " + std::to_string(body_size_) + " bytes (at most " + std::to_string(limits_.max_command) +
           ")");
      return;
    }
    command_.resize(static_cast<size_t>(body_size_));
    body_ = command_.data();
    return;
  }
  if (!skipping_ && (partial_.frames_.size() >= limits_.max_frames ||
                     body_size_ > limits_.max_message - partial_.bytes_)) {
    // Over a limit: the rest of this message is counted and thrown away as
    // it arrives, so the stream stays in step and nothing is held.
    skipping_ = true;
    skipped_ = partial_.bytes_;
    partial_ = Message();
  }
  if (skipping_) return;
  Message::Frame f;
  f.size = static_cast<size_t>(body_size_);
  if (f.size) f.data.reset(new char[f.size]);  // (uninitialised: filled as bytes arrive)
  body_ = f.data.get();
  partial_.bytes_ += f.size;
  partial_.frames_.push_back(std::move(f));
}

void Connection::end_frame() {
  phase_ = Phase::flags;
  body_ = nullptr;
  if (flags_ & kCommand) {
    std::string body = std::move(command_);
    command_ = std::string();
    on_command(body);
    return;
  }
  if (flags_ & kMore) return;
  if (skipping_) {
    skipping_ = false;
    ++dropped_messages_;
    dropped_bytes_ += skipped_;
    skipped_ = 0;
    return;
  }
  on_message();
}

void Connection::on_message() {
  Message m = std::move(partial_);
  partial_ = Message();
  if (ours_ == SocketType::req) {
    // A reply without the empty delimiter is not for a REQ socket.
    if (m.frames_.empty() || m.frames_[0].size != 0) return;
    m.frames_.erase(m.frames_.begin());
  }
  if (!wanted(m)) return;
  queued_bytes_ += m.bytes_;
  messages_.push_back(std::move(m));
}

Message Connection::pop() {
  Message m = std::move(messages_.front());
  messages_.pop_front();
  queued_bytes_ -= m.bytes_;
  return m;
}

bool Connection::wanted(const Message& m) const {
  if (ours_ != SocketType::sub) return true;
  std::string_view first = m.frames_.empty() ? std::string_view() : m.frame(0);
  for (const auto& t : topics_)
    if (first.substr(0, t.size()) == t) return true;
  return false;
}

void Connection::on_command(std::string_view body) {
  if (body.empty()) return fail("an empty command frame");
  size_t name_len = static_cast<uint8_t>(body[0]);
  if (name_len == 0 || name_len > body.size() - 1) return fail("a malformed command frame");
  std::string_view name = body.substr(1, name_len);
  std::string_view data = body.substr(1 + name_len);
  if (name == "ERROR") {
    std::string_view reason;
    if (!data.empty()) reason = data.substr(1, static_cast<uint8_t>(data[0]));
    return fail("the peer sent ERROR: " + printable(reason));
  }
  if (state_ == State::handshake) {
    if (name != "READY") return fail("the command " + printable(name) + " during the handshake");
    std::vector<Property> props;
    if (!parse_metadata(data, props)) return fail("malformed READY metadata");
    const Property* type = nullptr;
    for (const auto& p : props)
      if (strcasecmp(p.name.c_str(), "Socket-Type") == 0) type = &p;
    if (!type) return fail("READY without a Socket-Type");
    if (!compatible(ours_, type->value))
      return fail("the peer is a " + printable(type->value) + " socket, which cannot talk to " +
                  std::string(socket_type_name(ours_)));
    peer_metadata_ = std::move(props);
    return finish_handshake();
  }
  if (name == "READY") return fail("a second READY");
  if (name == "PING") {
    if (data.size() < 2) return fail("a PING without its TTL");
    std::string_view context = data.substr(2);
    if (context.size() > kPingContextMax) return fail("a PING with a context over 16 bytes");
    out_ += pong_command(context);
    return;
  }
  // PONG (execd sends no PING), SUBSCRIBE and CANCEL (it publishes nothing),
  // and commands of later versions: nothing to do.
}

void Connection::finish_handshake() {
  state_ = State::ready;
  for (const auto& t : topics_) out_ += subscribe_frame(t, peer_minor_);
  out_ += waiting_;
  waiting_ = std::string();
}

void Connection::send(const std::vector<std::string_view>& frames) {
  if (state_ == State::failed) return;
  std::string& to = state_ == State::ready ? out_ : waiting_;
  if (ours_ == SocketType::req) {
    std::vector<std::string_view> with_delimiter;
    with_delimiter.reserve(frames.size() + 1);
    with_delimiter.emplace_back();
    with_delimiter.insert(with_delimiter.end(), frames.begin(), frames.end());
    append_message(to, with_delimiter);
  } else {
    append_message(to, frames);
  }
}

void Connection::subscribe(std::string_view topic) {
  topics_.emplace_back(topic);
  if (state_ == State::ready) out_ += subscribe_frame(topic, peer_minor_);
}

}  // namespace execd::protocol::zmtp
