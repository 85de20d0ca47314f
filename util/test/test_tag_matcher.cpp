// core/tag_matcher.hpp: libfabric matching rules on the posted and
// unexpected queues.
#include <criterion/criterion.h>

#include "core/tag_matcher.hpp"

using pm::kNoPeer;
using pm::PeerId;
using pm::RecvOp;
using pm::TagMatcher;
using pm::Unexp;

namespace {

void set_recv(RecvOp& r, bool tagged, uint64_t tag, uint64_t ignore = 0, PeerId src = kNoPeer,
              void* ctx = nullptr) {
  r.tagged = tagged;
  r.tag = tag;
  r.ignore = ignore;
  r.src = src;
  r.context = ctx;
}

void set_unexp(Unexp& u, PeerId peer, bool tagged, uint64_t tag) {
  u.peer = peer;
  u.hdr.op = pm::kPktEager;
  u.hdr.flags = tagged ? pm::kPktTagged : 0;
  u.hdr.tag = tag;
}

}  // namespace

Test(tag_matcher, tag_match_respects_ignore_bits) {
  cr_assert(pm::tag_match(0x1234, 0, 0x1234));
  cr_assert_not(pm::tag_match(0x1234, 0, 0x1235));
  cr_assert(pm::tag_match(0x1200, 0xff, 0x12ab));
  cr_assert_not(pm::tag_match(0x1200, 0xff, 0x13ab));
  // Ignored bits may differ in the wanted tag too.
  cr_assert(pm::tag_match(0x12ff, 0xff, 0x1200));
  cr_assert(pm::tag_match(0, ~0ull, 0xdeadbeefcafef00dull));
  cr_assert(pm::tag_match(0x8000000000000000ull, 0, 0x8000000000000000ull));
  cr_assert_not(pm::tag_match(0x8000000000000000ull, 0x7fffffffffffffffull, 0));
}

Test(tag_matcher, posted_receives_match_in_fifo_order) {
  TagMatcher m;
  RecvOp r[3];
  for (int i = 0; i < 3; i++) {
    set_recv(r[i], true, 42);
    m.post(&r[i]);
  }
  cr_assert_eq(m.find_posted(1, true, 42), &r[0]);
  // find_posted does not remove: the same one again.
  cr_assert_eq(m.find_posted(1, true, 42), &r[0]);
  m.posted(true).remove(&r[0]);
  cr_assert_eq(m.find_posted(1, true, 42), &r[1]);
  m.posted(true).remove(&r[1]);
  cr_assert_eq(m.find_posted(1, true, 42), &r[2]);
  cr_assert_null(m.find_posted(1, true, 43));
  m.posted(true).remove(&r[2]);
  cr_assert_null(m.find_posted(1, true, 42));
}

Test(tag_matcher, posted_tag_and_ignore_pick_the_first_fitting_receive) {
  TagMatcher m;
  RecvOp exact, wide, other;
  set_recv(exact, true, 0x100);
  set_recv(wide, true, 0x100, 0xff);
  set_recv(other, true, 0x200);
  m.post(&exact);
  m.post(&wide);
  m.post(&other);
  cr_assert_eq(m.find_posted(0, true, 0x100), &exact);  // both fit, FIFO
  cr_assert_eq(m.find_posted(0, true, 0x1ff), &wide);   // only the ignore bits differ
  cr_assert_eq(m.find_posted(0, true, 0x200), &other);
  cr_assert_null(m.find_posted(0, true, 0x300));
  cr_assert_null(m.find_posted(0, true, 0x1100));
}

Test(tag_matcher, directed_receive_only_takes_its_source) {
  TagMatcher m;
  RecvOp from3, any;
  set_recv(from3, true, 7, 0, 3);
  set_recv(any, true, 7);
  m.post(&from3);
  m.post(&any);
  cr_assert_eq(m.find_posted(3, true, 7), &from3);
  cr_assert_eq(m.find_posted(4, true, 7), &any);
  cr_assert_eq(m.find_posted(0, true, 7), &any);

  // Posted the other way round, the wildcard comes first for everyone.
  TagMatcher m2;
  RecvOp any2, from3b;
  set_recv(any2, true, 7);
  set_recv(from3b, true, 7, 0, 3);
  m2.post(&any2);
  m2.post(&from3b);
  cr_assert_eq(m2.find_posted(3, true, 7), &any2);
  m2.posted(true).remove(&any2);
  cr_assert_eq(m2.find_posted(3, true, 7), &from3b);
  cr_assert_null(m2.find_posted(5, true, 7));
}

Test(tag_matcher, tagged_and_untagged_posted_queues_are_separate) {
  TagMatcher m;
  RecvOp msg, tagged;
  set_recv(msg, false, 0);
  set_recv(tagged, true, 9);
  m.post(&tagged);
  m.post(&msg);
  cr_assert_eq(m.posted(true).size(), 1u);
  cr_assert_eq(m.posted(false).size(), 1u);
  // An untagged message ignores tags altogether and never takes a tagged receive.
  cr_assert_eq(m.find_posted(1, false, 9), &msg);
  cr_assert_eq(m.find_posted(1, false, 12345), &msg);
  // A tagged message never takes an untagged receive.
  cr_assert_eq(m.find_posted(1, true, 9), &tagged);
  cr_assert_null(m.find_posted(1, true, 0));
  m.posted(false).remove(&msg);
  cr_assert_null(m.find_posted(1, false, 9));
  cr_assert_eq(m.find_posted(1, true, 9), &tagged);
}

Test(tag_matcher, untagged_directed_receive) {
  TagMatcher m;
  RecvOp from2;
  set_recv(from2, false, 0, 0, 2);
  m.post(&from2);
  cr_assert_null(m.find_posted(1, false, 0));
  cr_assert_eq(m.find_posted(2, false, 0), &from2);
}

Test(tag_matcher, unexpected_fifo_ignore_and_source) {
  TagMatcher m;
  Unexp u[4];
  set_unexp(u[0], 1, true, 0x10);
  set_unexp(u[1], 2, true, 0x11);
  set_unexp(u[2], 1, true, 0x11);
  set_unexp(u[3], 2, true, 0x10);
  for (auto& x : u) m.add_unexpected(&x);
  cr_assert_eq(m.unexpected(true).size(), 4u);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 0x10, 0), &u[0]);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 0x11, 0), &u[1]);
  cr_assert_eq(m.find_unexpected(1, true, 0x11, 0), &u[2]);
  cr_assert_eq(m.find_unexpected(2, true, 0x10, 0), &u[3]);
  cr_assert_null(m.find_unexpected(3, true, 0x10, 0));
  cr_assert_eq(m.find_unexpected(2, true, 0x10, 0x1), &u[1]);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 0, ~0ull), &u[0]);
  cr_assert_null(m.find_unexpected(kNoPeer, true, 0x12, 0));
  // Consuming the first one exposes the next in order.
  m.unexpected(true).remove(&u[0]);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 0x10, 0), &u[3]);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 0x10, 0x1), &u[1]);
}

Test(tag_matcher, unexpected_tagged_and_untagged_are_separate) {
  TagMatcher m;
  Unexp t, msg;
  set_unexp(t, 1, true, 5);
  set_unexp(msg, 1, false, 5);
  m.add_unexpected(&t);
  m.add_unexpected(&msg);
  cr_assert_eq(m.unexpected(true).size(), 1u);
  cr_assert_eq(m.unexpected(false).size(), 1u);
  cr_assert_eq(m.unexpected(true).front(), &t);
  cr_assert_eq(m.unexpected(false).front(), &msg);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 5, 0), &t);
  cr_assert_eq(m.find_unexpected(kNoPeer, false, 0, 0), &msg);  // tag ignored for messages
  cr_assert_eq(m.find_unexpected(1, false, 999, 0), &msg);
  m.unexpected(true).remove(&t);
  cr_assert_null(m.find_unexpected(kNoPeer, true, 5, 0));
  cr_assert_eq(m.find_unexpected(kNoPeer, false, 5, 0), &msg);
}

Test(tag_matcher, unexpected_skips_claimed_and_waiting) {
  TagMatcher m;
  Unexp claimed, waiting, free1;
  int claim_ctx = 0;
  RecvOp waiter;
  set_unexp(claimed, 1, true, 8);
  set_unexp(waiting, 1, true, 8);
  set_unexp(free1, 1, true, 8);
  claimed.claim_ctx = &claim_ctx;
  waiting.waiting = &waiter;
  m.add_unexpected(&claimed);
  m.add_unexpected(&waiting);
  m.add_unexpected(&free1);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 8, 0), &free1);
  cr_assert_eq(m.find_unexpected(1, true, 8, 0), &free1);
  m.unexpected(true).remove(&free1);
  cr_assert_null(m.find_unexpected(kNoPeer, true, 8, 0));
  // No longer waited for, the message is matchable again.
  waiting.waiting = nullptr;
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 8, 0), &waiting);

  // The same rules in the untagged space.
  Unexp mc, mf;
  set_unexp(mc, 2, false, 0);
  set_unexp(mf, 2, false, 0);
  mc.claim_ctx = &claim_ctx;
  m.add_unexpected(&mc);
  m.add_unexpected(&mf);
  cr_assert_eq(m.find_unexpected(2, false, 0, 0), &mf);
}

Test(tag_matcher, find_claimed_by_context_in_both_spaces) {
  TagMatcher m;
  int c1 = 0, c2 = 0, c3 = 0;
  Unexp a, b, c;
  set_unexp(a, 1, true, 1);
  set_unexp(b, 1, false, 0);
  set_unexp(c, 1, true, 2);
  b.claim_ctx = &c2;
  c.claim_ctx = &c1;
  m.add_unexpected(&a);
  m.add_unexpected(&b);
  m.add_unexpected(&c);
  cr_assert_eq(m.find_claimed(&c1), &c);
  cr_assert_eq(m.find_claimed(&c2), &b);
  cr_assert_null(m.find_claimed(&c3));
  // A claimed message is invisible to plain matching; the unclaimed ones are not.
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 2, 0), nullptr);
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 1, 0), &a);
  cr_assert_null(m.find_unexpected(kNoPeer, false, 0, 0));
  // Unclaimed again (as FI_CLAIM does), it matches normally.
  c.claim_ctx = nullptr;
  cr_assert_null(m.find_claimed(&c1));
  cr_assert_eq(m.find_unexpected(kNoPeer, true, 2, 0), &c);
}

Test(tag_matcher, find_context_in_both_posted_queues) {
  TagMatcher m;
  int c1 = 0, c2 = 0, c3 = 0, c4 = 0;
  RecvOp t1, t2, u1;
  set_recv(t1, true, 1, 0, kNoPeer, &c1);
  set_recv(t2, true, 2, 0, kNoPeer, &c2);
  set_recv(u1, false, 0, 0, kNoPeer, &c3);
  m.post(&t1);
  m.post(&u1);
  m.post(&t2);
  cr_assert_eq(m.find_context(&c1), &t1);
  cr_assert_eq(m.find_context(&c2), &t2);
  cr_assert_eq(m.find_context(&c3), &u1);
  cr_assert_null(m.find_context(&c4));
  m.posted(false).remove(&u1);
  cr_assert_null(m.find_context(&c3));
  // Two receives with the same context: the first posted one.
  RecvOp t3;
  set_recv(t3, true, 3, 0, kNoPeer, &c1);
  m.post(&t3);
  cr_assert_eq(m.find_context(&c1), &t1);
}

Test(tag_matcher, unexpected_complete_and_tagged_flags) {
  Unexp u;
  set_unexp(u, 1, true, 0);
  u.hdr.msg_len = 100;
  u.received = 99;
  cr_assert(u.tagged());
  cr_assert_not(u.complete());
  u.received = 100;
  cr_assert(u.complete());
  u.hdr.op = pm::kPktRts;  // a rendezvous request carries no eager data
  u.received = 0;
  cr_assert(u.complete());
  u.hdr.flags = pm::kPktCqData;
  cr_assert_not(u.tagged());
}
