#!/usr/bin/env bash
# make demo: the notes' examples, then attnkit's main job on its built-in default corpus:
# English -> Chinese from the machine's gettext catalogs, trained in a few minutes of CPU time.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/attnkit
OUT=${DEMO_DIR:-out/demo}
SECONDS_BUDGET=${DEMO_SECONDS:-180}
mkdir -p "$OUT"

step() { printf '\n== %s\n' "$*"; }

step "the machine"
"$BIN" info

step "1. the course notes' worked examples"
"$BIN" attend

step "2. a parallel corpus from the gettext catalogs (English -> zh_CN)"
if ! "$BIN" corpus gettext --lang zh_CN --out "$OUT/corpus.tsv"; then
  echo "no zh_CN catalogs on this machine; using the sample shipped in data/"
  cp data/en-zh_CN.sample.tsv "$OUT/corpus.tsv"
fi
"$BIN" corpus prepare "$OUT/corpus.tsv" --out-dir "$OUT/data" --max-len 12 \
  --source-tokenizer en-lower --target-tokenizer zh --valid 0.03 --test 0.03

step "3. training Seq2Seq with additive (Bahdanau) attention for ${SECONDS_BUDGET} s"
rm -rf "$OUT/model"  # each demo trains a new model (train refuses to overwrite one)
"$BIN" train --train "$OUT/data/train.tsv" --valid "$OUT/data/valid.tsv" --model-dir "$OUT/model" \
  --source-tokenizer en-lower --target-tokenizer zh --source-lang en --target-lang zh_CN \
  --min-freq 2 --time-limit "$SECONDS_BUDGET" --epochs 30 --valid-bleu-sentences 300

step "4. held-out test set: BLEU, chrF, and translations with their strongest alignments"
"$BIN" eval --model "$OUT/model" --test "$OUT/data/test.tsv" --beam 5 --examples 4

step "done"
echo "The model is in $OUT/model. Try:"
echo "  echo 'Open the file' | $BIN translate --model $OUT/model"
echo "  $BIN translate --model $OUT/model --format json < sentences.txt"
