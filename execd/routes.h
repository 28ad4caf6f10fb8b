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
    router_.add(std::move(method), std::move(pattern), Route{std::move(h), nullptr});
  }
  // A route whose body is streamed: `head` runs when the headers are complete
  // (after the token check) and typically calls conn.set_body_sink(); `h`
  // runs when the whole body has arrived.
  using HeadHandler = std::function<void(Connection&, protocol::HttpRequest&, const protocol::RouteParams&,
                                         const protocol::QueryParams&)>;
  void add_streaming(std::string method, std::string pattern, HeadHandler head, Handler h) {
    router_.add(std::move(method), std::move(pattern), Route{std::move(h), std::move(head)});
  }
  protocol::BodyMode head(Connection& conn, protocol::HttpRequest& req);

 private:
  bool authorized(const protocol::HttpRequest& req) const;

  struct Route {
    Handler handler;
    HeadHandler head;
  };
  Context& ctx_;
  CommandRegistry& commands_;
  protocol::Router<Route> router_;
};

}  // namespace execd
