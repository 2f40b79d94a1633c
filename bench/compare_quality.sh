#!/usr/bin/env bash
# The Transformer against the GRU model at equal wall-clock, on the same data and tokenizers:
# BLEU and chrF (sacreBLEU's zh tokenizer) on the in-domain test split and on whole packages'
# catalogs that training never saw. Writes out/quality/results.md (docs/translation.md has the
# table).
#
#   bench/compare_quality.sh [MINUTES] [THREADS_EACH] [PARALLEL]
#
# PARALLEL=1 trains both models at once with THREADS_EACH threads each (equal shares of the
# machine for the same wall-clock time, in half the time); PARALLEL=0 one after the other.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-10}
THREADS=${2:-1}
PARALLEL=${3:-1}
BIN=${BUILD_DIR:-build}/attnkit
Q=out/quality
# Held out: whole packages, the shell utilities' catalogs.
HELD="coreutils dpkg findutils grep diffutils bash"

mkdir -p "$Q"
if [ ! -f "$Q/heldout.tsv" ]; then
  rm -rf "$Q/train_root" "$Q/held_root"
  mkdir -p "$Q/train_root/zh_CN/LC_MESSAGES" "$Q/held_root/zh_CN/LC_MESSAGES"
  for f in /usr/share/locale/zh_CN/LC_MESSAGES/*.mo; do
    n=$(basename "$f" .mo)
    if [[ " $HELD " == *" $n "* ]]; then side=held_root; else side=train_root; fi
    ln -s "$f" "$Q/$side/zh_CN/LC_MESSAGES/"
  done
  tok=(--source-tokenizer en-lower --target-tokenizer zh)
  "$BIN" corpus gettext --lang zh_CN --no-system --root "$Q/train_root" --out "$Q/corpus.tsv"
  "$BIN" corpus gettext --lang zh_CN --no-system --root "$Q/held_root" --out "$Q/held_all.tsv"
  "$BIN" corpus prepare "$Q/corpus.tsv" --out-dir "$Q/data" --max-len 12 "${tok[@]}" --valid 0.03 --test 0.03
  "$BIN" corpus prepare "$Q/held_all.tsv" --out-dir "$Q/held" --max-len 12 "${tok[@]}" --valid 0 --test 0
  # Strings that also occur in a training package are not unseen: dropped.
  awk -F'\t' 'NR == FNR { seen[$1] = 1; next } !($1 in seen)' "$Q/corpus.tsv" "$Q/held/train.tsv" \
    > "$Q/heldout.tsv"
fi

train() {  # name, extra options
  local name=$1
  shift
  rm -rf "$Q/$name"
  "$BIN" --threads "$THREADS" train --train "$Q/data/train.tsv" --valid "$Q/data/valid.tsv" \
    --model-dir "$Q/$name" --source-tokenizer en-lower --target-tokenizer zh --min-freq 2 \
    --time-limit $((MINUTES * 60)) --epochs 1000 --early-stop=0 --valid-bleu-sentences 300 --quiet \
    "$@" > "$Q/$name.log" 2>&1
}
if [ "$PARALLEL" = 1 ]; then
  train rnn-${MINUTES}min --arch rnn &
  train transformer-${MINUTES}min --arch transformer &
  wait
else
  train rnn-${MINUTES}min --arch rnn
  train transformer-${MINUTES}min --arch transformer
fi

{
  echo "| model ($MINUTES min, $THREADS thread(s) each) | steps | test BLEU | test chrF | held-out BLEU | held-out chrF |"
  echo "|---|---:|---:|---:|---:|---:|"
  for arch in rnn transformer; do
    name=$arch-${MINUTES}min
    row="| $arch | $(grep -o 'after [0-9]* steps' "$Q/$name.log" | grep -o '[0-9]*')"
    for set in data/test heldout; do
      file=$Q/$set.tsv
      cut -f1 "$file" > "$Q/src.txt"
      cut -f2 "$file" > "$Q/ref.txt"
      "$BIN" --threads 2 translate --model "$Q/$name" --input "$Q/src.txt" --output "$Q/hyp.txt" --beam 5
      scores=$("$BIN" bleu --ref "$Q/ref.txt" --hyp "$Q/hyp.txt" --tokenize zh)
      bleu=$(grep -o 'BLEU = [0-9.]*' <<< "$scores" | grep -o '[0-9.]*$')
      chrf=$(grep -o 'chrF2 = [0-9.]*' <<< "$scores" | grep -o '[0-9.]*$')
      row="$row | $bleu | $chrf"
    done
    echo "$row |"
  done
} | tee "$Q/results-${MINUTES}min.md"
