// execd/routes: the route table, the access-token gate, and dispatch from an
// HTTP request to the handler modules.
#pragma once

#include "execd/commands.h"
#include "execd/context.h"
#include "execd/server.h"

namespace execd {

class Routes {
 public:
  using Handler = std::function<void(Connection&, protocol::HttpRequest&, const protocol::RouteParams&,
                                     const protocol::QueryParams&)>;

  Routes(Context& ctx, CommandRegistry& commands);
  void dispatch(Connection& conn, protocol::HttpRequest& req);
  // Feature modules (files, terminals) register their routes here.
  void add(std::string method, std::string pattern, Handler h) {
    router_.add(std::move(method), std::move(pattern), std::move(h));
  }

 private:
  bool authorized(const protocol::HttpRequest& req) const;

  Context& ctx_;
  CommandRegistry& commands_;
  protocol::Router<Handler> router_;
};

}  // namespace execd
