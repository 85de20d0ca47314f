// core/copy_choice.hpp: single copy or the copy path for large messages,
// learned from simulated transfer times.
#include <criterion/criterion.h>

#include "core/copy_choice.hpp"

using pm::CopyChoice;

namespace {
// Runs n messages of len bytes whose paths take single_ns / copy_ns;
// returns how many went by single copy.
int run(CopyChoice& c, size_t len, uint64_t single_ns, uint64_t copy_ns, int n) {
  int singles = 0;
  for (int i = 0; i < n; i++) {
    bool s = c.prefer_single(len);
    singles += s;
    c.note(s, len, s ? single_ns : copy_ns);
  }
  return singles;
}
}  // namespace

Test(copy_choice, small_messages_take_single_copy) {
  CopyChoice c;
  for (int i = 0; i < 100; i++) cr_assert(c.prefer_single(CopyChoice::kMinBytes - 1));
  cr_assert_eq(c.singles() + c.copies(), 0u, "small messages are not measured");
}

Test(copy_choice, warm_up_alternates_then_takes_the_faster) {
  CopyChoice c;
  int first = run(c, 1 << 20, 200000, 100000, 2 * int(CopyChoice::kWarm));
  cr_assert_eq(first, int(CopyChoice::kWarm), "warm-up: %d single of %u", first, 2 * CopyChoice::kWarm);
  // Copy path twice as fast: all but the exploring messages take it.
  int singles = run(c, 1 << 20, 200000, 100000, 640);
  cr_assert(singles >= 9 && singles <= 11, "640 messages, %d by single copy (expected 10 explorations)", singles);
}

Test(copy_choice, single_copy_kept_when_faster) {
  CopyChoice c;
  run(c, 4 << 20, 300000, 900000, 6);
  int singles = run(c, 4 << 20, 300000, 900000, 640);
  cr_assert(singles >= 629, "%d of 640 by single copy", singles);
}

Test(copy_choice, size_classes_learn_separately) {
  CopyChoice c;
  // 64 KiB: single copy faster; 4 MiB: the copy path faster.
  for (int i = 0; i < 200; i++) {
    run(c, 64 << 10, 5000, 20000, 1);
    run(c, 8 << 20, 4000000, 1000000, 1);
  }
  cr_assert(c.prefer_single(64 << 10) || c.prefer_single(64 << 10), "64 KiB prefers single copy");
  int s = run(c, 8 << 20, 4000000, 1000000, 64);
  cr_assert(s <= 2, "8 MiB: %d of 64 by single copy", s);
}

Test(copy_choice, a_change_of_speed_is_followed) {
  CopyChoice c;
  run(c, 2 << 20, 100000, 400000, 200);  // single copy wins
  int s = run(c, 2 << 20, 800000, 400000, 64 * 20);  // now it is twice as slow as the copy path
  int late = run(c, 2 << 20, 800000, 400000, 640);
  cr_assert(late <= 11, "after the change, %d of 640 still by single copy (before: %d of %d)", late, s, 64 * 20);
}
