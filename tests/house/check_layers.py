#!/usr/bin/python3
"""The folders are the architecture: each file may include only its own folder's headers and
those of folders below it. A lower folder that includes a higher one (a kernel that knows a
model, a model that knows the translator) fails this check, with the file and line.
Run: /usr/bin/python3 tests/house/check_layers.py [SOURCE_DIR]
"""
import os
import re
import sys

# Bottom up. A folder may include the folders of lower rank; folders of one rank are peers and
# may not include each other (the GRU model does not know the Transformer).
LAYERS = [
    ["core"],                         # errors, files, processes, threads, BLAS detection
    ["kernels"],                      # fused CPU kernels and their dispatch
    ["io", "attention", "viz"],       # torch.save files and weights; the attention layers; pictures
    ["data"],                         # corpora, catalogs, tokenizers, vocabularies
    ["eval", "decoding"],             # metrics; the search over any model's StepDecoder
    ["train"],                        # the training loop over any model's Trainable
    ["rnn", "transformer"],           # the two models, each with its decoder, trainable, model
    ["translate"],                    # model directory, registry, translator
    ["po"],                           # gettext pre-translation
    ["serve"],                        # the HTTP server
]
RANK = {folder: r for r, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s*"(?:attnkit/|\.\./)([a-z_0-9]+)/')


def folder_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "include" and len(rel) > 3:
        return rel[2]
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems, files = [], 0
    for top in ("include/attnkit", "src"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                own = folder_of(root, path)
                if own is None:
                    continue
                files += 1
                if own not in RANK:
                    problems.append(f"{os.path.relpath(path, root)}: folder '{own}' has no layer "
                                    "in tests/house/check_layers.py")
                    continue
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == own:
                            continue
                        other = m.group(1)
                        if other not in RANK:
                            continue  # the generated version header and the like
                        if RANK[other] >= RANK[own]:
                            problems.append(
                                f"{os.path.relpath(path, root)}:{n}: {own}/ includes {other}/, "
                                f"which is {'a peer' if RANK[other] == RANK[own] else 'above it'}")
    for p in problems:
        print(p)
    print(f"{files} files, {len(problems)} includes against the layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
