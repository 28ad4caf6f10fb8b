// protocol/zmtp: the ZeroMQ Message Transport Protocol as bytes, with no
// sockets: ZMTP 3.0 and 3.1 (rfc.zeromq.org 23/ZMTP and 37/ZMTP) on the
// connecting side of one connection, NULL mechanism only. The greeting, the
// READY/ERROR handshake and its metadata, frames and multipart messages,
// PING/PONG, subscriptions, and the envelope rules of the three socket types
// execd uses towards a Jupyter kernel (DEALER for shell, control and stdin,
// SUB for iopub, REQ for the heartbeat).
//
// A `zmtp::Connection` is fed whatever bytes arrived, in any split, and
// hands back complete messages in order; what it must send (the greeting,
// READY, subscriptions, PONGs, queued messages) collects in its output, which
// the transport writes as the socket takes it. Messages given to send()
// before the peer's READY wait for it: libzmq refuses data that arrives
// before its own side of the handshake is done.
//
// Every size the peer announces is checked before anything is allocated: a
// message over `Limits::max_message` (or with too many frames) is skipped
// byte for byte as it arrives and counted, never stored; an oversized
// command, a malformed frame or a failed handshake is a protocol error,
// after which the connection takes nothing more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace execd::protocol::zmtp {

inline constexpr size_t kGreetingSize = 64;

enum class SocketType : uint8_t { dealer, sub, req };
// "DEALER", "SUB", "REQ": the Socket-Type property's value.
std::string_view socket_type_name(SocketType t);
// Whether a peer announcing `peer` may talk to `ours` (RFC 23's table).
bool compatible(SocketType ours, std::string_view peer);

// The greeting execd sends: signature, version 3.1, mechanism NULL, client.
std::string greeting();

// Appends one frame's header: 1 flag byte and a 1- or 8-byte size.
void append_frame_header(std::string& out, uint64_t size, bool more, bool command);
// Appends a multipart message: every frame but the last has MORE.
void append_message(std::string& out, const std::vector<std::string_view>& frames);

// Command frames (header included).
std::string command_frame(std::string_view name, std::string_view data);
// READY with Socket-Type (and an empty Identity for DEALER and REQ, as
// libzmq sends).
std::string ready_command(SocketType ours);
std::string pong_command(std::string_view context);
// A subscription to `topic`: the SUBSCRIBE command for a 3.1 peer, the
// message 0x01+topic for a 3.0 peer (which knows no SUBSCRIBE).
std::string subscribe_frame(std::string_view topic, int peer_minor);

// NULL-mechanism metadata: name-size(1) name value-size(4, big-endian) value.
struct Property {
  std::string name, value;
};
void append_property(std::string& out, std::string_view name, std::string_view value);
// False when a property runs past the end or has an empty name.
bool parse_metadata(std::string_view data, std::vector<Property>& out);

struct Limits {
  uint64_t max_message = uint64_t{1} << 30;  // sum of a message's frames
  size_t max_frames = 4096;                  // frames of one message
  size_t max_command = 64 * 1024;            // one command's body
};

// One received message; its frames are stored as they arrived, each its own
// allocation, so a view stays valid for as long as the message lives.
class Message {
 public:
  size_t size() const { return frames_.size(); }
  std::string_view frame(size_t i) const { return {frames_[i].data.get(), frames_[i].size}; }
  std::vector<std::string_view> views() const;
  uint64_t bytes() const { return bytes_; }

 private:
  friend class Connection;
  struct Frame {
    std::unique_ptr<char[]> data;
    size_t size = 0;
  };
  std::vector<Frame> frames_;
  uint64_t bytes_ = 0;
};

class Connection {
 public:
  enum class State : uint8_t { greeting, handshake, ready, failed };

  explicit Connection(SocketType ours, Limits limits = {});

  // Takes all `n` bytes; false once the peer broke the protocol (error()).
  bool feed(const char* data, size_t n);

  State state() const { return state_; }
  bool ready() const { return state_ == State::ready; }
  bool failed() const { return state_ == State::failed; }
  const std::string& error() const { return error_; }
  int peer_minor() const { return peer_minor_; }
  const std::vector<Property>& peer_metadata() const { return peer_metadata_; }

  // Complete messages, oldest first (a REQ socket's empty delimiter is
  // already taken off; a SUB socket's only match a subscription).
  bool has_message() const { return !messages_.empty(); }
  Message pop();
  // Bytes of the complete messages waiting.
  uint64_t queued_bytes() const { return queued_bytes_; }
  // Messages skipped for their size or frame count, and their bytes so far.
  uint64_t dropped_messages() const { return dropped_messages_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }

  // Queues a message (a REQ socket adds the empty delimiter); it goes out
  // once the handshake is done.
  void send(const std::vector<std::string_view>& frames);
  // A SUB socket's subscription (a prefix of the first frame; "" is all).
  void subscribe(std::string_view topic);
  // Bytes to write now; the caller takes them (moves them out).
  std::string& output() { return out_; }
  // Bytes queued behind the handshake, not yet in output().
  size_t waiting_bytes() const { return waiting_.size(); }

 private:
  enum class Phase : uint8_t { flags, size, body };
  void fail(std::string why);
  bool on_greeting();
  void begin_frame();
  void end_frame();
  void on_command(std::string_view body);
  void on_message();
  void finish_handshake();
  bool wanted(const Message& m) const;

  SocketType ours_;
  Limits limits_;
  State state_ = State::greeting;
  std::string error_;
  int peer_minor_ = 0;
  std::vector<Property> peer_metadata_;

  // Parser position.
  char greeting_[kGreetingSize];
  size_t greeting_len_ = 0;
  Phase phase_ = Phase::flags;
  uint8_t flags_ = 0;
  unsigned char size_bytes_[8];
  size_t size_len_ = 0, size_need_ = 0;
  uint64_t body_size_ = 0, body_got_ = 0;
  char* body_ = nullptr;      // where the frame's bytes go (nullptr: skipped)
  std::string command_;       // a command's body while it arrives
  Message partial_;           // the message being received
  bool skipping_ = false;     // the message being received is over a limit
  uint64_t skipped_ = 0;      // its bytes so far

  std::deque<Message> messages_;
  uint64_t queued_bytes_ = 0;
  uint64_t dropped_messages_ = 0, dropped_bytes_ = 0;

  std::string out_;
  std::string waiting_;  // encoded messages held until the peer's READY
  std::vector<std::string> topics_;
};

}  // namespace execd::protocol::zmtp
