#!/usr/bin/python3
"""Writes the golden fixtures in tests/golden/ from PyTorch (Debian's python3-torch).

Run with /usr/bin/python3 (the interpreter python3-torch installs for):
    /usr/bin/python3 scripts/make_golden.py [FIXTURE...]   # e.g. transformer; none: all
Every fixture is a torch.save'd dict of tensors: inputs, parameters, outputs, and the gradient of
L = sum(output * r_out) + sum(weights * r_w) with respect to every input and parameter.
"""
import collections
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnkit_reference as ref  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden")


def with_grads(prefix, module, inputs, run):
    """Runs `run`, backpropagates a random projection of its outputs, returns a flat dict."""
    out = collections.OrderedDict()
    for name, t in inputs.items():
        out[prefix + name] = t.detach().clone()
        if t.is_floating_point():
            t.requires_grad_(True)
    output, weights = run()
    r_out, r_w = torch.randn_like(output), torch.randn_like(weights)
    ((output * r_out).sum() + (weights * r_w).sum()).backward()
    out[prefix + "r_out"], out[prefix + "r_w"] = r_out, r_w
    out[prefix + "output"], out[prefix + "weights"] = output.detach(), weights.detach()
    for name, t in inputs.items():
        if t.is_floating_point():
            out[prefix + "grad." + name] = t.grad.detach().clone()
    if module is not None:
        for name, p in module.named_parameters():
            out[prefix + "param." + name] = p.detach().clone()
            out[prefix + "grad." + name] = p.grad.detach().clone()
    return out


def attention_cases():
    fixtures = collections.OrderedDict()
    B, Tq, Tk, D, Dv, H = 2, 3, 5, 4, 3, 6
    for case, (score, weighting) in enumerate(
            (s, w) for s in ref.SCORES for w in ref.WEIGHTINGS):
        torch.manual_seed(100 + case)
        module = ref.RefAttention(score, weighting, D, D, hidden=H, window=2, temperature=0.7)
        q, k, v = torch.randn(B, Tq, D), torch.randn(B, Tk, D), torch.randn(B, Tk, Dv)
        lengths = torch.tensor([Tk, 3])
        mask = ref.padding_mask(lengths, Tk)
        inputs = collections.OrderedDict(q=q, k=k, v=v, lengths=lengths)
        prefix = f"{score}/{weighting}/"
        if weighting == "gumbel":
            # attnkit draws the noise from the default generator right before use; so does
            # this, after the same seed, so the C++ module can be checked end to end.
            with torch.no_grad():
                scores_shape = module.score(q, k).shape
            torch.manual_seed(1234)
            noise = ref.gumbel_noise_like(torch.empty(scores_shape))
            fixtures[prefix + "noise"] = noise
            fixtures.update(with_grads(prefix, module, inputs,
                                       lambda: module(q, k, v, mask, noise)))
        else:
            fixtures.update(with_grads(prefix, module, inputs, lambda: module(q, k, v, mask)))
    return fixtures


def multihead_cases():
    torch.manual_seed(7)
    E, heads = 8, 2
    mha = nn.MultiheadAttention(E, heads, batch_first=True)
    with torch.no_grad():  # nonzero biases, so a wrong bias path shows
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    torch.save(mha.state_dict(), os.path.join(OUT, "multihead_state.pt"))
    fixtures = collections.OrderedDict()
    q, k, v = torch.randn(2, 3, E), torch.randn(2, 5, E), torch.randn(2, 5, E)
    lengths = torch.tensor([5, 3])
    kpm = ~ref.padding_mask(lengths, 5).squeeze(1)  # PyTorch: True = padding

    def cross():
        return mha(q, k, v, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)

    fixtures.update(with_grads("cross/", mha, collections.OrderedDict(q=q, k=k, v=v, lengths=lengths), cross))
    mha.zero_grad()
    x = torch.randn(2, 4, E)
    lengths = torch.tensor([4, 3])
    causal = torch.ones(4, 4, dtype=torch.bool).triu(1)  # PyTorch: True = not allowed
    kpm = ~ref.padding_mask(lengths, 4).squeeze(1)

    def causal_self():
        return mha(x, x, x, key_padding_mask=kpm, attn_mask=causal, need_weights=True,
                   average_attn_weights=False)

    fixtures.update(with_grads("causal/", mha, collections.OrderedDict(x=x, lengths=lengths), causal_self))
    return fixtures


def self_attention_cases():
    torch.manual_seed(11)
    module = ref.RefSelfAttention(6)
    x = torch.randn(2, 4, 6)
    lengths = torch.tensor([4, 2])
    mask = ref.padding_mask(lengths, 4)
    return with_grads("projected/", module, collections.OrderedDict(x=x, lengths=lengths),
                      lambda: module(x, mask))


def notes_cases():
    Q = torch.tensor([[1.0, 0.0, 0.0]])
    K = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    V = K.clone()
    X = K.clone()
    fixtures = collections.OrderedDict(Q=Q, K=K, V=V, X=X)
    for name, fn in [("soft", lambda: ref.notes_soft_attention(Q, K, V)),
                     ("hard", lambda: ref.notes_hard_attention(Q, K, V)),
                     ("self", lambda: ref.notes_self_attention(X))]:
        output, weights = fn()
        fixtures[name + ".output"], fixtures[name + ".weights"] = output, weights

    # The second note's MyAttn on its own example shapes: Q [2,1,8], K = V [2,5,8].
    for name, cls, out_size in [("myattn", ref.MyAttn, 8), ("myattn_out5", ref.MyAttnFixed, 5)]:
        torch.manual_seed(0)
        model = cls(q_size=8, k_size=8, c_size=8, output_size=out_size)
        torch.save(model.state_dict(), os.path.join(OUT, f"notes_{name}_state.pt"))
        q, k, v = torch.randn(2, 1, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
        fixtures.update(with_grads(name + "/", model, collections.OrderedDict(q=q, k=k, v=v),
                                   lambda: model(q, k, v)))
    return fixtures


TRANSFORMER_CASES = [  # (name, norm_first, activation)
    ("prenorm_relu", True, "relu"), ("postnorm_relu", False, "relu"), ("prenorm_gelu", True, "gelu")]


def transformer_cases():
    """torch.nn.Transformer (batch_first, dropout off) with padding and causal masks, and
    attnkit's translation model around it (RefTransformerModel): outputs and the gradient of
    sum(output * r_out) for every input and parameter."""
    fixtures = collections.OrderedDict()
    B, S, T, D, heads, ffn = 3, 5, 4, 8, 2, 16
    lengths = torch.tensor([5, 3, 1])
    for case, (name, norm_first, activation) in enumerate(TRANSFORMER_CASES):
        torch.manual_seed(300 + case)
        model = nn.Transformer(D, heads, 2, 2, ffn, dropout=0.0, activation=activation,
                               batch_first=True, norm_first=norm_first)
        with torch.no_grad():  # nonzero biases and norms, so a wrong path shows
            for pname, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        src, tgt = torch.randn(B, S, D, requires_grad=True), torch.randn(B, T, D, requires_grad=True)
        padding = torch.arange(S)[None, :] >= lengths[:, None]
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        out = model(src, tgt, tgt_mask=causal, src_key_padding_mask=padding,
                    memory_key_padding_mask=padding)
        r_out = torch.randn_like(out)
        (out * r_out).sum().backward()
        prefix = f"nn/{name}/"
        fixtures.update({prefix + "src": src.detach(), prefix + "tgt": tgt.detach(),
                         prefix + "lengths": lengths, prefix + "output": out.detach(),
                         prefix + "r_out": r_out, prefix + "grad.src": src.grad,
                         prefix + "grad.tgt": tgt.grad})
        for pname, p in model.named_parameters():
            fixtures[prefix + "param." + pname] = p.detach().clone()
            fixtures[prefix + "grad." + pname] = p.grad.clone()

    torch.manual_seed(400)
    V_src, V_tgt = 11, 13
    model = ref.RefTransformerModel(V_src, V_tgt, d_model=D, heads=heads, encoder_layers=2,
                                    decoder_layers=2, ffn=ffn, dropout=0.0)
    source = torch.randint(4, V_src, (B, S))
    source[1, 3:] = 0
    source[2, 1:] = 0
    target_in = torch.randint(4, V_tgt, (B, T))
    target_in[:, 0] = 1  # <sos>
    logits = model(source, lengths, target_in)
    r_out = torch.randn_like(logits)
    (logits * r_out).sum().backward()
    prefix = "model/"
    fixtures.update({prefix + "source": source, prefix + "lengths": lengths,
                     prefix + "target_in": target_in, prefix + "logits": logits.detach(),
                     prefix + "r_out": r_out})
    for pname, p in model.named_parameters():
        fixtures[prefix + "param." + pname] = p.detach().clone()
        fixtures[prefix + "grad." + pname] = p.grad.clone()
    return fixtures


def main():
    os.makedirs(OUT, exist_ok=True)
    wanted = set(sys.argv[1:])  # e.g. "transformer": only that fixture file
    for name, make in [("attention_cases", attention_cases), ("multihead", multihead_cases),
                       ("self_attention", self_attention_cases), ("notes", notes_cases),
                       ("transformer", transformer_cases)]:
        if wanted and name not in wanted:
            continue
        fixtures = make()
        torch.save(dict(fixtures), os.path.join(OUT, name + ".pt"))
        print(f"{name}.pt: {len(fixtures)} tensors")


if __name__ == "__main__":
    main()
