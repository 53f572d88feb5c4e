# Goodput (requests/s meeting both SLOs) vs offered request rate, per routing policy.
# Input: <datadir>/routing.csv (CSV_HEADER of mc_sim: col 1 label, col 9 rate_rps, col 28 goodput_rps)
load sprintf("%s/common.gp", scriptdir)
set output sprintf("%s/goodput_vs_rate.png", outdir)
set title "Goodput vs request rate per routing policy (simulated)"
set xlabel "offered rate (requests/s)"
set ylabel "goodput (requests/s meeting TTFT and ITL SLOs)"
set key inside left top
f = sprintf("%s/routing.csv", datadir)
plot f u ($9):(strcol(1) eq "random" ? $28 : 1/0) w lp lw 2 pt 7 t "random", \
     f u ($9):(strcol(1) eq "least_loaded" ? $28 : 1/0) w lp lw 2 pt 5 t "least-loaded", \
     f u ($9):(strcol(1) eq "cache_aware" ? $28 : 1/0) w lp lw 2 pt 9 t "cache-aware", \
     f u ($9):(strcol(1) eq "cache_aware_slo" ? $28 : 1/0) w lp lw 2 pt 11 t "cache-aware + SLO admission", \
     x w l dt 2 lc rgb "grey" t "offered"
