# Man pages and the Debian package.
#
# Every docs/<name>.<section>.md (fi_pmeth.7, fi_pmshm.7, pmethd.8,
# pmstat.1) becomes a man page at build time with pandoc, installed in
# man<section>. `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr makes pmfabric_<version>_<arch>.deb: the
# provider DSOs where Debian's libfabric looks for them (PM_FI_PROVDIR), the
# man pages, pmethd with its systemd unit and /etc/pmethd.conf (a conffile),
# pmstat and <pmfabric/pmstat.h>. tests/check_deb.sh installs it.
find_program(PM_PANDOC pandoc)
file(GLOB pm_man_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.[1-8].md)
if(PM_PANDOC)
  set(pm_man_pages)
  foreach(src IN LISTS pm_man_sources)
    get_filename_component(base ${src} NAME)            # fi_pmeth.7.md
    string(REGEX REPLACE "\\.md$" "" page ${base})        # fi_pmeth.7
    string(REGEX REPLACE "^.*\\.([1-8])$" "\\1" section ${page})
    string(REGEX REPLACE "\\.[1-8]$" "" name ${page})
    string(TOUPPER ${name} title)
    set(out ${CMAKE_BINARY_DIR}/man/${page})
    # Pages written as "# name(N) — ..." then "## NAME": one level up, the
    # first heading being the title.
    file(STRINGS ${src} first LIMIT_COUNT 1)
    set(shift)
    if(first MATCHES "^# ")
      set(shift --shift-heading-level-by=-1)
    endif()
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${PM_PANDOC} -s -f markdown -t man ${shift} -M title=${title} -M section=${section}
              -M header=pmfabric -M footer=pmfabric\ ${PROJECT_VERSION} ${src} -o ${out}
      DEPENDS ${src} COMMENT "man page ${page}" VERBATIM)
    list(APPEND pm_man_pages ${out})
    install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endforeach()
  add_custom_target(man ALL DEPENDS ${pm_man_pages})
else()
  message(STATUS "pandoc not found: no man pages (scripts/install-deps.sh installs it)")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pmfabric)
set(CPACK_PACKAGE_VENDOR pmfabric)
set(CPACK_PACKAGE_CONTACT "pmfabric developers <pmfabric@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "libfabric providers pmeth (raw Ethernet) and pmshm (shared memory)")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "pmeth carries libfabric RDM and datagram endpoints in raw Ethernet frames (AF_PACKET,
 AF_XDP, verbs raw packet), with a reliable protocol, trunking and shared memory
 between processes of one host; pmshm is its shared-memory provider. Both are
 loaded by the system libfabric (FI_PROVIDER=pmeth / pmshm). pmethd lets
 unprivileged users use pmeth; pmstat shows live statistics.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libfabric1 (>= 1.17), nftables")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libfabric-bin")
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/dist/conffiles)
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)
