# Transfer Engine demo (what `make demo` runs until the store demo replaces it): two processes
# on loopback moving data over tcp and shm. Uses only the public API, linked against the shared
# library, as an outside user would.
if(TARGET mc_te)
  mc_add_program(mc_te_demo SOURCES mc_te_demo.c LIBS mooncake mc_tools_common PkgConfig::XXHASH)
endif()
