/* Force-included into every source of the core and the providers
 * (util/CMakeLists.txt). libfabric gives fi_dupinfo and fi_freeinfo a new
 * symbol version with each fi_info ABI (FABRIC_1.9 in 2.5 and later), and a
 * DSO linked against newer headers references that version: older cores then
 * fail its dlopen, silently in 1.17. Bound to FABRIC_1.3 (exported by every
 * libfabric since 1.3; in newer ones it returns the current layout, of which
 * the code uses only the 1.3 part), the DSO loads everywhere and fi_prov_ini
 * says why it refuses a core older than its headers (abi/api_version.cpp). */
#ifndef PM_ABI_SYMVER_H
#define PM_ABI_SYMVER_H
__asm__(".symver fi_dupinfo,fi_dupinfo@FABRIC_1.3");
__asm__(".symver fi_freeinfo,fi_freeinfo@FABRIC_1.3");
#endif
