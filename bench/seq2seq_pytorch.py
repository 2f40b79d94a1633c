#!/usr/bin/python3
"""The same Seq2Seq-with-attention as attnkit's defaults, in PyTorch (Python), for benchmarks.

Embedding + bidirectional GRU encoder, a bridge to the decoder state, a GRU decoder with input
feeding, Bahdanau attention (keys projected once per sentence), the combine layer
tanh(Linear([state; context])), Adam, gradient clipping, label smoothing, length-bucketed
batches. Decoding is attnkit's search: every sentence starts as one beam, a sentence's beams share
its memory and keys (a reorder moves only each row's state and feed), and a finished sentence
leaves the batch. It reads sentences already tokenised by `attnkit corpus tokenize` and attnkit's
vocabulary files, so both sides see the same ids.

    /usr/bin/python3 bench/seq2seq_pytorch.py train --model-dir DIR --train tok.tsv --seconds 120
    /usr/bin/python3 bench/seq2seq_pytorch.py translate --model-dir DIR --input tok_test.tsv --beam 5 --batch-size 32
"""
import argparse
import concurrent.futures
import json
import math
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

PAD, UNK, SOS, EOS = 0, 1, 2, 3


def read_vocab(path):
    with open(path, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    return tokens, {t: i for i, t in enumerate(tokens)}


def read_pairs(path, src_ids, tgt_ids):
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            s, t = line.rstrip("\n").split("\t")[:2]
            pairs.append(([src_ids.get(w, UNK) for w in s.split()], [tgt_ids.get(w, UNK) for w in t.split()]))
    return pairs


class Seq2Seq(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, embed=128, hidden=256, dropout=0.1):
        super().__init__()
        H, M = hidden, 2 * hidden
        self.hidden = H
        self.src_embedding = nn.Embedding(src_vocab, embed, padding_idx=PAD)
        self.encoder = nn.GRU(embed, H, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(M, H)
        self.tgt_embedding = nn.Embedding(tgt_vocab, embed, padding_idx=PAD)
        self.decoder = nn.GRU(embed + H, H, batch_first=True)
        self.attn = nn.Linear(H + M, H)
        self.v = nn.Linear(H, 1, bias=False)
        self.combine = nn.Linear(H + M, H)
        self.out = nn.Linear(H, tgt_vocab)
        self.drop = nn.Dropout(dropout)

    def encode(self, src, lengths):
        emb = self.drop(self.src_embedding(src))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.encoder(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        B = src.size(0)
        finals = h.view(1, 2, B, self.hidden).permute(0, 2, 1, 3).reshape(1, B, 2 * self.hidden)
        mask = (torch.arange(src.size(1)).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)  # [B,1,S]
        keys = memory @ self.attn.weight[:, self.hidden:].t() + self.attn.bias              # [B,S,H]
        state = torch.tanh(self.bridge(finals))
        feed = torch.zeros(B, 1, self.hidden)
        return [state, feed, self.drop(memory), keys, mask]

    def step(self, tokens, st):
        """One decoder step over rows = sentences x width, sentence-major: hidden and feed have a
        row per hypothesis, memory, keys and mask one per sentence (shared by its beams)."""
        hidden, feed, memory, keys, mask = st
        N, A = tokens.size(0), memory.size(0)
        x = torch.cat([self.drop(self.tgt_embedding(tokens.view(-1, 1))), feed], -1)
        out, hidden = self.decoder(x, hidden)                                               # [N,1,H]
        out = out.view(A, N // A, self.hidden)                                              # [A,W,H]
        q = out @ self.attn.weight[:, : self.hidden].t()                                    # [A,W,H]
        e = torch.tanh(q.unsqueeze(2) + keys.unsqueeze(1))                                  # [A,W,S,H]
        scores = (e @ self.v.weight.view(-1)).masked_fill(~mask, torch.finfo(q.dtype).min)  # [A,W,S]
        w = torch.softmax(scores, -1).masked_fill(~mask, 0)
        context = w @ memory                                                                # [A,W,M]
        feed = torch.tanh(self.combine(torch.cat([out, context], -1))).view(N, 1, self.hidden)
        return self.out(self.drop(feed)).squeeze(1), w.view(N, -1), [hidden, feed, memory, keys, mask]


class IncrementalDecoder:
    """The decoder one step at a time over rows = sentences x width, sentence-major: a reorder
    moves each row's state and feed, and a sentence's memory, keys and mask only when sentences
    leave (its beams share them)."""

    def __init__(self, model, src, lengths):
        self.model, self.st = model, model.encode(src, lengths)

    def step(self, tokens):
        logits, _, self.st = self.model.step(tokens, self.st)
        return logits

    def reorder(self, origin, sentences, width):
        hidden, feed, *source = self.st
        if sentences is not None:
            source = [x.index_select(0, sentences) for x in source]
        self.st = [hidden.index_select(1, origin), feed.index_select(0, origin)] + source


def pad(seqs):
    width = max(1, max(len(s) for s in seqs))
    t = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        t[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return t, torch.tensor([len(s) for s in seqs])


def batches(pairs, size, seed, epoch):
    rng = random.Random(seed * 1000003 + epoch)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    pool = size * 50
    out = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: len(pairs[i][0]))
        out += [chunk[i:i + size] for i in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    src_tokens, src_ids = read_vocab(f"{args.vocab_dir}/source.vocab")
    tgt_tokens, tgt_ids = read_vocab(f"{args.vocab_dir}/target.vocab")
    pairs = [p for p in read_pairs(args.train, src_ids, tgt_ids) if p[0] and p[1]]
    model = Seq2Seq(len(src_tokens), len(tgt_tokens), args.embed, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()
    tokens = steps = 0
    start = time.perf_counter()
    epoch = 0
    done = False
    while not done:
        for members in batches(pairs, args.batch_size, args.seed, epoch):
            if time.perf_counter() - start >= args.seconds:
                done = True
                break
            src, lengths = pad([pairs[i][0] for i in members])
            tgt_in, _ = pad([[SOS] + pairs[i][1] for i in members])
            tgt_out, _ = pad([pairs[i][1] + [EOS] for i in members])
            st = model.encode(src, lengths)
            logits = []
            for t in range(tgt_in.size(1)):
                out, _, st = model.step(tgt_in[:, t], st)
                logits.append(out)
            logits = torch.stack(logits, 1)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                                   ignore_index=PAD, label_smoothing=args.label_smoothing)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            steps += 1
            tokens += int((tgt_out != PAD).sum())
        epoch += 1
    elapsed = time.perf_counter() - start
    torch.save(model.state_dict(), f"{args.model_dir}/pytorch_model.pt")
    print(json.dumps({"steps": steps, "seconds": elapsed, "target_tokens_per_s": tokens / elapsed}))


@torch.no_grad()
def search(dec, lengths, beam, max_ratio=2.0, extra=5):
    """Greedy (beam 1) or beam search with length normalisation, as attnkit's, on an incremental
    decoder (step(tokens) -> logits over rows = sentences x width; reorder(origin, sentences or
    None, width)): every sentence starts as one beam, a finished sentence leaves the batch.
    Returns token lists."""
    B = lengths.size(0)
    limits = [math.ceil(max_ratio * int(n)) + extra for n in lengths]
    active = list(range(B))
    width = 1
    seqs = [[[]] for _ in range(B)]  # per sentence, per live beam
    scores = torch.zeros(B, 1)
    finished = [[] for _ in range(B)]
    tokens = torch.full((B,), SOS, dtype=torch.long)
    for t in range(max(limits)):
        logp = torch.log_softmax(dec.step(tokens), -1)  # [A * width, V]
        V = logp.size(-1)
        A = len(active)
        total = (scores.view(A, width, 1) + logp.view(A, width, V)).view(A, width * V)
        k = max(1, beam)
        top, idx = total.topk(min(2 * k, width * V), -1)
        kept, origin, nxt, new_scores, new_active, new_seqs = [], [], [], [], [], []
        for a, b in enumerate(active):
            live, rows, toks, sc, sq = 0, [], [], [], []
            for c in range(top.size(1)):
                s = float(top[a, c])
                if live == k or s == -math.inf:
                    break
                origin_beam, tok = divmod(int(idx[a, c]), V)
                seq = seqs[b][origin_beam] + ([] if tok == EOS else [tok])
                if tok == EOS or t + 1 >= limits[b]:
                    finished[b].append((s / (len(seq) + 1), seq))
                    if beam == 1:
                        break
                    continue
                rows.append(a * width + origin_beam)
                toks.append(tok)
                sc.append(s)
                sq.append(seq)
                live += 1
            if len(finished[b]) >= k or live == 0:
                continue
            while live < k:  # dead beams pad the sentence to k rows
                rows.append(a * width)
                toks.append(PAD)
                sc.append(-math.inf)
                sq.append([])
                live += 1
            kept.append(a)
            new_active.append(b)
            origin += rows
            nxt += toks
            new_scores += sc
            new_seqs.append((b, sq))
        if not new_active:
            break
        for b, sq in new_seqs:
            seqs[b] = sq
        left = len(new_active) != A
        dec.reorder(torch.tensor(origin), torch.tensor(kept) if left else None, k)
        active, width = new_active, k
        scores = torch.tensor(new_scores)
        tokens = torch.tensor(nxt)
    return [max(f)[1] if f else [] for f in finished]


def detokenize_zh(tokens):
    """attnkit's zh detokenizer: concatenate, with a space between two ASCII words."""
    out, prev_word = "", False
    for t in tokens:
        word = t[:1].isascii() and t[:1].isalnum() or t.startswith("%")
        if prev_word and word:
            out += " "
        out += t
        prev_word = word
    return out


# attnkit's parameter names (`attnkit export`) -> this model's, prefix by prefix.
ATTNKIT_NAMES = [("decoder.attention.score.linear.", "attn."), ("decoder.attention.score.v.", "v."),
                 ("decoder.combine.", "combine."), ("decoder.embedding.", "tgt_embedding."),
                 ("decoder.gru.", "decoder."), ("decoder.output.", "out."),
                 ("encoder.bridge.", "bridge."), ("encoder.embedding.", "src_embedding."),
                 ("encoder.gru.", "encoder.")]


def from_attnkit(state):
    """attnkit's exported weights under this model's names (the same tensors, the same math)."""
    renamed = {}
    for name, tensor in state.items():
        prefix, ours = next((p, o) for p, o in ATTNKIT_NAMES if name.startswith(p))
        renamed[ours + name[len(prefix):]] = tensor
    return renamed


def translate(args):
    torch.set_num_threads(args.threads)
    src_tokens, src_ids = read_vocab(f"{args.vocab_dir}/source.vocab")
    tgt_tokens, tgt_ids = read_vocab(f"{args.vocab_dir}/target.vocab")
    model = Seq2Seq(len(src_tokens), len(tgt_tokens), args.embed, args.hidden)
    # --weights: attnkit's own weights (`attnkit export`), so both sides decode the same model and
    # step the same rows.
    model.load_state_dict(from_attnkit(torch.load(args.weights)) if args.weights
                          else torch.load(f"{args.model_dir}/pytorch_model.pt"))
    model.eval()
    translate_file(args, lambda src, lengths: search(IncrementalDecoder(model, src, lengths), lengths,
                                                      args.beam), src_ids,
                   tgt_tokens, tgt_ids)


def translate_file(args, search_batch, src_ids, tgt_tokens, tgt_ids):
    """Translates args.input in length-sorted batches of args.batch_size (args.parallel_batches
    at once on Python threads) with search_batch(src, lengths) -> token lists; writes
    args.output and prints the speed as JSON."""
    pairs = read_pairs(args.input, src_ids, tgt_ids)
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    results = [None] * len(pairs)

    def translate_batch(members):
        src, lengths = pad([pairs[i][0] or [UNK] for i in members])
        for i, out in zip(members, search_batch(src, lengths)):
            results[i] = detokenize_zh([tgt_tokens[t] for t in out])

    batches_ = [order[s:s + args.batch_size] for s in range(0, len(order), args.batch_size)]
    start = time.perf_counter()
    if args.parallel_batches > 1:  # PyTorch's ops release the GIL, so Python threads overlap
        with concurrent.futures.ThreadPoolExecutor(args.parallel_batches) as pool:
            list(pool.map(translate_batch, batches_))
    else:
        for members in batches_:
            translate_batch(members)
    elapsed = time.perf_counter() - start
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(results) + "\n")
    print(json.dumps({"sentences": len(pairs), "seconds": elapsed, "sentences_per_s": len(pairs) / elapsed}))


def apply_thread_policy(args):
    """Gives the threads to OpenBLAS or to PyTorch's intra-op pool (args.threads is then what
    PyTorch gets): OpenMP and OpenBLAS both busy-wait, so only one may have more than one."""
    import ctypes
    blas = ctypes.CDLL("libblas.so.3")
    if args.parallel_batches > 1:
        blas.openblas_set_num_threads(1)
        args.threads = 1
    elif args.thread_policy == "blas":
        blas.openblas_set_num_threads(args.threads)
        args.threads = 1
    else:
        blas.openblas_set_num_threads(1)


def common_arguments(doc):
    """The options every PyTorch benchmark script takes: data, training recipe, threads."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["train", "translate"])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--vocab-dir", required=True, help="an attnkit model dir with source/target.vocab")
    ap.add_argument("--train")
    ap.add_argument("--input")
    ap.add_argument("--output")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--parallel-batches", type=int, default=1,
                    help="translate this many batches at once on Python threads, each with one "
                         "thread for PyTorch and OpenBLAS (as attnkit's --parallel-batches)")
    ap.add_argument("--thread-policy", choices=["intra-op", "blas"], default="blas",
                    help="which pool gets the threads: PyTorch's intra-op pool (OpenBLAS at 1) or "
                         "OpenBLAS (PyTorch ops at 1), as attnkit's ThreadPolicy")
    return ap


def main():
    ap = common_arguments(__doc__)
    ap.add_argument("--weights", help="translate: attnkit's exported weights (`attnkit export`) "
                                      "instead of the trained pytorch_model.pt")
    ap.add_argument("--embed", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()
    apply_thread_policy(args)
    train(args) if args.command == "train" else translate(args)


if __name__ == "__main__":
    sys.exit(main())
