# PM_SANITIZE (e.g. address,undefined): every target compiled and linked
# with those sanitizers; UBSan stops at the first report. With clang, ASan
# and PM_FUZZ the whole build also carries libFuzzer's coverage
# instrumentation (-fsanitize=fuzzer-no-link), so that the harnesses of
# fuzz/ see the code they drive; PM_FUZZ_BUILD then says they can be built,
# PM_FUZZ_SKIP_REASON otherwise why not.
set(PM_FUZZ_BUILD OFF)
set(PM_FUZZ_SKIP_REASON "")
if(PM_SANITIZE)
  add_compile_options(-fsanitize=${PM_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${PM_SANITIZE})
  if(PM_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
  message(STATUS "sanitizers: ${PM_SANITIZE}")
endif()

if(NOT PM_FUZZ)
  set(PM_FUZZ_SKIP_REASON "PM_FUZZ is OFF")
elseif(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(PM_FUZZ_SKIP_REASON "libFuzzer needs clang (this build uses ${CMAKE_CXX_COMPILER_ID}); see docs/fuzzing.md")
elseif(NOT PM_SANITIZE MATCHES "address")
  set(PM_FUZZ_SKIP_REASON "the fuzzers are part of the sanitizer build (-DPM_SANITIZE=address,undefined); see docs/fuzzing.md")
else()
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,${PM_SANITIZE}")
  check_cxx_source_compiles([[
    #include <cstddef>
    #include <cstdint>
    extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
  ]] PM_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  if(PM_HAVE_LIBFUZZER)
    set(PM_FUZZ_BUILD ON)
    add_compile_options(-fsanitize=fuzzer-no-link)
  else()
    set(PM_FUZZ_SKIP_REASON "clang cannot link -fsanitize=fuzzer (install libclang-rt-14-dev: scripts/install-deps.sh)")
  endif()
endif()
if(PM_FUZZ AND NOT PM_FUZZ_BUILD)
  message(STATUS "fuzzers not built: ${PM_FUZZ_SKIP_REASON}")
endif()
