// Scatter/gather helpers over iovec arrays.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstring>

namespace pm {

inline size_t iov_total(const struct iovec* iov, size_t cnt) {
  size_t n = 0;
  for (size_t i = 0; i < cnt; i++) n += iov[i].iov_len;
  return n;
}

// Copies up to len bytes from src into the iov array starting at offset;
// returns the bytes copied (short when the array ends first).
inline size_t iov_copy_to(const struct iovec* iov, size_t cnt, size_t offset, const void* src,
                          size_t len) {
  const char* s = static_cast<const char*>(src);
  size_t done = 0;
  for (size_t i = 0; i < cnt && done < len; i++) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    size_t n = iov[i].iov_len - offset;
    if (n > len - done) n = len - done;
    memcpy(static_cast<char*>(iov[i].iov_base) + offset, s + done, n);
    done += n;
    offset = 0;
  }
  return done;
}

// Copies up to len bytes out of the iov array starting at offset.
inline size_t iov_copy_from(const struct iovec* iov, size_t cnt, size_t offset, void* dst,
                            size_t len) {
  char* d = static_cast<char*>(dst);
  size_t done = 0;
  for (size_t i = 0; i < cnt && done < len; i++) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    size_t n = iov[i].iov_len - offset;
    if (n > len - done) n = len - done;
    memcpy(d + done, static_cast<const char*>(iov[i].iov_base) + offset, n);
    done += n;
    offset = 0;
  }
  return done;
}

// The address of byte `offset` of the iov array, and in *avail how many
// bytes follow it in its entry (itself included); nullptr past the end.
inline const void* iov_at(const struct iovec* iov, size_t cnt, size_t offset, size_t* avail) {
  for (size_t i = 0; i < cnt; i++) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    *avail = iov[i].iov_len - offset;
    return static_cast<const char*>(iov[i].iov_base) + offset;
  }
  return nullptr;
}

// Where [offset, offset+len) of the iov array lies within one entry: its
// address; nullptr when it spans entries or passes the end.
inline const void* iov_contiguous(const struct iovec* iov, size_t cnt, size_t offset, size_t len) {
  size_t avail = 0;
  const void* p = iov_at(iov, cnt, offset, &avail);
  return p && len <= avail ? p : nullptr;
}

// Writes into `out` the sub-range [offset, offset+len) of iov; returns the
// number of entries used (at most max_out).
inline size_t iov_slice(const struct iovec* iov, size_t cnt, size_t offset, size_t len,
                        struct iovec* out, size_t max_out) {
  size_t k = 0;
  for (size_t i = 0; i < cnt && len > 0 && k < max_out; i++) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    size_t n = iov[i].iov_len - offset;
    if (n > len) n = len;
    out[k].iov_base = static_cast<char*>(iov[i].iov_base) + offset;
    out[k].iov_len = n;
    k++;
    len -= n;
    offset = 0;
  }
  return k;
}

} // namespace pm
