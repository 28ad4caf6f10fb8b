// fs/error.h — the error and result types shared by every fs/ operation.
// How a kind becomes an HTTP answer is decided by the handlers (execd/api/file_jobs).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace execd::fs {

// What went wrong, at the granularity a handler needs to pick a response.
enum class ErrorKind {
  not_found,    // missing path (ENOENT)
  bad_request,  // the request itself is wrong (bad path, mode, owner, ...)
  forbidden,    // EACCES / EPERM / EROFS
  no_space,     // ENOSPC / EDQUOT
  conflict,     // exists already, is a directory, ...
  too_large,    // past a limit execd sets (archive entries or bytes)
  internal,     // anything else
};

struct Error {
  ErrorKind kind = ErrorKind::internal;
  std::string message;
};

// Maps an errno to a kind; `what` is prefixed to the errno text, e.g.
// errno_error(ENOENT, "lstat /x") -> {not_found, "lstat /x: No such file or directory"}.
Error errno_error(int errno_value, std::string_view what);
ErrorKind kind_for_errno(int errno_value);
// Thread-safe strerror.
std::string errno_text(int errno_value);

// Either a value or an Error. (std::expected is C++23.)
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

// Success or an Error, for operations without a value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}
  static Status success() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  // On success returns an empty internal error rather than invoking UB.
  const Error& error() const {
    static const Error kNoError{};
    return error_ ? *error_ : kNoError;
  }

 private:
  std::optional<Error> error_;
};

}  // namespace execd::fs
