# Store client programs (owner: lead).
mc_add_program(mooncake_client SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mooncake_client.c
               LIBS mc_client mc_rpc mc_te mc_common mc_tools_common)
mc_add_program(mc_store_replay SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_store_replay.c
               LIBS mc_client mc_conductor mc_rpc mc_te mc_common mc_tools_common)
