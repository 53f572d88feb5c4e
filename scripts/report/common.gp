# Shared style for the report plots (loaded by the other scripts). Variables set by report.sh
# with -e: datadir (input folder), outdir (PNG folder).
set terminal pngcairo size 900,560 enhanced font "DejaVu Sans,11"
set datafile separator ","
set key outside right top
set grid xtics ytics lc rgb "#dddddd"
set border lw 1
