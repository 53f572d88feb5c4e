# Store benchmark (owner: lead). Links the shared test helpers for spawning daemons by PID.
mc_add_program(mc_store_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_store_bench.c
               ${CMAKE_CURRENT_SOURCE_DIR}/peers.c ${CMAKE_CURRENT_SOURCE_DIR}/store_getpath.c
               LIBS mc_client mc_rpc mc_te mc_common mc_tools_common mc_testsupport
                    PkgConfig::JANSSON)
add_dependencies(mc_store_bench mooncake_master mooncake_client)
