// execd/files/download_headers: see header.
#include "execd/files/download_headers.h"

#include <cctype>
#include <cstdio>

namespace execd::files {

namespace {

bool is_attr_char(unsigned char c) {
  // RFC 8187 attr-char
  return isalnum(c) || std::string_view("!#$&+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

}  // namespace

std::string content_disposition(std::string_view name) {
  bool plain = !name.empty();
  for (unsigned char c : name)
    if (c < 0x20 || c >= 0x7f) plain = false;
  std::string out = "attachment; filename=\"";
  if (plain) {
    for (char c : name) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
    return out;
  }
  static const char* hex = "0123456789ABCDEF";
  std::string pct;
  for (unsigned char c : name) {
    if (is_attr_char(c)) {
      pct += static_cast<char>(c);
    } else {
      pct += '%';
      pct += hex[c >> 4];
      pct += hex[c & 15];
    }
  }
  out += pct;
  out += "\"; filename*=UTF-8''";
  out += pct;
  return out;
}

std::string http_date(time_t t) {
  struct tm tm {};
  gmtime_r(&t, &tm);
  static const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
           months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

}  // namespace execd::files
