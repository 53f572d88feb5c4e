# Cost of one connection handshake (owner: security helper; docs/benchmarks.md "Authentication").
mc_add_program(mc_auth_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_auth_bench.c
               LIBS mc_common)
