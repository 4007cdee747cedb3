# Draws the report's PNGs from its .dat files: gnuplot report.gp

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'flux-1024-cdf.png'
set title 'flux-1024: latency and TTFF CDFs at load 0.80'
set xlabel 'seconds'
set ylabel 'share of jobs'
set yrange [0:1]
plot 'flux-1024-cdf.dat' using 2:1 with lines lw 2 title 'latency, disaggregated', 'flux-1024-cdf.dat' using 3:1 with lines lw 2 title 'latency, colocated', 'flux-1024-cdf.dat' using 4:1 with lines dt 2 lw 2 title 'TTFF, disaggregated', 'flux-1024-cdf.dat' using 5:1 with lines dt 2 lw 2 title 'TTFF, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'flux-1024-load.png'
set title 'flux-1024: throughput and p99 against offered load'
set xlabel 'offered jobs/s'
set ylabel 'completed jobs/s'
set y2label 'p99 seconds (log)'
set logscale y2
set y2tics
set key top left
plot 'flux-1024-load.dat' using 2:3 with linespoints lw 2 title 'jobs/s, disaggregated', 'flux-1024-load.dat' using 2:4 with linespoints lw 2 title 'jobs/s, colocated', 'flux-1024-load.dat' using 2:5 axes x1y2 with linespoints dt 2 title 'p99, disaggregated', 'flux-1024-load.dat' using 2:6 axes x1y2 with linespoints dt 2 title 'p99, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'flux-1024-nm.png'
set title 'flux-1024: SLO attainment against N:M at equal GPUs'
set xlabel 'denoise GPUs per decode GPU (N:M, log)'
set logscale x
set ylabel 'share of jobs within the SLO'
set yrange [0:1.05]
plot 'flux-1024-nm.dat' using 2:3 with linespoints lw 2 title 'disaggregated', 'flux-1024-nm.dat' using 2:5 with lines dt 2 lw 2 title 'colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'flux-1024-utilization.png'
set title 'flux-1024: busy share of each pool over time'
set xlabel 'simulated minutes'
set ylabel 'busy slots / slots'
set yrange [0:1.05]
plot 'flux-1024-utilization.dat' using 1:2 with lines lw 2 title 'encode (1)', 'flux-1024-utilization.dat' using 1:3 with lines lw 2 title 'denoise (58)', 'flux-1024-utilization.dat' using 1:4 with lines lw 2 title 'decode (5)', 'flux-1024-utilization.dat' using 1:5 with lines dt 2 lw 2 title 'colocated (64)'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-480p-cdf.png'
set title 'wan2.1-480p: latency and TTFF CDFs at load 0.80'
set xlabel 'seconds'
set ylabel 'share of jobs'
set yrange [0:1]
plot 'wan2.1-480p-cdf.dat' using 2:1 with lines lw 2 title 'latency, disaggregated', 'wan2.1-480p-cdf.dat' using 3:1 with lines lw 2 title 'latency, colocated', 'wan2.1-480p-cdf.dat' using 4:1 with lines dt 2 lw 2 title 'TTFF, disaggregated', 'wan2.1-480p-cdf.dat' using 5:1 with lines dt 2 lw 2 title 'TTFF, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-480p-load.png'
set title 'wan2.1-480p: throughput and p99 against offered load'
set xlabel 'offered jobs/s'
set ylabel 'completed jobs/s'
set y2label 'p99 seconds (log)'
set logscale y2
set y2tics
set key top left
plot 'wan2.1-480p-load.dat' using 2:3 with linespoints lw 2 title 'jobs/s, disaggregated', 'wan2.1-480p-load.dat' using 2:4 with linespoints lw 2 title 'jobs/s, colocated', 'wan2.1-480p-load.dat' using 2:5 axes x1y2 with linespoints dt 2 title 'p99, disaggregated', 'wan2.1-480p-load.dat' using 2:6 axes x1y2 with linespoints dt 2 title 'p99, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-480p-nm.png'
set title 'wan2.1-480p: SLO attainment against N:M at equal GPUs'
set xlabel 'denoise GPUs per decode GPU (N:M, log)'
set logscale x
set ylabel 'share of jobs within the SLO'
set yrange [0:1.05]
plot 'wan2.1-480p-nm.dat' using 2:3 with linespoints lw 2 title 'disaggregated', 'wan2.1-480p-nm.dat' using 2:5 with lines dt 2 lw 2 title 'colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-480p-utilization.png'
set title 'wan2.1-480p: busy share of each pool over time'
set xlabel 'simulated minutes'
set ylabel 'busy slots / slots'
set yrange [0:1.05]
plot 'wan2.1-480p-utilization.dat' using 1:2 with lines lw 2 title 'encode (1)', 'wan2.1-480p-utilization.dat' using 1:3 with lines lw 2 title 'denoise (126)', 'wan2.1-480p-utilization.dat' using 1:4 with lines lw 2 title 'decode (1)', 'wan2.1-480p-utilization.dat' using 1:5 with lines dt 2 lw 2 title 'colocated (128)'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-720p-cdf.png'
set title 'wan2.1-720p: latency and TTFF CDFs at load 0.80'
set xlabel 'seconds'
set ylabel 'share of jobs'
set yrange [0:1]
plot 'wan2.1-720p-cdf.dat' using 2:1 with lines lw 2 title 'latency, disaggregated', 'wan2.1-720p-cdf.dat' using 3:1 with lines lw 2 title 'latency, colocated', 'wan2.1-720p-cdf.dat' using 4:1 with lines dt 2 lw 2 title 'TTFF, disaggregated', 'wan2.1-720p-cdf.dat' using 5:1 with lines dt 2 lw 2 title 'TTFF, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-720p-load.png'
set title 'wan2.1-720p: throughput and p99 against offered load'
set xlabel 'offered jobs/s'
set ylabel 'completed jobs/s'
set y2label 'p99 seconds (log)'
set logscale y2
set y2tics
set key top left
plot 'wan2.1-720p-load.dat' using 2:3 with linespoints lw 2 title 'jobs/s, disaggregated', 'wan2.1-720p-load.dat' using 2:4 with linespoints lw 2 title 'jobs/s, colocated', 'wan2.1-720p-load.dat' using 2:5 axes x1y2 with linespoints dt 2 title 'p99, disaggregated', 'wan2.1-720p-load.dat' using 2:6 axes x1y2 with linespoints dt 2 title 'p99, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-720p-nm.png'
set title 'wan2.1-720p: SLO attainment against N:M at equal GPUs'
set xlabel 'denoise GPUs per decode GPU (N:M, log)'
set logscale x
set ylabel 'share of jobs within the SLO'
set yrange [0:1.05]
plot 'wan2.1-720p-nm.dat' using 2:3 with linespoints lw 2 title 'disaggregated', 'wan2.1-720p-nm.dat' using 2:5 with lines dt 2 lw 2 title 'colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'wan2.1-720p-utilization.png'
set title 'wan2.1-720p: busy share of each pool over time'
set xlabel 'simulated minutes'
set ylabel 'busy slots / slots'
set yrange [0:1.05]
plot 'wan2.1-720p-utilization.dat' using 1:2 with lines lw 2 title 'encode (1)', 'wan2.1-720p-utilization.dat' using 1:3 with lines lw 2 title 'denoise (126)', 'wan2.1-720p-utilization.dat' using 1:4 with lines lw 2 title 'decode (1)', 'wan2.1-720p-utilization.dat' using 1:5 with lines dt 2 lw 2 title 'colocated (128)'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'hunyuan-720p-cdf.png'
set title 'hunyuan-720p: latency and TTFF CDFs at load 0.80'
set xlabel 'seconds'
set ylabel 'share of jobs'
set yrange [0:1]
plot 'hunyuan-720p-cdf.dat' using 2:1 with lines lw 2 title 'latency, disaggregated', 'hunyuan-720p-cdf.dat' using 3:1 with lines lw 2 title 'latency, colocated', 'hunyuan-720p-cdf.dat' using 4:1 with lines dt 2 lw 2 title 'TTFF, disaggregated', 'hunyuan-720p-cdf.dat' using 5:1 with lines dt 2 lw 2 title 'TTFF, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'hunyuan-720p-load.png'
set title 'hunyuan-720p: throughput and p99 against offered load'
set xlabel 'offered jobs/s'
set ylabel 'completed jobs/s'
set y2label 'p99 seconds (log)'
set logscale y2
set y2tics
set key top left
plot 'hunyuan-720p-load.dat' using 2:3 with linespoints lw 2 title 'jobs/s, disaggregated', 'hunyuan-720p-load.dat' using 2:4 with linespoints lw 2 title 'jobs/s, colocated', 'hunyuan-720p-load.dat' using 2:5 axes x1y2 with linespoints dt 2 title 'p99, disaggregated', 'hunyuan-720p-load.dat' using 2:6 axes x1y2 with linespoints dt 2 title 'p99, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'hunyuan-720p-nm.png'
set title 'hunyuan-720p: SLO attainment against N:M at equal GPUs'
set xlabel 'denoise GPUs per decode GPU (N:M, log)'
set logscale x
set ylabel 'share of jobs within the SLO'
set yrange [0:1.05]
plot 'hunyuan-720p-nm.dat' using 2:3 with linespoints lw 2 title 'disaggregated', 'hunyuan-720p-nm.dat' using 2:5 with lines dt 2 lw 2 title 'colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'hunyuan-720p-utilization.png'
set title 'hunyuan-720p: busy share of each pool over time'
set xlabel 'simulated minutes'
set ylabel 'busy slots / slots'
set yrange [0:1.05]
plot 'hunyuan-720p-utilization.dat' using 1:2 with lines lw 2 title 'encode (1)', 'hunyuan-720p-utilization.dat' using 1:3 with lines lw 2 title 'denoise (126)', 'hunyuan-720p-utilization.dat' using 1:4 with lines lw 2 title 'decode (1)', 'hunyuan-720p-utilization.dat' using 1:5 with lines dt 2 lw 2 title 'colocated (128)'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'qwen-image-1024-cdf.png'
set title 'qwen-image-1024: latency and TTFF CDFs at load 0.80'
set xlabel 'seconds'
set ylabel 'share of jobs'
set yrange [0:1]
plot 'qwen-image-1024-cdf.dat' using 2:1 with lines lw 2 title 'latency, disaggregated', 'qwen-image-1024-cdf.dat' using 3:1 with lines lw 2 title 'latency, colocated', 'qwen-image-1024-cdf.dat' using 4:1 with lines dt 2 lw 2 title 'TTFF, disaggregated', 'qwen-image-1024-cdf.dat' using 5:1 with lines dt 2 lw 2 title 'TTFF, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'qwen-image-1024-load.png'
set title 'qwen-image-1024: throughput and p99 against offered load'
set xlabel 'offered jobs/s'
set ylabel 'completed jobs/s'
set y2label 'p99 seconds (log)'
set logscale y2
set y2tics
set key top left
plot 'qwen-image-1024-load.dat' using 2:3 with linespoints lw 2 title 'jobs/s, disaggregated', 'qwen-image-1024-load.dat' using 2:4 with linespoints lw 2 title 'jobs/s, colocated', 'qwen-image-1024-load.dat' using 2:5 axes x1y2 with linespoints dt 2 title 'p99, disaggregated', 'qwen-image-1024-load.dat' using 2:6 axes x1y2 with linespoints dt 2 title 'p99, colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'qwen-image-1024-nm.png'
set title 'qwen-image-1024: SLO attainment against N:M at equal GPUs'
set xlabel 'denoise GPUs per decode GPU (N:M, log)'
set logscale x
set ylabel 'share of jobs within the SLO'
set yrange [0:1.05]
plot 'qwen-image-1024-nm.dat' using 2:3 with linespoints lw 2 title 'disaggregated', 'qwen-image-1024-nm.dat' using 2:5 with lines dt 2 lw 2 title 'colocated'

reset
set terminal pngcairo size 800,480 font 'sans,10'
set datafile missing '?'
set grid
set key bottom right
set output 'qwen-image-1024-utilization.png'
set title 'qwen-image-1024: busy share of each pool over time'
set xlabel 'simulated minutes'
set ylabel 'busy slots / slots'
set yrange [0:1.05]
plot 'qwen-image-1024-utilization.dat' using 1:2 with lines lw 2 title 'encode (1)', 'qwen-image-1024-utilization.dat' using 1:3 with lines lw 2 title 'denoise (61)', 'qwen-image-1024-utilization.dat' using 1:4 with lines lw 2 title 'decode (2)', 'qwen-image-1024-utilization.dat' using 1:5 with lines dt 2 lw 2 title 'colocated (64)'
