# Disk tier storage engine against fio (docs/benchmarks.md, "Disk tier").
if(TARGET mc_disk)
  mc_add_program(mc_disk_bench SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/mc_disk_bench.c
                 LIBS mc_disk mc_common PkgConfig::JANSSON)
endif()
