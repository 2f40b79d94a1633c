"""PyTorch reference implementations of attnkit's mechanisms.

Written the straightforward way (the notes' concat-then-Linear, explicit masks), so they serve
as the ground truth for the golden fixtures (scripts/make_golden.py) and as the PyTorch side of
the benchmarks (bench/compare_pytorch.py). Module and parameter names mirror attnkit's, so a
state_dict saved from these loads into the C++ modules unchanged.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SCORES = ["concat", "additive", "bahdanau", "scaled-dot", "dot", "general"]
WEIGHTINGS = ["soft", "hard", "gumbel", "local"]


# ---- the notes' code (course note 1), verbatim but for the prints ----

def notes_soft_attention(Q, K, V):
    scores = torch.matmul(Q, K.T)
    weights = F.softmax(scores, dim=-1)
    output = torch.matmul(weights, V)
    return output, weights


def notes_hard_attention(Q, K, V):
    scores = torch.matmul(Q, K.T)
    max_idx = torch.argmax(scores, dim=-1)
    weights = F.one_hot(max_idx, num_classes=K.size(0)).float()
    output = torch.matmul(weights, V)
    return output, weights


def notes_self_attention(X):
    Q = K = V = X
    scores = torch.matmul(Q, K.T)
    weights = F.softmax(scores / (K.size(-1) ** 0.5), dim=-1)
    output = torch.matmul(weights, V)
    return output, weights


# ---- the notes' MyAttn (course note 2), verbatim but for the prints ----

class MyAttn(nn.Module):
    def __init__(self, q_size, k_size, c_size, output_size):
        super().__init__()
        self.q_size = q_size
        self.k_size = k_size
        self.c_size = c_size
        self.output_size = output_size
        self.qk_linear = nn.Linear(in_features=self.q_size + self.k_size, out_features=1)
        self.qc_linear = nn.Linear(in_features=self.q_size + self.c_size, out_features=self.c_size)

    def forward(self, Q, K, V):
        seq_len = K.shape[-2]
        Q_expand = Q.expand(size=(-1, seq_len, -1))
        qk_cat = torch.cat((Q_expand, K), dim=-1)
        qk_cat_score = self.qk_linear(qk_cat)
        qk_cat_score = qk_cat_score.transpose(dim0=1, dim1=2)
        weighted_mat = torch.softmax(qk_cat_score, dim=-1)
        C = torch.bmm(weighted_mat, V)
        qc_cat = torch.cat((Q, C), dim=-1)
        qc_cat_score = self.qc_linear(qc_cat)
        return qc_cat_score, weighted_mat


class MyAttnFixed(MyAttn):
    """The documented intent: qc_linear maps to output_size (the notes' code uses c_size)."""

    def __init__(self, q_size, k_size, c_size, output_size):
        super().__init__(q_size, k_size, c_size, output_size)
        self.qc_linear = nn.Linear(q_size + c_size, output_size)


# ---- scores: [B, Tq, Dq] x [B, Tk, Dk] -> [B, Tq, Tk] ----

def pairs(q, k):
    """[B, Tq, Tk, Dq + Dk]: every query concatenated with every key (the notes' expand + cat)."""
    B, Tq, Dq = q.shape
    Tk, Dk = k.shape[1], k.shape[2]
    return torch.cat([q.unsqueeze(2).expand(B, Tq, Tk, Dq), k.unsqueeze(1).expand(B, Tq, Tk, Dk)], -1)


class RefScore(nn.Module):
    def __init__(self, kind, q_size, k_size, hidden=0):
        super().__init__()
        self.kind = kind
        h = hidden or k_size
        if kind == "concat":
            self.linear = nn.Linear(q_size + k_size, 1)
        elif kind in ("additive", "bahdanau"):
            self.linear = nn.Linear(q_size + k_size, h)
            if kind == "bahdanau":
                self.v = nn.Linear(h, 1, bias=False)
        elif kind == "general":
            self.linear = nn.Linear(k_size, q_size, bias=False)

    def forward(self, q, k):
        if self.kind == "concat":
            return self.linear(pairs(q, k)).squeeze(-1)
        if self.kind == "additive":
            return torch.tanh(self.linear(pairs(q, k))).sum(-1)
        if self.kind == "bahdanau":
            return self.v(torch.tanh(self.linear(pairs(q, k)))).squeeze(-1)
        if self.kind == "general":
            return q @ self.linear(k).transpose(1, 2)
        if self.kind == "dot":
            return q @ k.transpose(1, 2)
        if self.kind == "scaled-dot":
            return q @ k.transpose(1, 2) / math.sqrt(k.shape[-1])
        raise ValueError(self.kind)


# ---- weightings ----

def soft_weights(scores, mask=None):
    if mask is None:
        return torch.softmax(scores, -1)
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    return w.masked_fill(~mask, 0.0)


def straight_through(y_soft):
    index = y_soft.argmax(-1, keepdim=True)
    y_hard = torch.zeros_like(y_soft).scatter_(-1, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def gumbel_noise_like(scores):
    return -torch.empty_like(scores).exponential_().log()


def local_weights(scores, centres, window, mask=None):
    Tk = scores.shape[-1]
    offset = torch.arange(Tk, dtype=scores.dtype) - centres.unsqueeze(-1)
    keep = offset.detach().abs() <= window
    if mask is not None:
        keep = keep & mask
    sigma = window / 2.0
    return soft_weights(scores, keep) * torch.exp(-offset ** 2 / (2 * sigma * sigma))


class RefLocalPosition(nn.Module):
    def __init__(self, q_size, hidden):
        super().__init__()
        self.w_p = nn.Linear(q_size, hidden, bias=False)
        self.v_p = nn.Linear(hidden, 1, bias=False)

    def forward(self, q, lengths):
        return (lengths - 1).clamp_min(0) * torch.sigmoid(self.v_p(torch.tanh(self.w_p(q)))).squeeze(-1)


class RefAttention(nn.Module):
    """Any score with any weighting; gumbel noise is drawn right before use, as attnkit does."""

    def __init__(self, score, weighting, q_size, k_size, hidden=0, window=4, temperature=1.0):
        super().__init__()
        self.weighting = weighting
        self.window = window
        self.temperature = temperature
        self.score = RefScore(score, q_size, k_size, hidden)
        if weighting == "local":
            self.local = RefLocalPosition(q_size, hidden or k_size)

    def forward(self, q, k, v, mask=None, noise=None):
        scores = self.score(q, k)
        B, Tq, Tk = scores.shape
        if self.weighting == "soft":
            w = soft_weights(scores, mask)
        elif self.weighting == "hard":
            w = straight_through(soft_weights(scores, mask))
        elif self.weighting == "gumbel":
            if noise is None:
                noise = gumbel_noise_like(scores)
            w = straight_through(soft_weights((scores + noise) / self.temperature, mask))
        elif self.weighting == "local":
            m = mask if mask is not None else torch.ones(B, 1, Tk, dtype=torch.bool)
            lengths = m.expand(B, Tq, Tk).sum(-1).to(q.dtype)
            w = local_weights(scores, self.local(q, lengths), self.window, mask)
        else:
            raise ValueError(self.weighting)
        return w @ v, w


def padding_mask(lengths, max_len):
    return (torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)


class RefSelfAttention(nn.Module):
    def __init__(self, e):
        super().__init__()
        self.w_q = nn.Linear(e, e)
        self.w_k = nn.Linear(e, e)
        self.w_v = nn.Linear(e, e)

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        w = soft_weights(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), mask)
        return w @ v, w


def sinusoidal_positions(length, d, offset=0):
    """Vaswani et al.'s position encodings: [length, d], sin on even columns, cos on odd."""
    position = torch.arange(offset, offset + length, dtype=torch.float64).unsqueeze(1)
    angle = position * torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    table = torch.zeros(length, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)[:, : d // 2]
    return table.float()


class RefTransformerModel(nn.Module):
    """attnkit's Transformer translation model (transformer/model.h) in PyTorch: embeddings scaled
    by sqrt(d) plus sinusoidal positions, torch.nn.Transformer (batch_first), and an output layer
    tied to the target embedding. Parameter names match attnkit's, so state_dicts move both ways."""

    def __init__(self, source_vocab, target_vocab, d_model=256, heads=4, encoder_layers=3,
                 decoder_layers=3, ffn=1024, dropout=0.1, activation="relu", norm_first=True):
        super().__init__()
        self.d_model = d_model
        self.target_embedding = nn.Embedding(target_vocab, d_model, padding_idx=0)
        self.source_embedding = nn.Embedding(source_vocab, d_model, padding_idx=0)
        self.transformer = nn.Transformer(d_model, heads, encoder_layers, decoder_layers, ffn,
                                          dropout=dropout, activation=activation,
                                          batch_first=True, norm_first=norm_first)
        self.output_bias = nn.Parameter(torch.zeros(target_vocab))
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("positions", sinusoidal_positions(1024, d_model), persistent=False)

    def embed(self, embedding, tokens, offset=0):
        x = embedding(tokens) * math.sqrt(self.d_model)
        return self.dropout(x + self.positions[offset:offset + tokens.shape[1]])

    def encode(self, source, lengths):
        padding = torch.arange(source.shape[1])[None, :] >= lengths[:, None]  # True = padding
        memory = self.transformer.encoder(self.embed(self.source_embedding, source),
                                          src_key_padding_mask=padding)
        return memory, padding

    def decode(self, target_in, memory, padding):
        t = target_in.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)  # True = not allowed
        h = self.transformer.decoder(self.embed(self.target_embedding, target_in), memory,
                                     tgt_mask=causal, memory_key_padding_mask=padding)
        return F.linear(h, self.target_embedding.weight, self.output_bias)

    def forward(self, source, lengths, target_in):
        memory, padding = self.encode(source, lengths)
        return self.decode(target_in, memory, padding)
