# Engine tools: one synthetic run (mc_engine_run), trace replay against a store (mc_engine_replay).
mc_add_program(mc_engine_run SOURCES ${CMAKE_CURRENT_LIST_DIR}/mc_engine_run.c
               LIBS mc_engine mc_common mc_tools_common)
mc_add_program(mc_engine_replay SOURCES ${CMAKE_CURRENT_LIST_DIR}/mc_engine_replay.c
               LIBS mc_engine mc_conductor mc_client mc_rpc mc_te mc_common mc_tools_common)
# One request in prefill/decode disaggregation through the store, or colocated (mc_engine_pd).
mc_add_program(mc_engine_pd SOURCES ${CMAKE_CURRENT_LIST_DIR}/mc_engine_pd.c
               LIBS mc_engine mc_client mc_rpc mc_te mc_common mc_tools_common)
