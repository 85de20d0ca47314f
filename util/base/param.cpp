#include "base/param.hpp"

#include <cstdlib>
#include <cstring>

#include <rdma/providers/fi_prov.h>

#include "base/log.hpp"

namespace pm {

Params g_params;

static fi_param_type to_fi(ParamSpec::Type t) {
  switch (t) {
  case ParamSpec::Type::kInt: return FI_PARAM_INT;
  case ParamSpec::Type::kSize: return FI_PARAM_SIZE_T;
  case ParamSpec::Type::kBool: return FI_PARAM_BOOL;
  case ParamSpec::Type::kString: return FI_PARAM_STRING;
  }
  return FI_PARAM_STRING;
}

void Params::define(const fi_provider* prov, const ParamSpec* specs, size_t n) {
  prov_ = prov;
  for (size_t i = 0; i < n; i++) {
    specs_.push_back(&specs[i]);
    std::string help = std::string(specs[i].help) + " (default: " + specs[i].dflt + ")";
    // libfabric formats the help text into its own copy.
    fi_param_define(prov, specs[i].name, to_fi(specs[i].type), "%s", help.c_str());
  }
}

const ParamSpec* Params::find(const char* name) const {
  for (const ParamSpec* s : specs_)
    if (strcmp(s->name, name) == 0) return s;
  return nullptr;
}

long long Params::get_int(const char* name) const {
  const ParamSpec* s = find(name);
  int v = 0;
  if (s && prov_ && fi_param_get_int(const_cast<fi_provider*>(prov_), name, &v) == FI_SUCCESS) return v;
  return s ? strtoll(s->dflt, nullptr, 0) : 0;
}

size_t Params::get_size(const char* name) const {
  const ParamSpec* s = find(name);
  size_t v = 0;
  if (s && prov_ && fi_param_get_size_t(const_cast<fi_provider*>(prov_), name, &v) == FI_SUCCESS) return v;
  return s ? strtoull(s->dflt, nullptr, 0) : 0;
}

bool Params::get_bool(const char* name) const {
  const ParamSpec* s = find(name);
  int v = 0;
  if (s && prov_ && fi_param_get_bool(const_cast<fi_provider*>(prov_), name, &v) == FI_SUCCESS) return v != 0;
  return s ? (strcmp(s->dflt, "1") == 0 || strcmp(s->dflt, "true") == 0) : false;
}

std::string Params::get_string(const char* name) const {
  const ParamSpec* s = find(name);
  char* v = nullptr;
  // Set but empty counts as unset (FI_PMSHM_DIR= must not mean "/").
  if (s && prov_ && fi_param_get_str(const_cast<fi_provider*>(prov_), name, &v) == FI_SUCCESS && v && *v)
    return v;
  return s ? s->dflt : "";
}

} // namespace pm
