# Block hit ratio vs cache capacity for LRU / LFU / FIFO / adaptive against Belady's optimum.
# Input: <datadir>/cache_sweep.csv (header: capacity_blocks,capacity_gib,lru,lfu,fifo,belady,...;
# the newer policies' columns, adaptive among them, are found by name)
load sprintf("%s/common.gp", scriptdir)
set output sprintf("%s/hit_ratio_vs_capacity.png", outdir)
set title "Block hit ratio vs cache size (trace replay, 64 MiB blocks)"
set xlabel "cache capacity (GiB, log scale)"
set ylabel "hit ratio (blocks)"
set logscale x
set yrange [0:0.4]
set key inside right bottom
plot sprintf("%s/cache_sweep.csv", datadir) every ::1 u 2:6 w lp lw 3 pt 7 t "Belady (offline optimum)", \
     "" every ::1 u 2:3 w lp lw 2 pt 5 t "LRU", \
     "" every ::1 u 2:4 w lp lw 2 pt 9 t "LFU", \
     "" every ::1 u 2:5 w lp lw 2 pt 11 t "FIFO", \
     "" u 2:"adaptive" w lp lw 3 pt 13 t "adaptive (master --eviction\\_policy)", \
     unbounded w l dt 2 lc rgb "black" t "unbounded cache (36.6 %)"
