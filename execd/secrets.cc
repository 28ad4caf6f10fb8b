// execd/secrets: see header.
#include "execd/secrets.h"

#include <unistd.h>  // environ (_GNU_SOURCE)

#include <cstdlib>
#include <cstring>

#include "execd/config_flags.h"

namespace execd {

namespace {

using config_flags::Flag;
using config_flags::Secrecy;

void blank(char* p) {
  for (; *p; ++p) *p = 'x';
}

bool starts_with_variable(const char* kv, const std::string& name) {
  return strncmp(kv, name.c_str(), name.size()) == 0 && kv[name.size()] == '=';
}

}  // namespace

std::vector<std::string> hide_secrets(int argc, char** argv) {
  std::vector<const Flag*> secret;
  for (const auto& group : config_flags::flag_table())
    for (const Flag& f : group.flags)
      if (f.secrecy != Secrecy::none && !f.env.empty()) secret.push_back(&f);

  // -name=VALUE, --name=VALUE, or the argument after -name / --name.
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* name = a[0] == '-' ? (a[1] == '-' ? a + 2 : a + 1) : nullptr;
    for (const Flag* f : secret) {
      if (!name || f->secrecy != Secrecy::token || strncmp(name, f->name.c_str(), f->name.size()) != 0) continue;
      char* after = argv[i] + (name - a) + f->name.size();
      if (*after == '=') blank(after + 1);
      else if (*after == '\0' && i + 1 < argc) blank(argv[i + 1]);
    }
  }
  for (char** e = environ; *e; ++e)
    for (const Flag* f : secret)
      if (f->secrecy == Secrecy::token && starts_with_variable(*e, f->env)) blank(*e + f->env.size() + 1);
  // A token file's path is no secret itself, but would lead a command to the token.
  for (const Flag* f : secret) unsetenv(f->env.c_str());

  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace execd
