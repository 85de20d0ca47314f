# pm_add_provider(NAME SOURCES...): builds lib<NAME>-fi.so, a libfabric
# external provider that exports only fi_prov_ini, links the shared core
# statically and installs into libfabric's provider directory.
function(pm_add_provider name)
  add_library(${name}-fi MODULE ${ARGN})
  target_link_libraries(${name}-fi PRIVATE pm_util PkgConfig::LIBFABRIC Threads::Threads)
  set_target_properties(${name}-fi PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "${name}-fi"
    LIBRARY_OUTPUT_DIRECTORY "${PM_PROVIDER_DIR}"
    LINK_DEPENDS "${PROJECT_SOURCE_DIR}/cmake/provider.map")
  target_link_options(${name}-fi PRIVATE "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/provider.map")
  # Every symbol resolved at link time; not with sanitizers, whose runtime
  # (clang links it statically) is in the program that loads the DSO.
  if(NOT PM_SANITIZE)
    target_link_options(${name}-fi PRIVATE "-Wl,--no-undefined" "-Wl,-z,defs")
  endif()
  install(TARGETS ${name}-fi LIBRARY DESTINATION "${PM_FI_PROVDIR}")
endfunction()
