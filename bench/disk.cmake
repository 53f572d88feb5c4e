# Disk tier storage engine against fio (docs/benchmarks.md, "Disk tier").
if(TARGET mc_disk)
  mc_add_program(mc_disk_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_disk_bench.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/disk_fio.c
                 LIBS mc_disk mc_common PkgConfig::JANSSON)
endif()
# Gets served from the disk tier through a real cluster (scripts/bench_disk_e2e.sh).
if(TARGET mc_disk)
  mc_add_program(mc_disk_e2e_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_disk_e2e_bench.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/disk_fio.c
                 LIBS mc_client mc_rpc mc_te mc_common mc_testsupport PkgConfig::JANSSON)
  add_dependencies(mc_disk_e2e_bench mooncake_master mooncake_client)
endif()
