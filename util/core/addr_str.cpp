#include "core/addr_str.hpp"

#include <cstring>

#include "core/provider.hpp"

namespace pm {

namespace {
std::string prefix() { return std::string("fi_") + g_provdef->name() + "://"; }

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is not the canonical form: refused, one spelling per name
}
}  // namespace

std::string name_to_uri(const void* name, size_t len) {
  static const char kHex[] = "0123456789abcdef";
  std::string s = prefix();
  const unsigned char* p = static_cast<const unsigned char*>(name);
  for (size_t i = 0; i < len; i++) {
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

size_t uri_size() { return prefix().size() + 2 * g_provdef->name_len() + 1; }

bool looks_like_uri(const char* s, size_t max) {
  std::string p = prefix();
  return s && max >= p.size() && strncmp(s, p.c_str(), p.size()) == 0;
}

bool uri_to_name(const char* s, size_t max, std::string* name, std::string* why, bool check_name) {
  std::string p = prefix();
  size_t want = uri_size() - 1;
  if (!looks_like_uri(s, max)) {
    *why = "not an address of the form " + p + "<hex>";
    return false;
  }
  size_t n = strnlen(s, std::min(max, want + 1));
  if (n != want) {
    *why = "string address of " + std::to_string(n) + " characters, want " + std::to_string(want);
    return false;
  }
  std::string out(g_provdef->name_len(), '\0');
  for (size_t i = 0; i < out.size(); i++) {
    int hi = hexval(s[p.size() + 2 * i]), lo = hexval(s[p.size() + 2 * i + 1]);
    if (hi < 0 || lo < 0) {
      *why = "string address with a character that is not a lowercase hex digit";
      return false;
    }
    out[i] = char(hi << 4 | lo);
  }
  if (check_name && !g_provdef->name_valid(out.data(), out.size())) {
    *why = "string address that does not decode to a valid " + std::string(g_provdef->name()) + " name";
    return false;
  }
  *name = std::move(out);
  return true;
}

}  // namespace pm
