#include "testing.h"

#include "attnkit/rnn/translation_model.h"
#include "attnkit/transformer/translation_model.h"
#include "attnkit/translate/training.h"

#include "attnkit/core/error.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/kernels/cpu/cpu_isa.h"

#include <cstdio>
#include <map>
#include <sstream>

#include <execinfo.h>
#include <signal.h>
#include <torch/csrc/autograd/autograd.h>
#include <unistd.h>

#include <cstring>

namespace attnkit::testing {

translate::Translator translator_for(const translate::ModelConfig& config, rnn::RnnModel model,
                                     const data::Vocab& source_vocab,
                                     const data::Vocab& target_vocab) {
  return translate::Translator(config, std::make_shared<rnn::RnnTranslationModel>(model),
                               source_vocab, target_vocab);
}

translate::Translator translator_for(const translate::ModelConfig& config,
                                     transformer::TransformerModel model,
                                     const data::Vocab& source_vocab,
                                     const data::Vocab& target_vocab) {
  return translate::Translator(config,
                               std::make_shared<transformer::TransformerTranslationModel>(model),
                               source_vocab, target_vocab);
}

train::TrainResult train(const translate::ModelConfig& config, rnn::RnnModel model,
                         const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                         const train::TrainData& data, const train::TrainOptions& options) {
  return translate::train_model(config, std::make_shared<rnn::RnnTranslationModel>(model),
                                source_vocab, target_vocab, data, options);
}

train::TrainResult train(const translate::ModelConfig& config, transformer::TransformerModel model,
                         const data::Vocab& source_vocab, const data::Vocab& target_vocab,
                         const train::TrainData& data, const train::TrainOptions& options) {
  return translate::train_model(config,
                                std::make_shared<transformer::TransformerTranslationModel>(model),
                                source_vocab, target_vocab, data, options);
}

ScratchDir::ScratchDir(const std::string& name)
    : path_(std::filesystem::temp_directory_path() /
            ("attnkit_" + name + "_" + std::to_string(::getpid()))) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;  // a destructor must not throw; a leftover directory is harmless
  std::filesystem::remove_all(path_, ignored);
}

std::string golden_path(const std::string& file) {
  return std::string(ATTNKIT_GOLDEN_DIR) + "/" + file;
}

const io::TensorDict& golden(const std::string& file) {
  static std::map<std::string, io::TensorDict> cache;
  auto it = cache.find(file);
  if (it == cache.end()) it = cache.emplace(file, io::load_tensor_dict(golden_path(file))).first;
  return it->second;
}

io::TensorDict with_prefix(const io::TensorDict& dict, const std::string& prefix) {
  io::TensorDict out;
  for (const auto& [k, t] : dict)
    if (k.compare(0, prefix.size(), prefix) == 0) out.emplace_back(k.substr(prefix.size()), t);
  return out;
}

::testing::AssertionResult close(const at::Tensor& actual, const at::Tensor& expected, double atol,
                                 double rtol) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << "undefined tensor";
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure()
           << "shape " << actual.sizes() << " != expected " << expected.sizes();
  auto a = actual.detach().to(at::kDouble), e = expected.detach().to(at::kDouble);
  if (!at::isfinite(a).all().item<bool>())
    return ::testing::AssertionFailure() << "non-finite values in " << a;
  auto excess = (a - e).abs() - (atol + rtol * e.abs());
  const double worst = excess.numel() ? excess.max().item<double>() : -1;
  if (worst <= 0) return ::testing::AssertionSuccess();
  const auto i = excess.flatten().argmax().item<int64_t>();
  return ::testing::AssertionFailure()
         << "element " << i << ": " << a.flatten()[i].item<double>() << " vs expected "
         << e.flatten()[i].item<double>() << " (max |diff| " << (a - e).abs().max().item<double>()
         << ")";
}

::testing::AssertionResult gradcheck(const std::function<at::Tensor()>& loss,
                                     const std::vector<at::Tensor>& inputs, double eps,
                                     double tol) {
  for (const auto& x : inputs)
    if (x.scalar_type() != at::kDouble)
      return ::testing::AssertionFailure() << "gradcheck needs double inputs";
  auto l = loss();
  auto grads = torch::autograd::grad({l}, inputs, {}, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
  torch::NoGradGuard no_grad;
  for (size_t n = 0; n < inputs.size(); ++n) {
    auto flat = inputs[n].view(-1);
    auto analytic = grads[n].defined() ? grads[n].reshape(-1) : at::zeros_like(flat);
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double x0 = flat[i].item<double>();
      flat[i].fill_(x0 + eps);
      const double up = loss().item<double>();
      flat[i].fill_(x0 - eps);
      const double down = loss().item<double>();
      flat[i].fill_(x0);
      const double numeric = (up - down) / (2 * eps);
      const double a = analytic[i].item<double>();
      if (std::abs(numeric - a) > tol * std::max(1.0, std::abs(numeric)))
        return ::testing::AssertionFailure() << "input " << n << " element " << i << ": autograd "
                                             << a << " vs numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<at::Tensor> parameters_of(const torch::nn::Module& module) {
  return module.parameters(/*recurse=*/true);
}

at::Tensor projection_loss(const at::Tensor& output, const at::Tensor& weights, int64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto r1 = at::randn(output.sizes(), gen, output.options().requires_grad(false));
  auto r2 = at::randn(weights.sizes(), gen, weights.options().requires_grad(false));
  return (output * r1).sum() + (weights * r2).sum();
}

void PrintTo(const ScoreWeighting& c, std::ostream* os) {
  *os << to_string(c.score) << "/" << to_string(c.weighting);
}

std::string test_name(const ScoreWeighting& c) {
  std::string n = to_string(c.score) + "_" + to_string(c.weighting);
  for (auto& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

std::vector<ScoreWeighting> all_scores_with(const std::vector<WeightingKind>& weightings) {
  std::vector<ScoreWeighting> cases;
  for (auto s : {ScoreKind::Concat, ScoreKind::Additive, ScoreKind::Bahdanau, ScoreKind::ScaledDot,
                 ScoreKind::Dot, ScoreKind::General})
    for (auto w : weightings) cases.push_back({s, w});
  return cases;
}

translate::ModelConfig tiny_transformer_config(int64_t vocab) {
  translate::ModelConfig c;
  c.arch = translate::Arch::Transformer;
  c.source_tokenizer = c.target_tokenizer = "en";
  c.transformer = transformer::TransformerOptions(vocab, vocab)
                      .d_model(32)
                      .heads(4)
                      .encoder_layers(2)
                      .decoder_layers(2)
                      .ffn(64)
                      .dropout(0)
                      .attention_dropout(0)
                      .ffn_dropout(0);
  return c;
}

train::TrainOptions tiny_transformer_training(const std::string& dir, int64_t epochs) {
  train::TrainOptions o;
  o.model_dir = dir;
  o.epochs = epochs;
  o.batch_size = 32;
  o.learning_rate = 3e-3;
  o.warmup_steps = 100;
  o.label_smoothing = 0;
  o.early_stop = 0;
  o.checkpoint_every = 0;
  return o;
}

SyntheticData synthetic_data(const std::string& task, size_t train_count) {
  SyntheticData t;
  auto tok = data::make_tokenizer("en");
  auto train = data::synthetic_task(task, train_count, 3, 8, 8, 1);
  t.test = data::synthetic_task(task, 100, 3, 8, 8, 99);
  std::vector<std::vector<std::string>> sentences;
  for (const auto& e : train) sentences.push_back(tok->tokenize(e.pair.source));
  t.vocab = data::Vocab::build(sentences, 1);
  for (const auto& e : train)
    t.data.train.push_back({t.vocab.encode(tok->tokenize(e.pair.source)),
                            t.vocab.encode(tok->tokenize(e.pair.target))});
  return t;
}

}  // namespace attnkit::testing

namespace {

// A test that crashes says where. CTest shows a crashed test's output, which otherwise ends at
// its "[ RUN ]" line: CI once reported a SEGFAULT that no rerun reproduced, with nothing to go on.
// The handler writes the signal, the test and the stack (function names: the suite links with
// ENABLE_EXPORTS) with async-signal-safe calls only, then dies of the signal as before.
char crashed_test[512] = "(outside a test)";

class CurrentTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& t) override {
    std::snprintf(crashed_test, sizeof crashed_test, "%s.%s", t.test_suite_name(), t.name());
  }
};

void write_text(const char* s) {
  if (::write(STDERR_FILENO, s, std::strlen(s)) < 0) return;  // nothing more to do in a crash
}

void report_crash(int signal) {
  write_text("\n*** ");
  write_text(signal == SIGSEGV  ? "SIGSEGV"
             : signal == SIGBUS ? "SIGBUS"
             : signal == SIGILL ? "SIGILL"
             : signal == SIGFPE ? "SIGFPE"
                                : "SIGABRT");
  write_text(" in ");
  write_text(crashed_test);
  write_text("; the stack:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

void report_crashes() {
#if !defined(__SANITIZE_ADDRESS__)  // the sanitizers' own reports are better
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc now: not in the handler
  struct sigaction action {};
  action.sa_handler = report_crash;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(s, &action, nullptr);
#endif
}

}  // namespace

// The suite's own main: under ATTNKIT_ISA (tests/CMakeLists.txt runs the kernel tests once per
// ISA), an ISA this CPU lacks skips the run with CTest's skip code instead of failing it.
int main(int argc, char** argv) {
  try {
    attnkit::kernels::cpu_isa();
  } catch (const attnkit::Error& e) {
    std::fprintf(stderr, "skipped: %s\n", e.what());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new CurrentTest);
  report_crashes();
  return RUN_ALL_TESTS();
}
