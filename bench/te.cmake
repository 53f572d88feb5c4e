# Transfer Engine benchmark (docs/benchmarks.md). peers.c holds the peer measurements (memcpy,
# memcached, iperf3, redis-benchmark) that later store benchmarks reuse.
if(TARGET mc_te)
  mc_add_program(mc_te_bench SOURCES mc_te_bench.c peers.c
    LIBS mc_te mc_common mc_tools_common PkgConfig::JANSSON)
endif()
