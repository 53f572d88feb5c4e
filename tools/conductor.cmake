# Conductor and evaluation tools (owner: conductor/evaluation).
mc_add_program(mc_plan SOURCES ${CMAKE_CURRENT_LIST_DIR}/mc_plan.c LIBS mc_conductor mc_common)
mc_add_program(mc_sim SOURCES ${CMAKE_CURRENT_LIST_DIR}/mc_sim.c LIBS mc_conductor mc_common)
mc_add_program(mooncake_conductor SOURCES ${CMAKE_CURRENT_LIST_DIR}/mooncake_conductor.c
               LIBS mc_conductor mc_rpc mc_common mc_tools_common PkgConfig::JANSSON)
