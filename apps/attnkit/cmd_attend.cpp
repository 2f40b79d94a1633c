// `attnkit attend`: runs the library's mechanisms on tensors saved by Python's torch.save, with
// module weights from a torch.save(module.state_dict()) file, and writes results torch.load reads.

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <iostream>
#include <memory>
#include <string>

#include "attnkit/attention/attention.h"
#include "attnkit/attention/combine.h"
#include "attnkit/attention/mask.h"
#include "attnkit/attention/notes.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/viz/plot.h"
#include "checks.h"
#include "commands.h"
#include "format.h"

namespace attnkit::cli {
namespace {

struct AttendArgs {
  std::string mode;
  std::string q, k, v, x;
  std::string state_dict, lengths, mask, key_padding_mask, out;
  std::string score = "dot", weighting = "soft", hard_gradient = "straight-through";
  int64_t hidden_size = 0, heads = 1, window = 4, output_size = 0;
  double temperature = 1.0;
  bool causal = false, train = false;
  uint64_t seed = 0;
  std::string plot;  // output prefix for heatmaps
};

std::vector<std::string> labels(const std::string& prefix, int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

void write_plots(const std::string& prefix, const std::vector<viz::Heatmap>& panels) {
  viz::render_heatmaps(panels, prefix + ".png");
  viz::render_heatmaps(panels, prefix + ".svg");
  std::string json = "[";
  for (size_t i = 0; i < panels.size(); ++i)
    json += (i ? ",\n" : "") + viz::heatmap_json(panels[i]);
  write_file_atomic(prefix + ".json", json + "]\n");
  std::cout << "wrote " << prefix << ".png, .svg and .json\n";
}

// The notes' examples: Q = [1, 0, 0], K = V = X = I3, and the Attn module on [2,1,8] x [2,5,8].
int run_notes_examples(const std::string& plot) {
  auto q = at::tensor({1.0f, 0.0f, 0.0f}).reshape({1, 3});
  auto eye = at::eye(3);
  std::cout << "attnkit attend: the notes' worked examples\n"
            << "Q = [[1, 0, 0]], K = V = X = I3\n\n";
  auto [soft_out, soft_w] = soft_attention(q, eye, eye);
  std::cout << "soft attention   softmax(Q K^T) V\n  weights " << format_tensor(soft_w)
            << "\n  output  " << format_tensor(soft_out) << "\n";
  auto [hard_out, hard_w] = hard_attention(q, eye, eye);
  std::cout << "hard attention   one_hot(argmax(Q K^T)) V\n  weights " << format_tensor(hard_w)
            << "\n  output  " << format_tensor(hard_out) << "\n";
  auto [self_out, self_w] = self_attention(eye);
  if (!plot.empty()) {
    const std::vector<std::string> words = {"Tom", "chases", "Jerry"};  // the first note's example
    write_plots(plot, {{soft_w, {"汤姆"}, words, "soft: softmax(Q K^T)"},
                       {hard_w, {"汤姆"}, words, "hard: one-hot argmax"},
                       {self_w, words, words, "self: softmax(X X^T / √d)"}});
  }
  std::cout << "self attention   softmax(X X^T / sqrt(3)) X\n  weights " << format_tensor(self_w)
            << "\n  output  " << format_tensor(self_out) << "\n\n";

  at::manual_seed(0);
  AttentionCombine attn(AttentionCombineOptions(8, 8, 8, 8));
  auto Q = at::randn({2, 1, 8}), K = at::randn({2, 5, 8}), V = at::randn({2, 5, 8});
  torch::NoGradGuard no_grad;
  auto result = attn->forward(Q, K, V);
  std::cout << "Attn module (concat score, softmax, C = weights V, Linear([Q; C]))\n"
            << "  Q " << format_shape(Q) << ", K " << format_shape(K) << ", V " << format_shape(V)
            << "  ->  output " << format_shape(result.output) << ", weights "
            << format_shape(result.weights) << "\n"
            << "  weights " << format_tensor(result.weights) << "\n"
            << "  each row sums to " << format_tensor(result.weights.sum(-1).flatten()) << "\n";
  return 0;
}

at::Tensor load_input(const std::string& path, const char* what) {
  if (path.empty()) throw Error(std::string("attend: this mode needs --") + what);
  auto t = io::load_tensor(path);
  if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble)
    throw Error(path + ": " + what +
                " must be float32 or float64 (attend computes in those), got " +
                std::string(c10::toString(t.scalar_type())) +
                (t.is_floating_point() ? "; save it as tensor.float()" : ""));
  if (!at::isfinite(t).all().item<bool>())
    throw Error(path + ": " + what + " holds NaN or infinite values");
  return t;
}

// The attention weights are [B, Tq, Tk]: bounded, so that a query of 50,000 rows attending to
// itself cannot ask for 2.5e9 weights (10 GB) before anything is checked.
void check_size(int64_t batch, int64_t tq, int64_t tk, int64_t heads = 1) {
  constexpr double kMaxWeights = double(1 << 27);
  const double weights = double(batch) * double(tq) * double(tk) * double(heads);
  if (weights > kMaxWeights)
    throw Error("attend: the attention weights would be " + std::to_string(batch) + " x " +
                std::to_string(heads) + " x " + std::to_string(tq) + " x " + std::to_string(tk) +
                " (" + std::to_string(static_cast<long long>(weights)) + " values); the limit is " +
                std::to_string(1 << 27));
}

// A result computed from finite inputs may still overflow.
void check_finite(const at::Tensor& output) {
  if (!at::isfinite(output).all().item<bool>())
    throw Error("attend: the result overflows (the inputs hold values too large to multiply)");
}

// 2-D inputs are one unbatched example; the modules take [B, T, D].
at::Tensor batched(const at::Tensor& t, const std::string& path) {
  if (t.dim() == 2) return t.unsqueeze(0);
  if (t.dim() == 3) return t;
  std::ostringstream shape;
  shape << t.sizes();
  throw Error(path + ": expected a 2-D [T, D] or 3-D [B, T, D] tensor, got shape " + shape.str());
}

at::Tensor build_mask(const AttendArgs& a, int64_t batch, int64_t tq, int64_t tk) {
  at::Tensor mask;
  auto both = [&](const at::Tensor& m) { mask = mask.defined() ? mask.logical_and(m) : m; };
  if (!a.lengths.empty()) both(padding_mask(io::load_tensor(a.lengths), tk));
  if (!a.key_padding_mask.empty()) both(from_key_padding_mask(io::load_tensor(a.key_padding_mask)));
  if (!a.mask.empty()) {
    auto m = io::load_tensor(a.mask).to(at::kBool);
    both(m.dim() == 2 ? m.unsqueeze(1) : m);
  }
  if (a.causal) both(causal_mask(tq, tk));
  return check_mask(mask, batch, tq, tk, "attend");
}

void load_weights(torch::nn::Module& module, const AttendArgs& a,
                  const io::LoadStateDictOptions& base = {}) {
  if (a.state_dict.empty()) {
    if (!io::state_dict(module).empty())
      std::cerr << "attend: no --state-dict; parameters initialised at random (--seed " << a.seed
                << ")\n";
    return;
  }
  auto options = base;
  options.source = a.state_dict;
  io::load_state_dict(module, io::load_tensor_dict(a.state_dict), options);
}

int64_t rows_of(const std::string& state_dict, const std::string& key) {
  for (const auto& [name, t] : io::load_tensor_dict(state_dict))
    if (name == key && t.dim() == 2) return t.size(0);
  return 0;
}

struct Attended {
  at::Tensor output, weights;
  bool unbatched = false;  // the input was one [T, D] example
};

// --mode self (the notes' parameter-free self-attention) and projected-self (SelfAttention).
Attended attend_self(const AttendArgs& a) {
  const std::string& path = a.x.empty() ? a.q : a.x;
  auto x0 = load_input(path, "x");
  Attended r;
  if (a.mode == "self") {
    check_size(x0.dim() == 3 ? x0.size(0) : 1, x0.size(-2), x0.size(-2));
    std::tie(r.output, r.weights) = self_attention(x0);
    return r;
  }
  r.unbatched = x0.dim() == 2;
  auto x = batched(x0, path);
  check_size(x.size(0), x.size(1), x.size(1));
  SelfAttention module(SelfAttentionOptions(x.size(2)));
  load_weights(*module, a);
  module->train(a.train);
  auto out = module->forward(x, build_mask(a, x.size(0), x.size(1), x.size(1)));
  r.output = out.output;
  r.weights = out.weights;
  return r;
}

// The modules that attend from queries to keys and values: attention, multihead, combine.
template <typename Module>
Attended forward(Module& module, const AttendArgs& a, const at::Tensor& q, const at::Tensor& k,
                 const at::Tensor& v, const at::Tensor& mask,
                 const io::LoadStateDictOptions& names = {}) {
  load_weights(*module, a, names);
  module->train(a.train);
  auto out = module->forward(q, k, v, mask);
  return {out.output, out.weights};
}

Attended attend_qkv(const AttendArgs& a) {
  auto q0 = load_input(a.q, "q");
  auto q = batched(q0, a.q);
  auto k = a.k.empty() ? q : batched(load_input(a.k, "k"), a.k);
  auto v = a.v.empty() ? k : batched(load_input(a.v, "v"), a.v);
  // One dtype for all inputs, said with the files' names (LibTorch's own message names none).
  for (const auto& [t, path] : {std::pair{k, a.k}, std::pair{v, a.v}})
    if (t.scalar_type() != q.scalar_type())
      throw Error(path + " is " + std::string(c10::toString(t.scalar_type())) + " but " + a.q +
                  " is " + std::string(c10::toString(q.scalar_type())) +
                  ": give q, k and v one dtype");
  check_size(q.size(0), q.size(1), k.size(1), a.mode == "multihead" ? a.heads : 1);
  const auto mask = build_mask(a, q.size(0), q.size(1), k.size(1));
  Attended r;
  if (a.mode == "attention") {
    Attention module(AttentionOptions(q.size(2), k.size(2))
                         .score(parse_score_kind(a.score))
                         .weighting(parse_weighting_kind(a.weighting))
                         .hard_gradient(parse_hard_gradient(a.hard_gradient))
                         .hidden_size(a.hidden_size)
                         .temperature(a.temperature)
                         .window(a.window));
    r = forward(module, a, q, k, v, mask);
  } else if (a.mode == "multihead") {
    MultiheadAttention module(MultiheadAttentionOptions(q.size(2), a.heads));
    r = forward(module, a, q, k, v, mask);
  } else if (a.mode == "combine") {
    int64_t out_size = a.output_size;
    if (out_size <= 0 && !a.state_dict.empty())
      out_size = rows_of(a.state_dict, "qc_linear.weight");
    if (out_size <= 0) out_size = v.size(2);
    AttentionCombine module(AttentionCombineOptions(q.size(2), k.size(2), v.size(2), out_size)
                                .score(parse_score_kind(a.score == "dot" ? "concat" : a.score))
                                .weighting(parse_weighting_kind(a.weighting))
                                .hidden_size(a.hidden_size));
    io::LoadStateDictOptions notes_names;
    notes_names.renames = notes_attn_renames();
    r = forward(module, a, q, k, v, mask, notes_names);
  } else {
    throw Error("attend: unknown --mode '" + a.mode +
                "' (valid: notes, attention, self, projected-self, multihead, combine)");
  }
  r.unbatched = q0.dim() == 2;
  return r;
}

void write_result(const AttendArgs& a, const at::Tensor& output, const at::Tensor& weights) {
  if (!a.plot.empty()) {
    // One panel per batch row (and head): the last two dimensions are [queries, keys].
    auto flat = weights.reshape({-1, weights.size(-2), weights.size(-1)});
    std::vector<viz::Heatmap> panels;
    for (int64_t i = 0; i < flat.size(0) && i < 8; ++i)
      panels.push_back({flat[i], labels("q", flat.size(1)), labels("k", flat.size(2)),
                        a.mode + " " + std::to_string(i)});
    write_plots(a.plot, panels);
  }
  if (!a.out.empty()) {
    io::save_tensor_dict(a.out, {{"output", output}, {"weights", weights}});
    std::cout << "wrote " << a.out << ": output " << format_shape(output) << ", weights "
              << format_shape(weights) << "\n";
  } else {
    std::cout << "weights " << format_tensor(weights) << "\noutput  " << format_tensor(output)
              << "\n";
  }
}

int run(AttendArgs a) {
  if (a.mode.empty()) a.mode = !a.x.empty() ? "self" : !a.q.empty() ? "attention" : "notes";
  if (a.mode == "notes" || a.mode == "seed") return run_notes_examples(a.plot);
  at::manual_seed(static_cast<int64_t>(a.seed));
  const bool self = a.mode == "self" || a.mode == "projected-self";
  Attended r = self ? attend_self(a) : attend_qkv(a);
  if (r.unbatched) {
    r.output = r.output.squeeze(0);
    r.weights = r.weights.squeeze(0);
  }
  check_finite(r.output);
  write_result(a, r.output, r.weights);
  return 0;
}

}  // namespace

Command add_attend_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "attend",
      "Run an attention mechanism on torch.save'd tensors (with no inputs: the notes' examples)");
  auto a = std::make_shared<AttendArgs>();
  app->add_option("--mode", a->mode,
                  "notes (alias seed) | attention | self | projected-self | multihead | combine "
                  "(default: attention with --q, self with --x, else notes)");
  app->add_option("--q", a->q, "Queries: torch.save'd [Tq, Dq] or [B, Tq, Dq]");
  app->add_option("--k", a->k, "Keys [B, Tk, Dk] (default: Q)");
  app->add_option("--v", a->v, "Values [B, Tk, Dv] (default: K)");
  app->add_option("--x", a->x, "Self-attention input [T, D] or [B, T, D]");
  app->add_option("--state-dict", a->state_dict,
                  "Module weights from torch.save(module.state_dict(), path); the notes' MyAttn "
                  "names (qk_linear, qc_linear) load into --mode combine");
  app->add_option("--score", a->score, choices(score_kind_names()))->capture_default_str();
  app->add_option("--weighting", a->weighting, choices(weighting_kind_names()))
      ->capture_default_str();
  app->add_option("--hard-gradient", a->hard_gradient,
                  "none | straight-through | gumbel (with --train)")
      ->capture_default_str();
  app->add_option("--hidden-size", a->hidden_size, "Additive score width (0: key size)")
      ->check(checks::non_negative());
  app->add_option("--heads", a->heads, "Heads for --mode multihead")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--window", a->window, "Local window half-width D")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--temperature", a->temperature, "Gumbel-softmax temperature")
      ->check(checks::positive())
      ->capture_default_str();
  app->add_option("--output-size", a->output_size,
                  "Combine output width (default: from the state_dict, else V's width)");
  app->add_option("--lengths", a->lengths, "Key lengths [B] (int tensor) for a padding mask");
  app->add_option("--mask", a->mask, "Bool mask broadcastable to [B, Tq, Tk]; true = attend");
  app->add_option("--key-padding-mask", a->key_padding_mask,
                  "PyTorch-style bool [B, Tk]; true = padding (ignored)");
  app->add_flag("--causal", a->causal, "Add a causal mask (query i sees keys j <= i)");
  app->add_flag("--train", a->train, "Training mode (hard gradients, Gumbel noise)");
  app->add_option("--seed", a->seed, "Random seed for initialisation and Gumbel noise")
      ->capture_default_str();
  app->add_option("--out", a->out, "Write {'output', 'weights'} for Python's torch.load");
  app->add_option("--plot", a->plot,
                  "Draw the weights as PREFIX.png, .svg and .json (with no inputs: soft, hard and "
                  "self attention side by side on the notes' examples)");
  return {app, [a] { return run(*a); }};
}

}  // namespace attnkit::cli
