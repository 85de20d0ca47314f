// FI_ADDR_STR names (fi_getinfo(3): address_format://...): what a provider's
// binary endpoint name becomes when the application asks for string
// addresses (hints->addr_format = FI_ADDR_STR). The form is
//   fi_<provider>://<the binary name, two lowercase hex digits per byte>
// (for pmeth 11 + 128 characters, for pmshm 11 + 2 * its name length), one
// fixed length per provider, NUL-terminated: fi_getname, fi_av_lookup,
// fi_av_straddr, fi_info's src_addr/dest_addr and FI_SOURCE_ERR's err_data
// give it; fi_av_insert, fi_av_insertsvc (as node, service NULL), fi_getinfo
// (as node, service NULL, or in the hints' src_addr/dest_addr) take it.
// Parsing is strict (exact prefix and length, hex digits only, then the
// provider's own check of the name): a string comes from another process.
#pragma once

#include <cstddef>
#include <string>

namespace pm {

// The string form of a binary name of this provider.
std::string name_to_uri(const void* name, size_t len);
// Length of every string name of this provider, NUL included.
size_t uri_size();
// Whether s (at most `max` bytes read) starts like a string name of this provider.
bool looks_like_uri(const char* s, size_t max);
// The binary name of a string name; false with *why when it is not one.
// A src_addr (check_name false) need not be a peer's valid name (the
// provider's own src_addr checks apply to it), only the string form.
bool uri_to_name(const char* s, size_t max, std::string* name, std::string* why, bool check_name = true);

}  // namespace pm
