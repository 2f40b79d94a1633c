// torch.save interop: reading PyTorch's files (OrderedDict state_dicts, dicts, views), writing
// files torch.load reads, and clear errors (never crashes) on corrupt or truncated files.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <torch/nn/modules/linear.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/io/weights.h"
#include "io/unpickler.h"
#include "testing.h"

namespace attnkit {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PtFile, ReadsAnOrderedDictStateDictInOrder) {
  auto sd = io::load_tensor_dict(testing::golden_path("notes_myattn_state.pt"));
  ASSERT_EQ(sd.size(), 4u);
  EXPECT_EQ(sd[0].first, "qk_linear.weight");
  EXPECT_EQ(sd[1].first, "qk_linear.bias");
  EXPECT_EQ(sd[2].first, "qc_linear.weight");
  EXPECT_EQ(sd[3].first, "qc_linear.bias");
  EXPECT_EQ(sd[0].second.sizes(), (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(sd[2].second.sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(sd[0].second.scalar_type(), at::kFloat);
}

TEST(PtFile, GenericLoadGivesAnIValueDict) {
  auto value = io::load(testing::golden_path("multihead_state.pt"));
  ASSERT_TRUE(value.isGenericDict());
  EXPECT_EQ(value.toGenericDict().size(), 4u);
}

TEST(PtFile, RoundTripKeepsValuesDtypesAndOrder) {
  testing::ScratchDir dir("pt_roundtrip");
  auto path = (dir / "roundtrip.pt").string();
  auto strided = at::arange(12, at::kDouble).reshape({3, 4}).t();  // non-contiguous
  io::TensorDict in = {{"z", at::randn({2, 3})},
                       {"a", strided},
                       {"ints", at::arange(5)},
                       {"flags", at::tensor({1, 0, 1}).to(at::kBool)}};
  io::save_tensor_dict(path, in);
  auto out = io::load_tensor_dict(path);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second.scalar_type(), in[i].second.scalar_type());
    EXPECT_TRUE(out[i].second.equal(in[i].second)) << in[i].first;
  }
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "temporary file left";
}

TEST(PtFile, SavingIntoAMissingDirectoryIsAClearError) {
  EXPECT_THROW(io::save_tensor_dict("/nonexistent-dir/x.pt", {{"a", at::ones({1})}}), Error);
}

TEST(PtFile, WrongContentTypeIsNamed) {
  try {
    io::load_tensor(testing::golden_path("notes_myattn_state.pt"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a tensor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dict"), std::string::npos) << e.what();
  }
}

TEST(PtFile, MissingFileNamesThePath) {
  try {
    io::load_tensor("/no/such/file.pt");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/file.pt"), std::string::npos);
  }
}

TEST(PtFile, NotAZipOrLegacyFormatIsNamed) {
  const auto junk = std::string("hello, this is not a tensor");
  EXPECT_THROW(io::load_bytes(junk, "junk.pt"), Error);
  try {
    io::load_bytes(std::string("\x80\x02\x8a\x0a", 4), "legacy.pt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("legacy"), std::string::npos) << e.what();
  }
}

// Every truncation of a real file is an attnkit::Error naming the file, never a crash.
TEST(PtFile, TruncatedFilesAreClearErrors) {
  const auto bytes = read_bytes(testing::golden_path("notes_myattn_state.pt"));
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t n = 0; n < bytes.size(); n += 37) {
    try {
      io::load_bytes(bytes.substr(0, n), "cut.pt");
      ADD_FAILURE() << "a file cut at " << n << " of " << bytes.size() << " bytes loaded";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cut.pt", 0), 0u) << e.what();
    }
  }
}

// Random corruption either still loads (a flipped byte in tensor data is just a different
// number) or is an attnkit::Error; any other exception or a crash fails the test.
TEST(PtFile, CorruptFilesNeverCrash) {
  const auto bytes = read_bytes(testing::golden_path("notes_myattn_state.pt"));
  std::mt19937 rng(42);
  int errors = 0;
  for (int trial = 0; trial < 400; ++trial) {
    auto damaged = bytes;
    for (int flips = 0; flips < 1 + trial % 4; ++flips)
      damaged[rng() % damaged.size()] = static_cast<char>(rng());
    try {
      io::load_bytes(damaged, "damaged.pt");
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

// Found by fuzzing (tests/fuzz/fuzz_pt_file): a central directory whose offsets point past the
// end of the file made LibTorch's in-memory reader copy from outside the buffer (ASan: a
// heap-buffer-overflow). Reads are bounded now and the archive is reported as damaged.
TEST(PtFile, ZipOffsetsPastTheEndAreAClearError) {
  for (const char* target : {"pt_file", "state_dict"}) {
    const auto path = std::string(ATTNKIT_TEST_DATA_DIR) + "/../fuzz/corpus/" + target +
                      "/finding_zip_offset_past_the_end";
    try {
      io::load_bytes(read_bytes(path), "damaged.pt");
      ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("damaged.pt: not a readable torch.save archive", 0), 0u)
          << e.what();
    }
  }
}

// LibTorch's zip readers do not check the members' CRC-32: a damaged model.pt reached its
// TorchScript importer and crashed it (a SEGV found by tests/fuzz/fuzz_weights). Every stored
// member is checked before any reader sees it: one flipped byte anywhere in a member's data is
// an error naming the file and the member.
TEST(PtFile, ADamagedMemberFailsItsCrcBeforeAnyReaderSeesIt) {
  const std::string path = std::string(ATTNKIT_GOLDEN_DIR) + "/tiny_model/model.pt";
  const auto bytes = read_bytes(path);
  io::check_archive(bytes, "model.pt");  // intact
  for (size_t at : {size_t(200), bytes.size() / 3, bytes.size() / 2}) {
    auto damaged = bytes;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    try {
      io::check_archive(damaged, "model.pt");
      ADD_FAILURE() << "a flip at byte " << at << " passed";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("model.pt: damaged archive: member '", 0), 0u)
          << e.what();
    }
  }
}

// The pickle itself, damaged: stored uncompressed in the zip, so flips reach the unpickler.
TEST(PtFile, CorruptPickleOpcodesAreClearErrors) {
  const auto bytes = read_bytes(testing::golden_path("notes_myattn_state.pt"));
  const auto start = bytes.find("\x80\x02");  // PROTO 2: the start of data.pkl
  ASSERT_NE(start, std::string::npos);
  int errors = 0;
  for (size_t i = start; i < start + 200 && i < bytes.size(); ++i) {
    auto damaged = bytes;
    damaged[i] = static_cast<char>(0xff);
    try {
      io::load_bytes(damaged, "damaged.pt");
    } catch (const Error& e) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

// A pickle of a list nested `depth` deep: [[[...]]] (EMPTY_LIST x depth, then APPEND x depth-1).
std::string nested_list_pickle(int depth) {
  std::string p = "\x80\x02";
  p += std::string(depth, ']') + std::string(depth - 1, 'a') + ".";
  return p;
}

io::detail::StorageLoader no_storage = [](const std::string&, at::ScalarType, int64_t) {
  return at::Tensor();
};

// A file of 200,000 nested lists (400 KB) segfaulted: the objects were freed recursively. The
// depth is bounded while reading and the objects are freed with a work list.
TEST(Unpickler, DeepNestingIsRefusedWithoutCrashing) {
  const auto ok = nested_list_pickle(io::detail::kMaxPickleDepth);
  EXPECT_EQ(io::detail::unpickle(ok.data(), ok.size(), "ok.pkl", no_storage)->kind,
            io::detail::PyObject::Kind::List);
  const auto deep = nested_list_pickle(200000);
  try {
    io::detail::unpickle(deep.data(), deep.size(), "deep.pkl", no_storage);
    FAIL() << "200,000 levels were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deep.pkl: corrupt or unsupported pickle"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("nested deeper than 1000"), std::string::npos) << e.what();
  }
}

// l = []; l.append(l): refused rather than converted forever.
TEST(Unpickler, AListThatContainsItselfIsRefused) {
  const char bytes[] = {'\x80', '\x02', ']', 'q', '\0', 'h', '\0', 'a', '.'};  // BINPUT, BINGET 0
  const std::string p(bytes, sizeof bytes);
  EXPECT_THROW(io::detail::unpickle(p.data(), p.size(), "cycle.pkl", no_storage), Error);
}

}  // namespace
}  // namespace attnkit

namespace attnkit {
namespace {

// Model weights are torch.save dicts read by attnkit's unpickler: a LibTorch (TorchScript)
// archive, whose importer runs the code records it carries, is refused by name, and a dict with
// a tensor the module lacks (weights of a deeper model) is refused naming it.
TEST(Weights, ATorchScriptArchiveIsRefusedAndLeftoverTensorsAreNamed) {
  testing::ScratchDir dir("weights_format");
  torch::nn::Linear layer(3, 2);
  const auto archive_path = (dir / "archive.pt").string();
  {
    torch::serialize::OutputArchive archive;
    layer->save(archive);
    archive.save_to(archive_path);
  }
  try {
    io::load_weights(*layer, archive_path);
    ADD_FAILURE() << "a LibTorch archive was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a LibTorch archive"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("attnkit upgrade"), std::string::npos) << e.what();
  }
  const auto path = (dir / "model.pt").string();
  io::save_weights(*layer, path);
  torch::nn::Linear back(3, 2);
  io::load_weights(*back, path);
  EXPECT_TRUE(back->weight.equal(layer->weight));
  auto extra = io::state_dict(*layer);
  extra.emplace_back("next_layer.weight", at::zeros({2, 2}));
  io::save_tensor_dict(path, extra);
  try {
    io::load_weights(*back, path);
    ADD_FAILURE() << "a leftover tensor passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'next_layer.weight'"), std::string::npos) << e.what();
  }
  io::save_tensor_dict(path, {{"weight", at::zeros({2, 3}, at::kChar)}, {"bias", at::zeros({2})}});
  try {
    io::load_weights(*back, path);
    ADD_FAILURE() << "int8 rows loaded as float weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'weight' is Char"), std::string::npos) << e.what();
  }
}

// A line limit is checked as the line is read: 1 MB without a newline is not gathered whole.
TEST(Files, ALongLineIsStoppedAtTheLimitNotReadWhole) {
  std::istringstream in("short\n" + std::string(1 << 20, 'x') + "\nafter\nlast");
  std::string line;
  EXPECT_EQ(read_line(in, line, 100), LineStatus::Ok);
  EXPECT_EQ(line, "short");
  EXPECT_EQ(read_line(in, line, 100), LineStatus::TooLong);
  EXPECT_LE(line.size(), 100u + 8192u);
  in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  EXPECT_EQ(read_line(in, line, 100), LineStatus::Ok);
  EXPECT_EQ(line, "after");
  EXPECT_EQ(read_line(in, line, 100), LineStatus::Ok);
  EXPECT_EQ(line, "last");  // no newline at the end
  EXPECT_EQ(read_line(in, line, 100), LineStatus::End);
  std::istringstream empty_lines("\n\nx\n");
  EXPECT_EQ(read_line(empty_lines, line, 10), LineStatus::Ok);
  EXPECT_EQ(line, "");
  EXPECT_EQ(read_line(empty_lines, line, 10), LineStatus::Ok);
  EXPECT_EQ(read_line(empty_lines, line, 10), LineStatus::Ok);
  EXPECT_EQ(line, "x");
  EXPECT_EQ(read_line(empty_lines, line, 10), LineStatus::End);
  EXPECT_THROW(read_small_file("/dev/zero", 100, "a test file"), Error);
  EXPECT_THROW(read_small_file("/", 100, "a test file"), Error);
}

}  // namespace
}  // namespace attnkit
