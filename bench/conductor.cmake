# Conductor benchmarks (owner: conductor/evaluation).
mc_add_program(mc_conductor_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/mc_conductor_bench.c
               LIBS mc_conductor mc_common)
