// Translates stdin, a sentence a line, with a model directory made by `attnkit train`.

#include <attnkit/core/error.h>
#include <attnkit/decoding/search.h>
#include <attnkit/translate/translator.h>

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: translate MODEL_DIR < sentences.txt\n";
    return 2;
  }
  try {
    attnkit::translate::Translator translator(argv[1]);
    std::vector<std::string> sentences;
    for (std::string line; std::getline(std::cin, line);) sentences.push_back(line);
    attnkit::decoding::SearchOptions options;  // beam 5, as `attnkit translate`
    for (const auto& t : translator.translate(sentences, options)) std::cout << t.text << "\n";
  } catch (const attnkit::Error& e) {
    std::cerr << "translate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
