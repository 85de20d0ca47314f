// core/copy_choice.hpp: single copy or the copy path for large messages,
// learned by epochs from simulated streams.
#include <criterion/criterion.h>

#include <string>

#include "core/copy_choice.hpp"

using pm::CopyChoice;

namespace {
// A stream of n messages of len bytes, one after the other, each taking
// single_ns / copy_ns by its path; returns how many went by single copy.
int run(CopyChoice& c, uint64_t* clock, size_t len, uint64_t single_ns, uint64_t copy_ns, int n) {
  int singles = 0;
  for (int i = 0; i < n; i++) {
    bool s = c.prefer_single(len, *clock);
    singles += s;
    *clock += s ? single_ns : copy_ns;
    c.note(s, len, *clock);
  }
  return singles;
}

// Both paths were measured at these rates (describe()'s GB/s, one decimal).
void assert_rates(const CopyChoice& c, const char* single, const char* copy) {
  std::string d = c.describe();
  cr_assert(d.find(std::string("single ") + single + " GB/s") != std::string::npos &&
                d.find(std::string("copy ") + copy + " GB/s") != std::string::npos,
            "expected single %s, copy %s GB/s: %s", single, copy, d.c_str());
}
}  // namespace

Test(copy_choice, small_messages_take_single_copy) {
  CopyChoice c;
  for (int i = 0; i < 100; i++) cr_assert(c.prefer_single(CopyChoice::kMinBytes - 1, uint64_t(i)));
  cr_assert_eq(c.singles() + c.copies(), 0u, "small messages are not counted");
}

Test(copy_choice, the_faster_path_wins_after_the_warm_up) {
  CopyChoice c;
  uint64_t t = 0;
  run(c, &t, 1 << 20, 2000000, 1000000, 200);  // warm-up: epochs of >= 8 messages and 1 ms
  int singles = run(c, &t, 1 << 20, 2000000, 1000000, 1600);
  // One epoch in 16 explores single copy: about 1/16 of the messages.
  cr_assert(singles > 0 && singles < 1600 / 8, "%d of 1600 by single copy", singles);
}

Test(copy_choice, single_copy_kept_when_faster) {
  CopyChoice c;
  uint64_t t = 0;
  run(c, &t, 4 << 20, 1000000, 3000000, 200);
  int singles = run(c, &t, 4 << 20, 1000000, 3000000, 1600);
  cr_assert(singles > 1600 * 7 / 8 && singles < 1600, "%d of 1600 by single copy", singles);
  assert_rates(c, "4.2", "1.4");
}

Test(copy_choice, size_classes_learn_separately) {
  CopyChoice c;
  uint64_t t = 0;
  // One phase each (interleaved sizes share their epochs' wall time: see
  // the header).
  run(c, &t, 64 << 10, 10000, 400000, 3000);
  run(c, &t, 8 << 20, 4000000, 1000000, 300);
  int small = run(c, &t, 64 << 10, 10000, 400000, 160);
  cr_assert(small > 140, "64 KiB (single copy faster): %d of 160 by single copy", small);
  int large = 0;
  for (int i = 0; i < 160; i++) large += run(c, &t, 8 << 20, 4000000, 1000000, 1);
  cr_assert(large < 20, "8 MiB (copy path faster): %d of 160 by single copy", large);
}

Test(copy_choice, a_change_of_speed_is_followed) {
  CopyChoice c;
  uint64_t t = 0;
  run(c, &t, 2 << 20, 1000000, 4000000, 400);   // single copy wins
  run(c, &t, 2 << 20, 8000000, 4000000, 2000);  // now it is twice as slow as the copy path
  int late = run(c, &t, 2 << 20, 8000000, 4000000, 800);
  cr_assert(late < 800 / 4, "after the change, %d of 800 still by single copy", late);
}

Test(copy_choice, idle_time_is_not_counted) {
  CopyChoice c;
  uint64_t t = 0;
  // Each message: 50 ms of the application computing, then the transfer
  // (single copy 1 ms, copy path 2 ms). Idle time counted would make the
  // paths look alike and explorations would pick at random.
  int singles = 0;
  for (int i = 0; i < 400; i++) {
    t += 50000000;
    bool s = c.prefer_single(1 << 20, t);
    singles += s;
    t += s ? 1000000 : 2000000;
    c.note(s, 1 << 20, t);
  }
  cr_assert(singles > 400 * 3 / 4, "%d of 400 by single copy", singles);
  assert_rates(c, "1.0", "0.5");
}

namespace {
// Windows of w messages decided at once, as ft_bw and MPI windows post
// them: single copy is done inline when decided (single_ns each); the copy
// path's transfers are interleaved, so all of them complete together at
// the end (copy_ns each). Returns how many went by single copy.
int windows(CopyChoice& c, uint64_t* clock, size_t len, uint64_t single_ns, uint64_t copy_ns, int n, int w) {
  int singles = 0;
  for (int k = 0; k < n; k++) {
    int copies = 0;
    for (int i = 0; i < w; i++) {
      bool s = c.prefer_single(len, *clock);
      if (s) {
        singles++;
        *clock += single_ns;
        c.note(true, len, *clock);
      } else {
        copies++;
      }
    }
    *clock += copies * copy_ns;
    for (int i = 0; i < copies; i++) c.note(false, len, *clock);
    *clock += 100000;  // the window's acknowledgement
  }
  return singles;
}
}  // namespace

Test(copy_choice, windows_decided_at_once_single_copy_faster) {
  CopyChoice c;
  uint64_t t = 0;
  windows(c, &t, 1 << 20, 330000, 480000, 20, 64);
  int singles = windows(c, &t, 1 << 20, 330000, 480000, 100, 64);
  // Exploring costs about a 17th of the time (the copy path is 1.45x slower).
  cr_assert(singles > 6400 * 15 / 16 && singles < 6400, "%d of 6400 by single copy", singles);
  // Each path at its rate (the copy path's window timed to its last completion).
  assert_rates(c, "3.2", "2.2");
}

// Messages so fast that kEpochMax of them take less than kEpochNs: the
// epoch ends at kEpochMax (it would otherwise never end, and the class keep
// its first path).
Test(copy_choice, fast_messages_end_their_epochs_at_the_cap) {
  CopyChoice c;
  uint64_t t = 0;
  run(c, &t, 64 << 10, 2000, 1000, 20000);
  int singles = run(c, &t, 64 << 10, 2000, 1000, 20000);
  cr_assert(singles < 20000 / 8, "%d of 20000 by single copy", singles);
}

// A message asked about whose end is never reported (a path that lost it):
// while messages go on, the class still ends its epochs and learns.
Test(copy_choice, a_message_never_reported_does_not_wedge_the_class) {
  CopyChoice c;
  uint64_t t = 0;
  c.prefer_single(1 << 20, t);  // never noted
  run(c, &t, 1 << 20, 2000000, 1000000, 3000);
  int singles = run(c, &t, 1 << 20, 2000000, 1000000, 1600);
  cr_assert(singles < 1600 / 4, "%d of 1600 by single copy", singles);
}

Test(copy_choice, windows_decided_at_once_copy_path_faster) {
  CopyChoice c;
  uint64_t t = 0;
  windows(c, &t, 1 << 20, 600000, 300000, 20, 64);
  int singles = windows(c, &t, 1 << 20, 600000, 300000, 100, 64);
  cr_assert(singles < 6400 / 16, "%d of 6400 by single copy", singles);
}

Test(copy_choice, a_stalled_epoch_gives_no_sample) {
  CopyChoice c;
  uint64_t t = 0;
  // Each path's first epoch is not counted (cold buffers).
  for (bool single : {true, false}) {
    for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) {
      cr_assert_eq(c.prefer_single(1 << 20, t), single);
      t += 200000;
      c.note(single, 1 << 20, t);
    }
  }
  std::string cold = c.describe();
  cr_assert_str_empty(cold.c_str());
  cr_assert(c.prefer_single(1 << 20, t));
  c.prefer_single(1 << 20, t);  // never completed (it failed)
  t += 200000;
  c.note(true, 1 << 20, t);
  t += 2 * CopyChoice::kStallNs;
  for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) {
    cr_assert(c.prefer_single(1 << 20, t));
    t += 200000;
    c.note(true, 1 << 20, t);
  }
  // The stalled epoch was dropped: one sample, from the new epoch, at its
  // real rate (1 MiB per 200 us), not over the 2 s of the stall.
  std::string d = c.describe();
  cr_assert_str_eq(d.c_str(), "1M-4M: single 5.2 GB/s (1), copy 0.0 GB/s (0)");
}

// The copy path at a third of single copy's speed (the shared single copy
// against the bounce pipeline): exploring it costs a share of the time, not
// one message in 17, which at that gap was 3/19 of the time.
Test(copy_choice, exploring_costs_a_share_of_the_time) {
  CopyChoice c;
  uint64_t t = 0;
  windows(c, &t, 1 << 20, 200000, 600000, 20, 64);
  uint64_t start = t;
  int singles = windows(c, &t, 1 << 20, 200000, 600000, 400, 64);
  int copies = 400 * 64 - singles;
  double copy_share = double(copies) * 600000 / double(t - start);
  // About 1/17 (0.059): above 0.09 is one message in 17 (0.154 at this
  // gap), below 0.035 an interval scaled by more than the gap.
  cr_assert(copy_share > 0.035 && copy_share < 0.09, "exploring took %.3f of the time (%d of %d messages)",
            copy_share, copies, 400 * 64);
}

// A gap wider than kExploreScale (40x) scales the interval by 8, not 40:
// the slower path is still explored within 16 * 8 of its epochs' messages.
Test(copy_choice, a_wide_gap_is_still_explored) {
  CopyChoice c;
  uint64_t t = 0;
  windows(c, &t, 1 << 20, 100000, 4000000, 60, 64);  // decided, explored at the plain interval, scaled
  int singles = windows(c, &t, 1 << 20, 100000, 4000000, 200, 64);
  int copies = 200 * 64 - singles;
  cr_assert(copies > 0 && copies < 200 * 64 / 40, "%d of %d messages by the copy path", copies, 200 * 64);
}

// One outlier epoch that decides a class on its own (here the copy path's
// first sample 12x its real time, which is 1.5x faster than single copy) is
// measured again at the plain interval, not 8x later.
Test(copy_choice, an_outlier_that_decided_is_measured_again_soon) {
  CopyChoice c;
  uint64_t t = 0;
  run(c, &t, 1 << 20, 1500000, 1000000, 16);   // the cold epochs
  run(c, &t, 1 << 20, 1500000, 1000000, 8);    // single copy's first sample
  run(c, &t, 1 << 20, 1500000, 12000000, 8);   // the copy path's, inflated
  int singles = run(c, &t, 1 << 20, 1500000, 1000000, 1200);
  int late = run(c, &t, 1 << 20, 1500000, 1000000, 400);
  cr_assert(singles < 1200, "the copy path was not measured again (%d of 1200 by single copy)", singles);
  cr_assert(late < 400 / 4, "still %d of 400 by single copy", late);
}

// A clear gap (at least kClearGap) is decided after one counted epoch of
// each path; a narrow one after kWarm of each.
Test(copy_choice, a_clear_gap_is_decided_after_one_epoch_each) {
  for (uint64_t copy_ns : {3000000u, 1500000u}) {
    CopyChoice c;
    uint64_t t = 0;
    int singles = run(c, &t, 1 << 20, 1000000, copy_ns, 120);  // before the first exploration
    uint32_t epochs = copy_ns >= 2000000 ? 2 : 1 + CopyChoice::kWarm;  // the cold one, then the counted
    cr_assert_eq(120 - singles, int(epochs * CopyChoice::kEpochMsgs), "copy %lu ns: %d of 120 by the copy path",
                 (unsigned long)copy_ns, 120 - singles);
  }
}

// Windows of 64 decided at once, the copy path three times slower. Single
// copy completes when decided, so its epochs end after kEpochMsgs; the copy
// path's cold epoch takes kEpochMsgs of the first window (the rest goes by
// single copy), its counted one the rest of the second window, and then
// single copy is chosen: 64 by the copy path (168 before cold epochs were
// capped and a clear gap decided after one epoch each).
Test(copy_choice, a_cold_epoch_takes_few_messages_of_a_window) {
  CopyChoice c;
  uint64_t t = 0;
  int singles = windows(c, &t, 1 << 20, 200000, 600000, 6, 64);
  int copies = 6 * 64 - singles;
  cr_assert_eq(copies, int(CopyChoice::kEpochMsgs) + (64 - int(CopyChoice::kEpochMsgs)),
               "%d of %d by the copy path", copies, 6 * 64);
}

// Single copies decided past the copy path's cold epoch that end during the
// next epoch (shared copies end when the sender has written its part) are
// not counted in it: that epoch's sample is its own messages' time.
Test(copy_choice, single_copies_past_a_cold_epoch_are_not_counted_later) {
  CopyChoice c;
  uint64_t t = 0;
  const size_t len = 1 << 20;
  for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) {  // single copy's cold epoch
    cr_assert(c.prefer_single(len, t));
    t += 1000000;
    c.note(true, len, t);
  }
  for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) cr_assert_not(c.prefer_single(len, t));  // the copy path's
  for (int i = 0; i < 4; i++) cr_assert(c.prefer_single(len, t), "past the cold epoch: single copy");
  t += 4000000;
  for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) c.note(false, len, t);  // it ends; the 4 are under way
  for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) cr_assert(c.prefer_single(len, t));  // a counted epoch
  for (int i = 0; i < 4; i++) c.note(true, len, t + 1000 * uint64_t(i + 1));  // the 4 end at once
  for (uint32_t i = 0; i < CopyChoice::kEpochMsgs; i++) c.note(true, len, t + 1000000 * uint64_t(i + 1));
  // 8 MiB in 8 ms: 1.0 GB/s (counting the 4 would give 2.1).
  std::string d = c.describe();
  cr_assert_str_eq(d.c_str(), "1M-4M: single 1.0 GB/s (1), copy 0.0 GB/s (0)");
}

// Small messages: a cold epoch takes kColdBytes of them (64 of 64 KiB, a
// whole window here), so the pipeline's chunks and pages are all touched
// before its first counted epoch; 8 would leave most of them cold and the
// copy path measured slower than it is.
Test(copy_choice, a_cold_epoch_carries_enough_bytes) {
  CopyChoice c;
  uint64_t t = 0;
  int singles = windows(c, &t, 64 << 10, 20000, 7000, 2, 64);
  cr_assert_eq(singles, 64, "%d of 128 by single copy in the two cold windows", singles);
}
