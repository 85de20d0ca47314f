// abi/api_version.hpp: the API version the providers report is the running
// libfabric's, capped at the newest version this tree is tested with.
#include <criterion/criterion.h>

#include <rdma/fabric.h>

#include "abi/api_version.hpp"

Test(api_version, follows_the_running_core) {
  cr_assert_eq(pm::api_version_for(FI_VERSION(1, 17)), FI_VERSION(1, 17));
  cr_assert_eq(pm::api_version_for(FI_VERSION(1, 22)), FI_VERSION(1, 22));
  cr_assert_eq(pm::api_version_for(FI_VERSION(2, 0)), FI_VERSION(2, 0));
  cr_assert_eq(pm::api_version_for(pm::kApiVersionMax), pm::kApiVersionMax);
}

Test(api_version, capped_at_the_tested_version) {
  cr_assert_eq(pm::kApiVersionMax, FI_VERSION(2, 6));
  cr_assert_eq(pm::api_version_for(FI_VERSION(2, 7)), pm::kApiVersionMax);
  cr_assert_eq(pm::api_version_for(FI_VERSION(3, 0)), pm::kApiVersionMax);
}

// With no provider registered (g_prov unset) it logs nothing and returns the
// version of the libfabric this test runs with (it links the one it was built
// against, so at least the headers' version).
Test(api_version, reports_the_linked_libfabric) {
  uint32_t v = pm::provider_api_version();
  cr_assert_eq(v, pm::api_version_for(fi_version()));
  cr_assert_geq(v, pm::kApiVersionBuilt);
}

// The 1.0-1.4 memory registration modes keep their ABI values whatever the
// headers say about them.
Test(api_version, deprecated_constants) {
  cr_assert_eq(pm::kMrUnspec, 0);
  cr_assert_eq(pm::kMrBasic, 1);
  cr_assert_eq(pm::kMrScalable, 2);
  cr_assert_eq(pm::kOrderNone, 0u);
}
