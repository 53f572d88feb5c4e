# Transfer Engine throughput vs object (request) size, one line per transport/op(/batch/threads).
# Input: <datadir>/te_<series>.dat ("block_bytes,gib_s" rows, sorted, header-less), written by
# report.sh from the mc_te_bench JSON lines; `series` is a space-separated list of series names.
load sprintf("%s/common.gp", scriptdir)
set output sprintf("%s/te_throughput_vs_size.png", outdir)
set title "Transfer Engine throughput vs object size per transport (measured, loopback)"
set xlabel "object size per request (bytes, log scale)"
set ylabel "throughput (GiB/s, log scale)"
set logscale y
set logscale x 2
set format x "%.0b%B"
set key inside left top

plot for [s in series] sprintf("%s/te_%s.dat", datadir, s) u 1:2 w lp lw 2 pt 7 t s noenhanced
