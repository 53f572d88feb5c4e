# TTFT CDFs: (1) cache placement variants, (2) routing policies at one rate.
# Inputs: <datadir>/cdf_<name>.dat with "ttft_s,fraction" rows (header-less).
load sprintf("%s/common.gp", scriptdir)
set output sprintf("%s/ttft_cdf_cache.png", outdir)
set title "TTFT CDF by cache placement (same total DRAM, simulated, rate x".rate_cache.")"
set xlabel "TTFT (s, log scale)"
set ylabel "fraction of requests"
set logscale x
set xrange [0.05:*]
set yrange [0:1]
plot sprintf("%s/cdf_no_cache.dat", datadir) u 1:2 w l lw 2 t "no cache", \
     sprintf("%s/cdf_local_only_least_loaded.dat", datadir) u 1:2 w l lw 2 t "local only, least-loaded", \
     sprintf("%s/cdf_local_only.dat", datadir) u 1:2 w l lw 2 t "local only, cache-aware", \
     sprintf("%s/cdf_global_pool.dat", datadir) u 1:2 w l lw 2 t "global pool", \
     sprintf("%s/cdf_global_pool_ssd.dat", datadir) u 1:2 w l lw 2 t "global pool + SSD"
set output sprintf("%s/ttft_cdf_routing.png", outdir)
set title "TTFT CDF by routing policy (simulated, rate x".rate_routing.", rejected excluded)"
plot sprintf("%s/cdf_random.dat", datadir) u 1:2 w l lw 2 t "random", \
     sprintf("%s/cdf_least_loaded.dat", datadir) u 1:2 w l lw 3 dt 2 t "least-loaded (overlaps cache-aware)", \
     sprintf("%s/cdf_cache_aware.dat", datadir) u 1:2 w l lw 2 t "cache-aware", \
     sprintf("%s/cdf_cache_aware_slo.dat", datadir) u 1:2 w l lw 2 t "cache-aware + SLO admission"
