#include "tests/coordinator/tokenizer/tokenizer_fixture.h"

#include <rapidjson/document.h>

#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "tests/testutil/testutil.h"

namespace ds::test {

namespace {

std::string read_text(const std::string& name) {
  const std::vector<uint8_t> bytes = read_file(std::string(DS_TOKENIZER_DATA_DIR) + "/" + name);
  return std::string(bytes.begin(), bytes.end());
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  int32_t id = 0;
  while (in >> id) ids.push_back(id);
  return ids;
}

}  // namespace

const Tokenizer& fixture_tokenizer(PreTokenizerKind kind) {
  static std::map<PreTokenizerKind, std::unique_ptr<Tokenizer>> loaded;
  auto& slot = loaded[kind];
  if (!slot) {
    TokenizerOptions options;
    options.pre_tokenizer = kind;
    slot = std::make_unique<Tokenizer>(Tokenizer::from_file(tiny_model_path(), options));
  }
  return *slot;
}

std::vector<TokenizerCase> read_vocab_vectors(const std::string& name) {
  // Every case is followed by "\n__ggml_vocab_test__\n"; .out has one line per case.
  const std::string inp = read_text("vectors-" + name + ".inp");
  const std::string out = read_text("vectors-" + name + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<TokenizerCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(sep, pos);
    if (end == std::string::npos) throw std::runtime_error("vectors-" + name + ".inp: missing final separator");
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (TokenizerCase& c : cases) {
    if (!std::getline(lines, line)) throw std::runtime_error("vectors-" + name + ".out: too few lines");
    c.ids = parse_ids(line);
  }
  return cases;
}

std::vector<TokenizerCase> read_json_cases() {
  const std::string json = read_text("tokenizer_cases.json");
  rapidjson::Document doc;
  doc.Parse(json.c_str(), json.size());
  if (doc.HasParseError() || !doc.IsArray()) throw std::runtime_error("tokenizer_cases.json: not a JSON array");
  std::vector<TokenizerCase> cases;
  for (const auto& item : doc.GetArray()) {
    TokenizerCase c;
    c.text.assign(item["text"].GetString(), item["text"].GetStringLength());
    for (const auto& id : item["ids"].GetArray()) c.ids.push_back(id.GetInt());
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ds::test
