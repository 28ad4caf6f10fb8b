// execd/http/awaiter: the link between an exchange and work that answers it
// later (a threadpool job, a read of a command's retained output). The
// Awaiter is the exchange's Source and does nothing but wait; the work holds
// the other end. Whichever goes first cuts the link: a client that leaves
// makes the work's answer go nowhere, and work that finishes after the
// exchange is gone finds an empty link instead of a freed exchange.
#pragma once

#include <memory>

#include "execd/http/exchange.h"
#include "execd/link.h"

namespace execd::http {

class Awaiter;

// Base of anything an Awaiter waits for.
class Awaitable {
 public:
  virtual ~Awaitable() = default;
  Link<Awaiter> awaiter;
  // The exchange still waiting for this work, or nullptr.
  Exchange* exchange() const;
  // The exchange went away first (the link is already cut): work that has
  // not started yet may withdraw itself, even free itself.
  virtual void client_gone() {}
};

class Awaiter final : public Source {
 public:
  explicit Awaiter(Exchange& ex) : ex_(ex) {}
  ~Awaiter() override {
    if (Awaitable* w = work.get()) {
      work.cut();
      w->client_gone();
    }
  }
  Exchange& exchange() { return ex_; }
  Link<Awaitable> work;

 private:
  Exchange& ex_;
};

// Makes `ex` wait for `work`.
inline void await(Exchange& ex, Awaitable& work) {
  auto waiter = std::make_unique<Awaiter>(ex);
  link(*waiter, waiter->work, work, work.awaiter);
  ex.attach(std::move(waiter));
}

inline Exchange* Awaitable::exchange() const {
  Awaiter* w = awaiter.get();
  return w ? &w->exchange() : nullptr;
}

}  // namespace execd::http
