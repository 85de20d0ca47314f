// Which process is behind a region, and is it alive? Answers come from the
// kernel (flock state, /proc/locks, pidfds), never from the pid a region
// header or a queue cell claims: those are writable by any process of the
// user and only say where to look.
#pragma once

#include <cstdint>
#include <string>

namespace pm::shm {

// True while some process holds an exclusive flock on the file at `path`
// (a region's owner holds one for its whole life).
bool lock_held(const std::string& path) noexcept;

// The pid (in our pid namespace) of the process holding the exclusive
// flock on the file open as `fd`, from /proc/locks; 0 if there is none or
// it cannot be told.
int flock_owner_pid(int fd) noexcept;

// A pidfd for `pid` (-1 if the kernel has none); readable once it exits.
int open_pidfd(int pid) noexcept;
bool pidfd_alive(int pidfd) noexcept;

// Might the process that calls itself `pid` (its own view, as a queue cell
// or introduction stamps it) still be alive? True if a region of `uid` in
// `dir` names it as owner and is locked; false if such regions exist and all
// are unlocked; otherwise whether a process `pid` exists here. Errs on the
// side of "alive" (a live claimant must never be skipped).
bool claimant_alive(const std::string& dir, uint32_t uid, uint32_t pid) noexcept;

}  // namespace pm::shm
