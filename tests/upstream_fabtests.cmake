# libfabric's own test suite, fabtests 1.17.0 (unmodified, from the
# workspace's shared/thirdparty; docs/upstream_fabtests.md), against both
# providers: built by the fixture test upstream.build into
# <build>/upstream-fabtests (once: a finished build is reused), then
# runfabtests.sh once per provider x setting x address mode, each its own
# test, judged by fabtests/scripts/run_upstream_fabtests.sh (every test that
# is not excluded must pass).
set(_tp "")
foreach(d "${PROJECT_SOURCE_DIR}/../shared/thirdparty" "${PROJECT_SOURCE_DIR}/../../shared/thirdparty")
  if(NOT _tp AND EXISTS "${d}/fabtests-1.17.0.tar.gz")
    get_filename_component(_tp "${d}" ABSOLUTE)
  endif()
endforeach()
set(PM_FABTESTS_TARBALL "${_tp}/fabtests-1.17.0.tar.gz" CACHE FILEPATH
    "fabtests-1.17.0.tar.gz (libfabric's test suite) for the upstream.* tests")
if(NOT EXISTS "${PM_FABTESTS_TARBALL}")
  message(WARNING "no fabtests-1.17.0.tar.gz found (looked in ../shared/thirdparty and ../../shared/thirdparty "
                  "beside the source tree); set PM_FABTESTS_TARBALL to run libfabric's fabtests (upstream.*)")
  return()
endif()

set(PM_UFT_DIR "${CMAKE_BINARY_DIR}/upstream-fabtests")
set(PM_UFT_BIN "${PM_UFT_DIR}/install/bin")
set(PM_UFT_CFG "${PROJECT_SOURCE_DIR}/fabtests/configs/upstream")
set(PM_UFT_RUN "${PROJECT_SOURCE_DIR}/fabtests/scripts/run_upstream_fabtests.sh")

add_test(NAME upstream.build
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/build_upstream_fabtests.sh ${PM_FABTESTS_TARBALL} ${PM_UFT_DIR})
set_tests_properties(upstream.build PROPERTIES FIXTURES_SETUP upstream_fabtests TIMEOUT 1200 LABELS upstream
  COST 10000)  # long: started first by ctest -j (CI wall time)

# The -b runs (names swapped out of band) are in CI beside the node/service
# runs; -DPM_UPSTREAM_OOB=OFF leaves them out (about 40 % of these tests' time).
option(PM_UPSTREAM_OOB "register the -b (out-of-band address exchange) runs of libfabric's fabtests" ON)

# pm_upstream_args(<out> <name> <prov> <mode> [OOB] [TESTS <set>] [UBERTEST <cfg>] [PREFIX <p>])
# sets <out> to the command of one run (empty when it is an -b run and
# PM_UPSTREAM_OOB is off). The run bounds itself 60 s below the tests'
# TIMEOUT (1200 s), so that it removes its namespaces before ctest strikes.
function(pm_upstream_args out name prov mode)
  cmake_parse_arguments(U "OOB" "TESTS;UBERTEST;PREFIX" "" ${ARGN})
  if(NOT U_TESTS)
    set(U_TESTS "unit,functional,short")
  endif()
  set(args ${PM_UFT_RUN} --limit 1140 --bin ${PM_UFT_BIN} --prov ${prov} --mode ${mode} --tests ${U_TESTS}
           --timeout 60 --work ${CMAKE_BINARY_DIR}/upstream-runs/${name}
           --exclude ${PM_UFT_CFG}/common.exclude --exclude ${PM_UFT_CFG}/${prov}.exclude)
  if(U_OOB)
    if(NOT PM_UPSTREAM_OOB)
      set(${out} "" PARENT_SCOPE)
      return()
    endif()
    list(APPEND args --oob)
  endif()
  if(U_UBERTEST)
    list(APPEND args --ubertest ${U_UBERTEST})
  endif()
  if(U_PREFIX)
    list(APPEND args --prefix ${U_PREFIX})
  endif()
  set(${out} ${args} PARENT_SCOPE)
endfunction()

# pm_upstream_test(<name> <mode> <command...>) registers upstream.<name>.
# The runs on this host's own network namespace (local mode) take the lock
# upstream_local: they use the service 9228 and, in -b mode, TCP port 3000. A
# netns run has namespaces of its own (and pmeth's well-known shared-memory
# regions carry the host id, which differs there), so it runs beside them.
function(pm_upstream_test name mode)
  add_test(NAME upstream.${name} COMMAND ${ARGN})
  # Each of these programs allocates and clears 1 GiB (its largest size,
  # 8 MiB, times a window of 64, for sending and receiving): 5 s of page
  # faults per run on a 2-vCPU guest, most of these tests' time. glibc's
  # malloc then asks for transparent huge pages (where the kernel has them
  # in madvise mode): 2.9 s instead of 5.0 for fi_rdm_pingpong -I 5.
  set_tests_properties(upstream.${name} PROPERTIES
    ENVIRONMENT "FI_PROVIDER_PATH=${PM_PROVIDER_DIR};GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
    FIXTURES_REQUIRED upstream_fabtests TIMEOUT 1200 SKIP_RETURN_CODE 77 LABELS upstream COST 5000)
  if(mode STREQUAL "local")
    set_tests_properties(upstream.${name} PROPERTIES RESOURCE_LOCK upstream_local)
  else()
    set_tests_properties(upstream.${name} PROPERTIES LABELS "upstream;netns")
  endif()
endfunction()

# pm_add_upstream_run(<name> <prov> <mode> [options of pm_upstream_args])
# registers one run as upstream.<name>.
function(pm_add_upstream_run name prov mode)
  pm_upstream_args(cmd ${name} ${prov} ${mode} ${ARGN})
  if(cmd)
    pm_upstream_test(${name} ${mode} ${cmd})
  endif()
endfunction()

# The quick set (unit, functional, short), in fi_getinfo's node/service mode
# (runfabtests' default) and in -b mode (addresses swapped out of band).
pm_add_upstream_run(pmshm.local pmshm local)
# Its -b run is left out of CI by default too (167 s of a 2-slot ctest, 84 s
# of CI's wall time): every test of the project's own fabtests exchanges
# pmshm's raw addresses out of band (fi_getname, fi_av_insert), and -b runs
# of fabtests 1.17 go between the namespaces below (pmeth.netns_oob).
option(PM_UPSTREAM_SHM_OOB "register upstream.pmshm.local_oob (pmshm, -b)" OFF)
if(PM_UPSTREAM_SHM_OOB)
  pm_add_upstream_run(pmshm.local_oob pmshm local OOB)
endif()
# pmeth on lo, both sides with this host's id: the composite device's
# shared memory carries the traffic.
pm_add_upstream_run(pmeth.lo pmeth local)
# Its -b run is left out of CI by default (3.4 min of CI time; each -b
# client sleeps 1 s after its connect): -b for pmeth is run between the
# namespaces below, the composite device's shared memory by pmeth.lo.
option(PM_UPSTREAM_LO_OOB "register upstream.pmeth.lo_oob (pmeth on lo, -b)" OFF)
if(PM_UPSTREAM_LO_OOB)
  pm_add_upstream_run(pmeth.lo_oob pmeth local OOB)
endif()
# pmeth between two network namespaces joined by a veth pair, each side its
# own host id: real Ethernet frames, node/service resolved through ARP
# (root; skipped otherwise).
# The node/service run and the -b run go at the same time, in namespaces of
# their own, as one test (fabtests/scripts/run_together.sh): runfabtests
# sleeps 1 s before each client, so together they take 158 s against 292 s
# one after the other, and hold one ctest slot instead of two (CI time,
# docs/performance.md).
pm_upstream_args(_netns pmeth.netns pmeth netns PREFIX pmuftn)
pm_upstream_args(_netns_oob pmeth.netns_oob pmeth netns OOB PREFIX pmuftnb)
if(_netns_oob)
  pm_upstream_test(pmeth.netns_both netns ${PROJECT_SOURCE_DIR}/fabtests/scripts/run_together.sh
                   ${_netns} :: ${_netns_oob})
else()
  pm_upstream_test(pmeth.netns netns ${_netns})
endif()
# fi_ubertest (-t complex) with each provider's configuration: 3 to 5
# minutes each, so not in the CI run (its time budget); configure with
# -DPM_UPSTREAM_COMPLEX=ON to register them (docs/upstream_fabtests.md).
option(PM_UPSTREAM_COMPLEX "register the fi_ubertest runs of libfabric's fabtests (upstream.*.complex)" OFF)
if(PM_UPSTREAM_COMPLEX)
  pm_add_upstream_run(pmshm.complex pmshm local TESTS complex UBERTEST ${PM_UFT_CFG}/pmshm.test)
  pm_add_upstream_run(pmeth.lo.complex pmeth local TESTS complex UBERTEST ${PM_UFT_CFG}/pmeth.test)
  pm_add_upstream_run(pmeth.netns.complex pmeth netns TESTS complex UBERTEST ${PM_UFT_CFG}/pmeth.test PREFIX pmuftc)
endif()
