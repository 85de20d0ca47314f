// base/list.hpp: IntrusiveList order, removal and hook state.
#include <criterion/criterion.h>

#include <vector>

#include "base/list.hpp"

namespace {

struct Item {
  int v = 0;
  pm::ListHook hook;
};
using List = pm::IntrusiveList<Item, &Item::hook>;

// The list's contents front to back, walking with next().
std::vector<int> values(const List& l) {
  std::vector<int> out;
  for (Item* it = l.front(); it; it = l.next(it)) out.push_back(it->v);
  return out;
}

void expect_values(const List& l, std::vector<int> want) {
  std::vector<int> got = values(l);
  cr_assert_eq(got.size(), want.size(), "list has %zu items, want %zu", got.size(), want.size());
  cr_assert_eq(l.size(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    cr_assert_eq(got[i], want[i], "item %zu is %d, want %d", i, got[i], want[i]);
  cr_assert_eq(l.empty(), want.empty());
}

}  // namespace

Test(list, empty_list) {
  List l;
  cr_assert(l.empty());
  cr_assert_eq(l.size(), 0u);
  cr_assert_null(l.front());
  cr_assert_null(l.pop_front());
  cr_assert_null(l.remove_first([](Item*) { return true; }));
}

Test(list, push_back_keeps_fifo_order_and_pop_front_drains_it) {
  Item it[5];
  List l;
  for (int i = 0; i < 5; i++) {
    it[i].v = i;
    cr_assert_not(it[i].hook.linked());
    l.push_back(&it[i]);
    cr_assert(it[i].hook.linked());
  }
  expect_values(l, {0, 1, 2, 3, 4});
  cr_assert_eq(l.front(), &it[0]);
  cr_assert_null(l.next(&it[4]));
  for (int i = 0; i < 5; i++) {
    Item* p = l.pop_front();
    cr_assert_eq(p, &it[i], "pop %d returned item %d", i, p ? p->v : -1);
    cr_assert_not(p->hook.linked());
    cr_assert_eq(l.size(), size_t(4 - i));
  }
  cr_assert(l.empty());
  cr_assert_null(l.pop_front());
}

Test(list, remove_head_middle_and_tail) {
  Item it[5];
  List l;
  for (int i = 0; i < 5; i++) {
    it[i].v = i * 10;
    l.push_back(&it[i]);
  }
  l.remove(&it[2]);  // middle
  cr_assert_not(it[2].hook.linked());
  expect_values(l, {0, 10, 30, 40});
  cr_assert_eq(l.next(&it[1]), &it[3]);
  l.remove(&it[0]);  // head
  expect_values(l, {10, 30, 40});
  cr_assert_eq(l.front(), &it[1]);
  l.remove(&it[4]);  // tail
  expect_values(l, {10, 30});
  cr_assert_null(l.next(&it[3]));
  // A removed item can go back in, at the tail.
  l.push_back(&it[2]);
  l.push_back(&it[0]);
  expect_values(l, {10, 30, 20, 0});
  l.remove(&it[1]);
  l.remove(&it[3]);
  l.remove(&it[2]);
  l.remove(&it[0]);
  expect_values(l, {});
}

Test(list, remove_first_takes_the_earliest_match_only) {
  Item it[6];
  List l;
  const int vals[6] = {1, 4, 7, 4, 8, 4};
  for (int i = 0; i < 6; i++) {
    it[i].v = vals[i];
    l.push_back(&it[i]);
  }
  auto is4 = [](Item* x) { return x->v == 4; };
  cr_assert_eq(l.remove_first(is4), &it[1]);
  expect_values(l, {1, 7, 4, 8, 4});
  cr_assert_eq(l.remove_first(is4), &it[3]);
  expect_values(l, {1, 7, 8, 4});
  cr_assert_eq(l.remove_first(is4), &it[5]);
  expect_values(l, {1, 7, 8});
  cr_assert_null(l.remove_first(is4));
  expect_values(l, {1, 7, 8});
  // A predicate true for the head removes the head.
  cr_assert_eq(l.remove_first([](Item* x) { return x->v < 5; }), &it[0]);
  expect_values(l, {7, 8});
  // The predicate sees the items in order and stops at the first match.
  std::vector<int> seen;
  cr_assert_eq(l.remove_first([&](Item* x) {
    seen.push_back(x->v);
    return x->v == 8;
  }), &it[4]);
  cr_assert_eq(seen.size(), 2u);
  cr_assert_eq(seen[0], 7);
  cr_assert_eq(seen[1], 8);
  expect_values(l, {7});
}

Test(list, an_item_can_sit_in_two_lists_through_two_hooks) {
  struct Two {
    int v = 0;
    pm::ListHook a, b;
  };
  pm::IntrusiveList<Two, &Two::a> la;
  pm::IntrusiveList<Two, &Two::b> lb;
  Two t[3];
  for (int i = 0; i < 3; i++) {
    t[i].v = i;
    la.push_back(&t[i]);
  }
  lb.push_back(&t[2]);
  lb.push_back(&t[0]);
  la.remove(&t[0]);
  cr_assert_eq(la.size(), 2u);
  cr_assert_eq(la.front(), &t[1]);
  cr_assert_eq(lb.size(), 2u);
  cr_assert_eq(lb.front(), &t[2]);
  cr_assert_eq(lb.next(&t[2]), &t[0]);
  cr_assert(t[0].b.linked());
  cr_assert_not(t[0].a.linked());
}
