# Machine probes behind figures in docs/benchmarks.md (no library of ours).
mc_add_program(mc_mapping_probe SOURCES mc_mapping_probe.c)
