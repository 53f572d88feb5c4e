# Master benchmarks (owner: master helper).
mc_add_program(mc_master_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_master_bench.c
               LIBS mc_master mc_rpc mc_common)
