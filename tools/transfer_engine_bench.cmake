# transfer_engine_bench: upstream Mooncake's Transfer Engine benchmark with its flags (the
# console script of the Python package execs it). Our own benchmark is bench/mc_te_bench.c.
if(TARGET mc_te)
  mc_add_program(transfer_engine_bench
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/transfer_engine_bench.c
    LIBS mc_te mc_common mc_tools_common)
endif()
