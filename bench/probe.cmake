# Machine probes behind figures in docs/benchmarks.md.
mc_add_program(mc_mapping_probe SOURCES mc_mapping_probe.c LIBS mc_common)
