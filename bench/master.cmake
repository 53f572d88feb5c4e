# master benchmarks (owner: master helper)
