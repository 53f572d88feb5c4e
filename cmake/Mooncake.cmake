# Helpers shared by every CMakeLists in the tree. One way to add a module, a test, a fuzzer.

define_property(GLOBAL PROPERTY MC_MODULES BRIEF_DOCS "module libraries" FULL_DOCS "mc_* libs")

# mc_add_module(<name> SOURCES ... [LIBS ...])
# Builds static library mc_<name> (PIC) and records it for libmooncake.so.
function(mc_add_module name)
  cmake_parse_arguments(M "" "" "SOURCES;LIBS" ${ARGN})
  add_library(mc_${name} STATIC ${M_SOURCES})
  target_link_libraries(mc_${name} PUBLIC ${M_LIBS} Threads::Threads)
  set_property(GLOBAL APPEND PROPERTY MC_MODULES mc_${name})
endfunction()

# mc_add_program(<name> SOURCES ... [LIBS ...]) — an installed tool or benchmark.
function(mc_add_program name)
  cmake_parse_arguments(M "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${M_SOURCES})
  target_link_libraries(${name} PRIVATE ${M_LIBS} Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# mc_add_test(<name> SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s])
# A cmocka (or plain) C test program registered with ctest. Labels: unit, integration, threads
# (threads = also run under TSan), slow.
function(mc_add_test name)
  cmake_parse_arguments(M "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${M_SOURCES})
  target_link_libraries(${name} PRIVATE ${M_LIBS} PkgConfig::CMOCKA Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT M_TIMEOUT)
    set(M_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${M_TIMEOUT} LABELS "${M_LABELS}"
    ENVIRONMENT "MC_BIN_DIR=${CMAKE_BINARY_DIR}/bin;MC_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

# mc_add_script_test(<name> SCRIPT path [LABELS ...] [TIMEOUT s]) — a bash integration test.
function(mc_add_script_test name)
  cmake_parse_arguments(M "" "SCRIPT;TIMEOUT" "LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND bash ${M_SCRIPT})
  if(NOT M_TIMEOUT)
    set(M_TIMEOUT 180)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${M_TIMEOUT} LABELS "${M_LABELS}"
    ENVIRONMENT "MC_BIN_DIR=${CMAKE_BINARY_DIR}/bin;MC_TEST_BIN_DIR=${CMAKE_BINARY_DIR}/tests;MC_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

# mc_add_fuzzer(<name> SOURCES ... [LIBS ...])
# With MC_FUZZ=ON (clang): a libFuzzer binary plus a ctest "fuzz_<name>" that fuzzes for
# MC_FUZZ_SECONDS (default 20) from tests/fuzz/corpus/<name>.
# Without: the same source linked with tests/fuzz/standalone_main.c replays the corpus as a
# regression test, so every build checks the parsers against the saved inputs.
function(mc_add_fuzzer name)
  cmake_parse_arguments(M "" "" "SOURCES;LIBS" ${ARGN})
  set(corpus ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
  if(MC_FUZZ)
    add_executable(${name} ${M_SOURCES})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(${name} PRIVATE ${M_LIBS} Threads::Threads)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    if(NOT DEFINED ENV{MC_FUZZ_SECONDS})
      set(secs 20)
    else()
      set(secs $ENV{MC_FUZZ_SECONDS})
    endif()
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz/work_${name})
    add_test(NAME fuzz_${name}
      COMMAND ${name} -max_total_time=${secs} -rss_limit_mb=2048 -timeout=10
              ${CMAKE_BINARY_DIR}/fuzz/work_${name} ${corpus})
    set_tests_properties(fuzz_${name} PROPERTIES TIMEOUT 300 LABELS fuzz)
  else()
    add_executable(${name}_replay ${M_SOURCES} ${CMAKE_SOURCE_DIR}/tests/fuzz/standalone_main.c)
    target_link_libraries(${name}_replay PRIVATE ${M_LIBS} Threads::Threads)
    set_target_properties(${name}_replay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    add_test(NAME ${name}_replay COMMAND ${name}_replay ${corpus})
    set_tests_properties(${name}_replay PROPERTIES TIMEOUT 120 LABELS unit)
  endif()
endfunction()

# Called once at the end of the top-level CMakeLists: libmooncake.so from all modules.
function(mc_finish_library)
  get_property(mods GLOBAL PROPERTY MC_MODULES)
  if(NOT mods)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/mooncake_empty.c "/* libmooncake.so is made of the module archives */\n")
  add_library(mooncake SHARED ${CMAKE_BINARY_DIR}/mooncake_empty.c)
  target_link_libraries(mooncake PRIVATE -Wl,--whole-archive ${mods} -Wl,--no-whole-archive)
  foreach(m ${mods})
    get_target_property(deps ${m} INTERFACE_LINK_LIBRARIES)
    if(deps)
      target_link_libraries(mooncake PRIVATE ${deps})
    endif()
  endforeach()
  set_target_properties(mooncake PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
endfunction()
