// base/param.hpp: Params over libfabric's fi_param_define / fi_param_get,
// with a provider libfabric never loaded (a zeroed fi_provider with a name).
// Every Criterion test runs in its own process, so environment changes and
// libfabric's parameter table do not leak between tests.
#include <criterion/criterion.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <rdma/fabric.h>
#include <rdma/providers/fi_prov.h>

#include "base/param.hpp"

namespace {

using T = pm::ParamSpec::Type;
const pm::ParamSpec kSpecs[] = {
    {"spin_us", T::kInt, "microseconds to spin", "50"},
    {"neg", T::kInt, "a negative default", "-3"},
    {"hex_int", T::kInt, "a hexadecimal default", "0x20"},
    {"chunk_size", T::kSize, "bytes per chunk", "32768"},
    {"hex_size", T::kSize, "a hexadecimal size", "0x400"},
    {"stats", T::kBool, "print statistics", "0"},
    {"enabled", T::kBool, "on by default", "1"},
    {"word", T::kBool, "on by default, spelt out", "true"},
    {"dir", T::kString, "where regions live", "/dev/shm"},
};
constexpr size_t kNumSpecs = sizeof(kSpecs) / sizeof(kSpecs[0]);

fi_provider g_fake;
pm::Params g_p;

const char* const kEnv[] = {"FI_PMUTFAKE_SPIN_US",    "FI_PMUTFAKE_NEG",   "FI_PMUTFAKE_HEX_INT",
                            "FI_PMUTFAKE_CHUNK_SIZE", "FI_PMUTFAKE_HEX_SIZE", "FI_PMUTFAKE_STATS",
                            "FI_PMUTFAKE_ENABLED",    "FI_PMUTFAKE_WORD",  "FI_PMUTFAKE_DIR"};

// libfabric's parameter table exists only once it initialised.
void init_libfabric() {
  fi_info* info = nullptr;
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info);
  if (rc == 0) fi_freeinfo(info);
}

void setup() {
  for (const char* e : kEnv) unsetenv(e);
  for (const char* e : {"FI_PMUTFAKE_RX_SIZE", "FI_PMUTFAKE_VERBOSE", "FI_PMUTFAKE_NOPE"}) unsetenv(e);
  init_libfabric();
  memset(&g_fake, 0, sizeof g_fake);
  g_fake.name = "pmutfake";
  g_p.define(&g_fake, kSpecs, kNumSpecs);
}

// The help text and value libfabric lists for an environment variable.
bool listed(const char* env, fi_param_type* type, std::string* help, std::string* value) {
  fi_param* ps = nullptr;
  int n = 0;
  if (fi_getparams(&ps, &n) != 0) return false;
  bool found = false;
  for (int i = 0; i < n; i++) {
    if (!ps[i].name || strcmp(ps[i].name, env) != 0) continue;
    found = true;
    *type = ps[i].type;
    *help = ps[i].help_string ? ps[i].help_string : "";
    *value = ps[i].value ? ps[i].value : "";
  }
  fi_freeparams(ps);
  return found;
}

}  // namespace

TestSuite(params, .init = setup);

Test(params, defaults_when_the_environment_is_unset) {
  cr_assert_eq(g_p.get_int("spin_us"), 50);
  cr_assert_eq(g_p.get_int("neg"), -3);
  cr_assert_eq(g_p.get_int("hex_int"), 32);
  cr_assert_eq(g_p.get_size("chunk_size"), 32768u);
  cr_assert_eq(g_p.get_size("hex_size"), 1024u);
  cr_assert_eq(g_p.get_bool("stats"), false);
  cr_assert_eq(g_p.get_bool("enabled"), true);
  cr_assert_eq(g_p.get_bool("word"), true);
  std::string dir = g_p.get_string("dir");
  cr_assert_str_eq(dir.c_str(), "/dev/shm");
}

Test(params, define_registers_every_knob_with_its_default_in_the_help) {
  fi_param_type type;
  std::string help, value;
  cr_assert(listed("FI_PMUTFAKE_SPIN_US", &type, &help, &value), "FI_PMUTFAKE_SPIN_US not listed");
  cr_assert_eq(type, FI_PARAM_INT);
  // libfabric puts the provider name in front of the help text.
  cr_assert_str_eq(help.c_str(), "pmutfake: microseconds to spin (default: 50)");
  cr_assert(listed("FI_PMUTFAKE_CHUNK_SIZE", &type, &help, &value));
  cr_assert_eq(type, FI_PARAM_SIZE_T);
  cr_assert_str_eq(help.c_str(), "pmutfake: bytes per chunk (default: 32768)");
  cr_assert(listed("FI_PMUTFAKE_STATS", &type, &help, &value));
  cr_assert_eq(type, FI_PARAM_BOOL);
  cr_assert(listed("FI_PMUTFAKE_DIR", &type, &help, &value));
  cr_assert_eq(type, FI_PARAM_STRING);
  cr_assert_str_eq(help.c_str(), "pmutfake: where regions live (default: /dev/shm)");
  for (const char* e : kEnv) cr_assert(listed(e, &type, &help, &value), "%s not listed", e);
}

Test(params, int_from_the_environment) {
  setenv("FI_PMUTFAKE_SPIN_US", "123", 1);
  setenv("FI_PMUTFAKE_NEG", "-77", 1);
  cr_assert_eq(g_p.get_int("spin_us"), 123);
  cr_assert_eq(g_p.get_int("neg"), -77);
  cr_assert_eq(g_p.get_int("hex_int"), 32);  // untouched knobs keep their default
  setenv("FI_PMUTFAKE_SPIN_US", "0", 1);
  cr_assert_eq(g_p.get_int("spin_us"), 0);  // read at each call, not cached
  unsetenv("FI_PMUTFAKE_SPIN_US");
  cr_assert_eq(g_p.get_int("spin_us"), 50);
}

Test(params, size_from_the_environment) {
  setenv("FI_PMUTFAKE_CHUNK_SIZE", "1048576", 1);
  cr_assert_eq(g_p.get_size("chunk_size"), 1048576u);
  setenv("FI_PMUTFAKE_CHUNK_SIZE", "8589934592", 1);  // beyond 32 bits
  cr_assert_eq(g_p.get_size("chunk_size"), size_t(8589934592ull));
  cr_assert_eq(g_p.get_size("hex_size"), 1024u);
}

Test(params, bool_from_the_environment) {
  setenv("FI_PMUTFAKE_STATS", "1", 1);
  cr_assert_eq(g_p.get_bool("stats"), true);
  setenv("FI_PMUTFAKE_STATS", "yes", 1);
  cr_assert_eq(g_p.get_bool("stats"), true);
  setenv("FI_PMUTFAKE_STATS", "true", 1);
  cr_assert_eq(g_p.get_bool("stats"), true);
  setenv("FI_PMUTFAKE_ENABLED", "0", 1);
  cr_assert_eq(g_p.get_bool("enabled"), false);
  setenv("FI_PMUTFAKE_ENABLED", "no", 1);
  cr_assert_eq(g_p.get_bool("enabled"), false);
  setenv("FI_PMUTFAKE_WORD", "false", 1);
  cr_assert_eq(g_p.get_bool("word"), false);
}

Test(params, unparsable_bool_falls_back_to_the_default) {
  setenv("FI_PMUTFAKE_ENABLED", "maybe", 1);
  cr_assert_eq(g_p.get_bool("enabled"), true);
  setenv("FI_PMUTFAKE_STATS", "maybe", 1);
  cr_assert_eq(g_p.get_bool("stats"), false);
}

Test(params, string_from_the_environment) {
  setenv("FI_PMUTFAKE_DIR", "/tmp/pm-regions", 1);
  std::string dir = g_p.get_string("dir");
  cr_assert_str_eq(dir.c_str(), "/tmp/pm-regions");
  fi_param_type type;
  std::string help, value;
  cr_assert(listed("FI_PMUTFAKE_DIR", &type, &help, &value));
  cr_assert_str_eq(value.c_str(), "/tmp/pm-regions");
}

Test(params, unknown_knob_gives_zero_values) {
  setenv("FI_PMUTFAKE_NOPE", "9", 1);
  cr_assert_eq(g_p.get_int("nope"), 0);
  cr_assert_eq(g_p.get_size("nope"), 0u);
  cr_assert_eq(g_p.get_bool("nope"), false);
  std::string s = g_p.get_string("nope");
  cr_assert_str_eq(s.c_str(), "");
}

Test(params, knobs_are_per_provider) {
  // Another provider's variable of the same knob does not leak in.
  setenv("FI_OTHERPROV_SPIN_US", "999", 1);
  cr_assert_eq(g_p.get_int("spin_us"), 50);
  setenv("FI_PMUTFAKE_SPIN_US", "7", 1);
  cr_assert_eq(g_p.get_int("spin_us"), 7);
}

Test(params, a_second_table_adds_its_knobs) {
  // As the core's table and then the provider's are defined into one Params.
  static const pm::ParamSpec more[] = {
      {"rx_size", T::kSize, "posted receives", "1024"},
      {"verbose", T::kBool, "chatty", "1"},
  };
  g_p.define(&g_fake, more, 2);
  cr_assert_eq(g_p.get_size("rx_size"), 1024u);
  cr_assert_eq(g_p.get_bool("verbose"), true);
  cr_assert_eq(g_p.get_int("spin_us"), 50);  // the first table still answers
  setenv("FI_PMUTFAKE_RX_SIZE", "64", 1);
  setenv("FI_PMUTFAKE_VERBOSE", "0", 1);
  setenv("FI_PMUTFAKE_SPIN_US", "8", 1);
  cr_assert_eq(g_p.get_size("rx_size"), 64u);
  cr_assert_eq(g_p.get_bool("verbose"), false);
  cr_assert_eq(g_p.get_int("spin_us"), 8);
  fi_param_type type;
  std::string help, value;
  cr_assert(listed("FI_PMUTFAKE_RX_SIZE", &type, &help, &value));
  cr_assert_eq(type, FI_PARAM_SIZE_T);
}

// Before define (as before fi_prov_ini ran): defaults are not even known.
Test(params_undefined, lookups_before_define_give_zero_values) {
  pm::Params p;
  setenv("FI_PMUTFAKE_SPIN_US", "5", 1);
  cr_assert_eq(p.get_int("spin_us"), 0);
  cr_assert_eq(p.get_size("chunk_size"), 0u);
  cr_assert_eq(p.get_bool("enabled"), false);
  std::string s = p.get_string("dir");
  cr_assert_str_eq(s.c_str(), "");
}
