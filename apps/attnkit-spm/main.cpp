// attnkit-spm: SentencePiece in its own process.
//
// Debian's libsentencepiece carries its own copy of protobuf-lite and exports it; in the same
// process as LibTorch (which uses libprotobuf.so) the two copies interpose on each other and
// the process crashes while loading. attnkit therefore talks to SentencePiece through this
// small helper over pipes. Protocol (one request a line, one reply a line, fields separated
// by \x1f):
//   attnkit-spm train ARGS...        SentencePieceTrainer::Train(ARGS); exit status 0 on success
//   attnkit-spm serve MODEL          then: "E<text>" -> pieces,  "D<piece>\x1f<piece>..." -> text,
//                                    "B<text>\x1e<text>..." -> each text's pieces, \x1e between
//                                    a reply starting with \x15 is an error message

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {
constexpr char kSep = '\x1f';
constexpr char kError = '\x15';
constexpr char kRecord = '\x1e';

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const auto end = s.find(kSep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  if (argc >= 3 && std::string(argv[1]) == "train") {
    std::string args;
    for (int i = 2; i < argc; ++i) args += (i > 2 ? " " : "") + std::string(argv[i]);
    const auto status = sentencepiece::SentencePieceTrainer::Train(args);
    if (!status.ok()) {
      std::cerr << status.ToString() << "\n";
      return 1;
    }
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "serve") {
    sentencepiece::SentencePieceProcessor sp;
    const auto status = sp.Load(argv[2]);
    if (!status.ok()) {
      std::cout << kError << status.ToString() << "\n" << std::flush;
      return 1;
    }
    std::cout << "ready\n" << std::flush;
    for (std::string line; std::getline(std::cin, line);) {
      if (line.empty()) continue;
      std::string reply;
      if (line[0] == 'E') {
        std::vector<std::string> pieces;
        if (sp.Encode(line.substr(1), &pieces).ok()) {
          for (size_t i = 0; i < pieces.size(); ++i)
            reply += (i ? std::string(1, kSep) : "") + pieces[i];
        } else {
          reply = std::string(1, kError) + "encode failed";
        }
      } else if (line[0] == 'B') {
        size_t start = 1;
        std::vector<std::string> pieces;
        for (bool first = true;; first = false) {
          const auto end = line.find(kRecord, start);
          const std::string text =
              line.substr(start, end == std::string::npos ? std::string::npos : end - start);
          if (!first) reply += kRecord;
          if (!sp.Encode(text, &pieces).ok()) {
            reply = std::string(1, kError) + "encode failed";
            break;
          }
          for (size_t i = 0; i < pieces.size(); ++i)
            reply += (i ? std::string(1, kSep) : "") + pieces[i];
          if (end == std::string::npos) break;
          start = end + 1;
        }
      } else if (line[0] == 'D') {
        std::string text;
        auto pieces = line.size() > 1 ? split(line.substr(1)) : std::vector<std::string>();
        reply = sp.Decode(pieces, &text).ok() ? text : std::string(1, kError) + "decode failed";
      } else {
        reply = std::string(1, kError) + "unknown request";
      }
      std::cout << reply << "\n" << std::flush;
    }
    return 0;
  }
  std::cerr << "usage: attnkit-spm train ARGS... | attnkit-spm serve MODEL\n";
  return 2;
}
