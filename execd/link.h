// execd/link: a two-ended reference between two objects with independent
// lifetimes (a command and the response that streams it, a PTY session and
// its WebSocket, a pool job and the exchange waiting for it). Each object
// holds a Link to the other; cutting either end, or destroying the object
// that holds it, clears both ends, so neither side can ever reach a freed
// peer. Loop thread only.
#pragma once

namespace execd {

template <class T>
class Link;

class LinkEnd {
 public:
  LinkEnd() = default;
  LinkEnd(const LinkEnd&) = delete;
  LinkEnd& operator=(const LinkEnd&) = delete;
  ~LinkEnd() { cut(); }

  void cut() {
    if (other_) {
      other_->target_ = nullptr;
      other_->other_ = nullptr;
    }
    target_ = nullptr;
    other_ = nullptr;
  }
  explicit operator bool() const { return other_ != nullptr; }

 protected:
  template <class A, class B>
  friend void link(A& a, Link<B>& a_end, B& b, Link<A>& b_end);
  void* target_ = nullptr;
  LinkEnd* other_ = nullptr;
};

template <class T>
class Link : public LinkEnd {
 public:
  T* get() const { return static_cast<T*>(target_); }
  T* operator->() const { return get(); }
};

// Ties `a` (whose end is `a_end`, pointing at b) to `b` (end `b_end`,
// pointing at a), cutting whatever either end held before.
template <class A, class B>
void link(A& a, Link<B>& a_end, B& b, Link<A>& b_end) {
  a_end.cut();
  b_end.cut();
  a_end.target_ = &b;
  a_end.other_ = &b_end;
  b_end.target_ = &a;
  b_end.other_ = &a_end;
}

}  // namespace execd
