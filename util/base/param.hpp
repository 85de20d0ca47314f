// Typed runtime parameters over fi_param_define / fi_param_get: one table
// per provider is the single source of names, defaults and help text, so
// `fi_info -e` lists every knob.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/providers/fi_prov.h>

namespace pm {

struct ParamSpec {
  enum class Type { kInt, kSize, kBool, kString };
  const char* name;   // lowercase, without the FI_<PROV>_ prefix
  Type type;
  const char* help;   // what it does, its unit and its default
  const char* dflt;   // default, as text
};

// Values read from the environment; lookups by name are start-up only.
class Params {
 public:
  // Registers every spec with libfabric; call from fi_prov_ini only. May be
  // called more than once (the core's table, then the provider's).
  void define(const fi_provider* prov, const ParamSpec* specs, size_t n);
  long long get_int(const char* name) const;
  size_t get_size(const char* name) const;
  bool get_bool(const char* name) const;
  std::string get_string(const char* name) const;

 private:
  const ParamSpec* find(const char* name) const;
  const fi_provider* prov_ = nullptr;
  std::vector<const ParamSpec*> specs_;
};

extern Params g_params;

} // namespace pm
