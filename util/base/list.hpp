// A minimal intrusive doubly linked list: O(1) push/remove, no allocation.
#pragma once

#include <cstddef>

namespace pm {

struct ListHook {
  ListHook* prev = nullptr;
  ListHook* next = nullptr;
  void* owner = nullptr;
  bool linked() const { return next != nullptr; }
};

template <class T, ListHook T::*Hook>
class IntrusiveList {
 public:
  IntrusiveList() { head_.prev = head_.next = &head_; }
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return head_.next == &head_; }
  size_t size() const { return size_; }

  void push_back(T* t) {
    ListHook* h = &(t->*Hook);
    h->owner = t;
    h->prev = head_.prev;
    h->next = &head_;
    head_.prev->next = h;
    head_.prev = h;
    size_++;
  }
  void remove(T* t) {
    ListHook* h = &(t->*Hook);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->prev = h->next = nullptr;
    size_--;
  }
  T* front() const { return empty() ? nullptr : from(head_.next); }
  T* pop_front() {
    T* t = front();
    if (t) remove(t);
    return t;
  }
  // Next element after t, or nullptr at the end.
  T* next(T* t) const {
    ListHook* h = (t->*Hook).next;
    return h == &head_ ? nullptr : from(h);
  }

  // Removes and returns the first element for which pred is true.
  template <class P>
  T* remove_first(P&& pred) {
    for (T* t = front(); t; t = next(t))
      if (pred(t)) {
        remove(t);
        return t;
      }
    return nullptr;
  }

 private:
  static T* from(ListHook* h) { return static_cast<T*>(h->owner); }
  ListHook head_;
  size_t size_ = 0;
};

} // namespace pm
