# Mean TTFT and compute saved vs remote fetch bandwidth, per fetch policy (the negative result).
# Input: <datadir>/bandwidth_sweep.csv (col 1 label=fetch policy, col 13 net_gib_s,
# col 23 ttft_mean, col 32 compute_saved)
load sprintf("%s/common.gp", scriptdir)
set output sprintf("%s/bandwidth_sweep.png", outdir)
set multiplot layout 1,2 title "Where remote fetch stops paying off (simulated, 64 MiB blocks)"
f = sprintf("%s/bandwidth_sweep.csv", datadir)
set logscale x
set xlabel "remote fetch bandwidth (GiB/s)"
set ylabel "mean TTFT (s, log)"
set logscale y
set key inside right top
# rows come in (cost, always, never) triples per bandwidth: pick each series with "every"
plot f every 3::1 u 13:23 w lp lw 2 pt 7 t "fetch if cheaper", \
     f every 3::2 u 13:23 w lp lw 2 pt 5 t "always fetch", \
     f every 3::3 u 13:23 w lp lw 2 pt 9 dt 2 t "never fetch"
unset logscale y
set ylabel "prefill compute saved"
set yrange [0:0.4]
set key inside left top
plot f every 3::1 u 13:32 w lp lw 2 pt 7 t "fetch if cheaper", \
     f every 3::2 u 13:32 w lp lw 2 pt 5 t "always fetch", \
     f every 3::3 u 13:32 w lp lw 2 pt 9 dt 2 t "never fetch"
unset multiplot
