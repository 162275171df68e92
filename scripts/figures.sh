#!/usr/bin/env bash
# Regenerates docs/figures/*.png (like Figures 1-4 of Kedia et al. 2024) from
# the CSV output of `sigprop table`. Needs gnuplot (Debian: gnuplot-nox).
#   bash scripts/figures.sh [LAYERS]      (default 192)
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-192}
command -v gnuplot >/dev/null || {
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gnuplot-nox >/dev/null
}
build=${SIGPROP_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target sigprop_cli >/dev/null
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
models=("pre-ln xavier" "post-ln xavier" "pre-ln dslm" "post-ln dslm" "pre-ln dslm-simple" "llama xavier" "llama dslm")
for m in "${models[@]}"; do
  set -- $m
  "$build/cli/sigprop" table --arch "$1" --scheme "$2" --layers "$layers" --format csv > "$data/$1-$2.csv"
done
mkdir -p docs/figures
plot() {  # plot FILE TITLE COLUMN YLABEL LOGSCALE
  local file=$1 title=$2 column=$3 ylabel=$4 scale=$5 series="" arch scheme
  for m in "${models[@]}"; do
    read -r arch scheme <<<"$m"
    series+="'$data/$arch-$scheme.csv' using 1:$column with lines lw 2 title '$arch $scheme', "
  done
  gnuplot <<GP
set datafile separator ','
set terminal pngcairo size 900,560 font 'sans,11'
set output 'docs/figures/$file'
set title '$title ($layers layers, d = 768, 12 heads, L = 256)'
set xlabel 'layer n'
set ylabel '$ylabel'
set key outside right
set grid
set format y '%g'
$scale
plot $series
GP
}
plot forward_var.png "Forward variance of the residual stream" 2 "Var[x_n]" "set logscale y"
plot grad_var.png "Gradient variance w.r.t. the residual stream" 4 "Var[dL/dx_n]" "set logscale y"
plot corr_len.png "Length correlation of the residual stream" 3 "r^l_n" ""
plot grad_corr_len.png "Length correlation of the gradient" 5 "r^l_g,n" ""
echo "wrote docs/figures/{forward_var,grad_var,corr_len,grad_corr_len}.png"
