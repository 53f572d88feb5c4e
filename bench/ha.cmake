# Master HA benchmark (owner: HA client helper): failover time, put/lookup throughput with HA on
# vs a single master with its local WAL, standby log lag. Needs etcd; run by scripts/bench_ha.sh.
mc_add_program(mc_ha_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_ha_bench.c
               LIBS mc_client mc_rpc mc_te mc_common mc_testsupport)
add_dependencies(mc_ha_bench mooncake_master mooncake_client)
