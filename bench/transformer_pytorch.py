#!/usr/bin/python3
"""attnkit's Transformer translation model in PyTorch (Python), for benchmarks.

torch.nn.Transformer (batch_first, pre-norm by default) with the embeddings, sinusoids and tied
output layer of attnkit's model (scripts/attnkit_reference.py: RefTransformerModel, whose
parameter names are attnkit's), trained as attnkit trains it (Adam, inverse-square-root warm-up,
clipping, label smoothing, length-bucketed batches), and decoded incrementally: each decoder
layer keeps its self-attention keys and values, the source keys and values are computed once per
sentence and shared by its beams, and the search is attnkit's (greedy, or beam search with length
normalisation, finished sentences leaving the batch). It reads attnkit's tokens and vocabularies,
so both sides see the same ids.

    /usr/bin/python3 bench/transformer_pytorch.py train --model-dir DIR --vocab-dir V --train tok.tsv --seconds 120
    /usr/bin/python3 bench/transformer_pytorch.py translate --model-dir DIR --vocab-dir V --input tok.tsv --beam 5 --batch-size 32
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from attnkit_reference import RefTransformerModel  # noqa: E402
from seq2seq_pytorch import (PAD, SOS, EOS, apply_thread_policy, batches, common_arguments,  # noqa: E402
                             pad, read_pairs, read_vocab, search, translate_file)


def make_model(args, src_vocab, tgt_vocab):
    model = RefTransformerModel(src_vocab, tgt_vocab, d_model=args.d_model, heads=args.heads,
                                encoder_layers=args.layers, decoder_layers=args.layers, ffn=args.ffn,
                                dropout=args.dropout, norm_first=True)
    for module in model.modules():  # attnkit's default: no dropout on attention weights
        if isinstance(module, nn.MultiheadAttention):
            module.dropout = args.attention_dropout
    # attnkit's initialisation (TransformerModelImpl::reset_parameters; nn.Transformer already
    # draws its own weights as attnkit does): embeddings N(0, 1/d_model), the padding row zero.
    # nn.Embedding's N(0, 1), times sqrt(d_model), drowned the sinusoids, and after 60 s of
    # training this model still repeated one token (test BLEU 0.0 against attnkit's 24).
    with torch.no_grad():
        for embedding in (model.source_embedding, model.target_embedding):
            embedding.weight.normal_(0.0, args.d_model ** -0.5)
            embedding.weight[0].zero_()
    return model


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    src_tokens, src_ids = read_vocab(f"{args.vocab_dir}/source.vocab")
    tgt_tokens, tgt_ids = read_vocab(f"{args.vocab_dir}/target.vocab")
    pairs = [p for p in read_pairs(args.train, src_ids, tgt_ids) if p[0] and p[1]]
    model = make_model(args, len(src_tokens), len(tgt_tokens))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()
    tokens = steps = epoch = 0
    start = time.perf_counter()
    done = False
    while not done:
        for members in batches(pairs, args.batch_size, args.seed, epoch):
            if time.perf_counter() - start >= args.seconds:
                done = True
                break
            src, lengths = pad([pairs[i][0] for i in members])
            tgt_in, _ = pad([[SOS] + pairs[i][1] for i in members])
            tgt_out, _ = pad([pairs[i][1] + [EOS] for i in members])
            logits = model(src, lengths, tgt_in)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                                   ignore_index=PAD, label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            steps += 1
            for group in opt.param_groups:  # the inverse-square-root warm-up
                group["lr"] = args.lr * min(steps / args.warmup, math.sqrt(args.warmup / steps))
            opt.step()
            tokens += int((tgt_out != PAD).sum())
        epoch += 1
    elapsed = time.perf_counter() - start
    torch.save(model.state_dict(), f"{args.model_dir}/pytorch_transformer.pt")
    print(json.dumps({"steps": steps, "seconds": elapsed, "target_tokens_per_s": tokens / elapsed}))


class IncrementalDecoder:
    """The decoder one position at a time over rows = sentences x width, sentence-major."""

    def __init__(self, model, memory, padding):
        self.model, self.layers = model, model.transformer.decoder.layers
        self.keep = ~padding  # [A, S]
        self.width, self.position = 1, 0
        self.self_kv = [None] * len(self.layers)
        self.memory_kv = []
        for layer in self.layers:  # the source keys and values, once per sentence
            attn, d = layer.multihead_attn, model.d_model
            kv = F.linear(memory, attn.in_proj_weight[d:], attn.in_proj_bias[d:])
            A, S = memory.shape[:2]
            kv = kv.view(A, S, 2, attn.num_heads, d // attn.num_heads).permute(2, 0, 3, 1, 4)
            self.memory_kv.append((kv[0], kv[1]))  # [A, H, S, dh]

    def step(self, tokens):
        m, d = self.model, self.model.d_model
        x = (m.target_embedding(tokens) * math.sqrt(d) + m.positions[self.position]).float()
        N = x.shape[0]
        for i, layer in enumerate(self.layers):
            heads = layer.self_attn.num_heads
            dh = d // heads
            h = layer.norm1(x)
            q, k, v = F.linear(h, layer.self_attn.in_proj_weight, layer.self_attn.in_proj_bias) \
                .view(N, 3, heads, 1, dh).unbind(1)
            if self.self_kv[i] is not None:
                k, v = torch.cat([self.self_kv[i][0], k], 2), torch.cat([self.self_kv[i][1], v], 2)
            self.self_kv[i] = (k, v)
            w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1)
            x = x + layer.self_attn.out_proj((w @ v).reshape(N, d))
            h = layer.norm2(x)
            attn = layer.multihead_attn
            A = N // self.width
            q = F.linear(h, attn.in_proj_weight[:d], attn.in_proj_bias[:d]) \
                .view(A, self.width, heads, dh).transpose(1, 2)  # [A, H, width, dh]
            mk, mv = self.memory_kv[i]
            scores = (q @ mk.transpose(-1, -2)) / math.sqrt(dh)
            scores = scores.masked_fill(~self.keep[:, None, None, :], float("-inf"))
            ctx = (torch.softmax(scores, -1) @ mv).transpose(1, 2).reshape(N, d)
            x = x + attn.out_proj(ctx)
            x = x + layer.linear2(F.relu(layer.linear1(layer.norm3(x))))
        self.position += 1
        x = m.transformer.decoder.norm(x)
        return F.linear(x, m.target_embedding.weight, m.output_bias)

    def reorder(self, origin, sentences, width):
        self.self_kv = [(k.index_select(0, origin), v.index_select(0, origin)) for k, v in self.self_kv]
        if sentences is not None:
            self.memory_kv = [(k.index_select(0, sentences), v.index_select(0, sentences))
                              for k, v in self.memory_kv]
            self.keep = self.keep.index_select(0, sentences)
        self.width = width


def translate(args):
    torch.set_num_threads(args.threads)
    src_tokens, src_ids = read_vocab(f"{args.vocab_dir}/source.vocab")
    tgt_tokens, tgt_ids = read_vocab(f"{args.vocab_dir}/target.vocab")
    model = make_model(args, len(src_tokens), len(tgt_tokens))
    # --weights: attnkit's own weights (`attnkit export`), so both sides decode the same model.
    model.load_state_dict(torch.load(args.weights or f"{args.model_dir}/pytorch_transformer.pt"))
    model.eval()
    translate_file(args, lambda src, lengths: search(IncrementalDecoder(model, *model.encode(src, lengths)),
                                                      lengths, args.beam), src_ids,
                   tgt_tokens, tgt_ids)


def main():
    ap = common_arguments(__doc__)
    ap.add_argument("--weights", help="translate: a state_dict to load instead of the trained one "
                                      "(attnkit export's, whose names are this model's)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attention-dropout", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=1000)
    args = ap.parse_args()
    apply_thread_policy(args)
    train(args) if args.command == "train" else translate(args)


if __name__ == "__main__":
    sys.exit(main())
