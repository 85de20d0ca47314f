# Third-party consumers of the providers, built unmodified from the release
# tarballs in shared/thirdparty by scripts/thirdparty.sh into a cache
# directory (once; later runs reuse it): libfabric 2.6.0 and Sandia
# OpenSHMEM 1.5.3. The builds are ctest fixtures, so `ctest` builds them once
# per build tree, before the tests that need them.
set(PM_THIRDPARTY_DIR "" CACHE PATH
    "directory with the third-party tarballs (default: shared/thirdparty beside the checkout or one level above)")
set(PM_THIRDPARTY_CACHE "${CMAKE_BINARY_DIR}/thirdparty" CACHE PATH
    "where scripts/thirdparty.sh builds libfabric 2.6 and SOS (reused across runs)")
option(PM_SOS_ALL "register SOS's suite for both SOS builds and all three settings (else: the default build over pmeth)" OFF)

set(_tp ${PROJECT_SOURCE_DIR}/scripts/thirdparty.sh)
set(_tp_env "PM_THIRDPARTY_DIR=${PM_THIRDPARTY_DIR}")

# --- libfabric 2.6 -----------------------------------------------------------
set(PM_LF26_PREFIX ${PM_THIRDPARTY_CACHE}/libfabric-2.6.0/prefix)
set(PM_LF26_BUILD ${CMAKE_BINARY_DIR}/libfabric26)
set(_chk ${CMAKE_CURRENT_SOURCE_DIR}/check_libfabric26.sh)
# The builds run on one CPU (make -j1) in one ctest slot, beside other tests:
# their autogen.sh, configure and libtool steps are serial (SOS's test
# programs build in 198 s with -j1 against 186 s with -j2), so two slots
# would leave one idle for most of the build (docs/performance.md, CI time).
list(APPEND _tp_env "PM_JOBS=1")
add_test(NAME thirdparty.libfabric26 COMMAND ${_tp} libfabric ${PM_THIRDPARTY_CACHE})
set_tests_properties(thirdparty.libfabric26 PROPERTIES
  FIXTURES_SETUP lf26 ENVIRONMENT "${_tp_env}" TIMEOUT 1800 LABELS "libfabric26;thirdparty" COST 10000)
# The DSOs compiled against 2.6's headers (-Werror) in a second build tree.
add_test(NAME libfabric26.build_dsos
         COMMAND ${_chk} build ${PROJECT_SOURCE_DIR} ${PM_LF26_BUILD} ${PM_LF26_PREFIX})
set_tests_properties(libfabric26.build_dsos PROPERTIES
  FIXTURES_REQUIRED lf26 FIXTURES_SETUP lf26dso ENVIRONMENT "PM_JOBS=1" TIMEOUT 1800 LABELS libfabric26)
foreach(prov pmshm pmeth)
  # 2.6's fi_info (asking for API 2.6) against the DSOs built for Debian's 1.17 ...
  add_test(NAME libfabric26.fi_info.${prov} COMMAND ${_chk} fi_info ${PM_LF26_PREFIX} ${prov})
  set_tests_properties(libfabric26.fi_info.${prov} PROPERTIES FIXTURES_REQUIRED lf26
    ENVIRONMENT "FI_PROVIDER_PATH=${PM_PROVIDER_DIR};FI_PMETH_IFACE=lo" TIMEOUT 90 LABELS libfabric26)
  # ... and against the DSOs built against 2.6.
  add_test(NAME libfabric26.native.fi_info.${prov} COMMAND ${_chk} fi_info ${PM_LF26_PREFIX} ${prov})
  set_tests_properties(libfabric26.native.fi_info.${prov} PROPERTIES FIXTURES_REQUIRED "lf26;lf26dso"
    ENVIRONMENT "FI_PROVIDER_PATH=${PM_LF26_BUILD}/lib;FI_PMETH_IFACE=lo" TIMEOUT 90 LABELS libfabric26)
  # A DSO built against 2.6 cannot load into 1.17: the core's warning says why.
  add_test(NAME libfabric26.dso_in_1.17.${prov} COMMAND ${_chk} old_core ${PM_LF26_BUILD}/lib ${prov})
  set_tests_properties(libfabric26.dso_in_1.17.${prov} PROPERTIES FIXTURES_REQUIRED "lf26;lf26dso"
    ENVIRONMENT "FI_PMETH_IFACE=lo" TIMEOUT 90 LABELS libfabric26)
endforeach()
# 2.6's fi_pingpong against the DSOs built for 1.17: pmshm, pmeth on lo
# (both sides with this machine's host id: the composite device's shared
# memory), and pmeth_eth (host ids 1 and 2: Ethernet frames on lo).
add_test(NAME libfabric26.pingpong.pmshm COMMAND ${_chk} pingpong ${PM_LF26_PREFIX} pmshm)
add_test(NAME libfabric26.pingpong.pmeth COMMAND ${_chk} pingpong ${PM_LF26_PREFIX} pmeth)
add_test(NAME libfabric26.pingpong.pmeth_eth COMMAND ${_chk} pingpong ${PM_LF26_PREFIX} pmeth 1 2)
set_tests_properties(libfabric26.pingpong.pmshm libfabric26.pingpong.pmeth libfabric26.pingpong.pmeth_eth
  PROPERTIES FIXTURES_REQUIRED lf26 ENVIRONMENT "FI_PROVIDER_PATH=${PM_PROVIDER_DIR};FI_PMETH_IFACE=lo"
  TIMEOUT 120 LABELS "libfabric26;pingpong")

# --- Sandia OpenSHMEM --------------------------------------------------------
# Two builds: SOS's default configuration (as its CI: --with-ofi=/usr
# --enable-pmi-simple; asks for FI_PROGRESS_AUTO) and the same with
# --enable-ofi-manual-progress. Each runs SOS's make check with 2 PEs under
# Hydra (tests/run_sos.sh) in three settings: pmeth (shared memory between the
# PEs), pmeth_eth (host ids 1 and 2: Ethernet frames on lo), pmshm.
# By default only the default build over pmeth is registered (CI time);
# -DPM_SOS_ALL=ON or scripts/sos.sh runs everything.
set(_sos_builds "default;manual")
set(_sos_args_default "")
set(_sos_args_manual "--enable-ofi-manual-progress")
foreach(b ${_sos_builds})
  if(NOT PM_SOS_ALL AND NOT b STREQUAL "default")
    continue()
  endif()
  add_test(NAME thirdparty.sos.${b} COMMAND ${_tp} sos ${PM_THIRDPARTY_CACHE} ${b} ${_sos_args_${b}})
  set_tests_properties(thirdparty.sos.${b} PROPERTIES
    FIXTURES_SETUP sos_${b} ENVIRONMENT "${_tp_env}" TIMEOUT 2400 LABELS "sos;thirdparty"
    COST 10000)  # the long ones first (ctest -j starts higher COST first): wall time
  set(_settings pmeth pmeth_eth pmshm)
  if(NOT PM_SOS_ALL)
    set(_settings pmeth)
  endif()
  foreach(s ${_settings})
    add_test(NAME sos.${b}.${s} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/run_sos.sh
             ${PM_THIRDPARTY_CACHE}/sos-1.5.3-${b}/src ${s})
    # One run at a time per SOS build (the results live in its tree), alone on
    # the machine (2 busy-polling PEs).
    set_tests_properties(sos.${b}.${s} PROPERTIES FIXTURES_REQUIRED sos_${b} RESOURCE_LOCK sos_${b}
      ENVIRONMENT "FI_PROVIDER_PATH=${PM_PROVIDER_DIR};SOS_RESULTS=${CMAKE_BINARY_DIR}/sos-results/${b}.${s}"
      TIMEOUT 2400 PROCESSORS 2 LABELS sos COST 5000)
  endforeach()
endforeach()
