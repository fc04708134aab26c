// deltaserve-tokenize: encode text or decode ids with a GGUF model's tokenizer.
//   deltaserve-tokenize --model F.gguf [--ids] [--no-control] [--pre qwen2|qwen35] TEXT
//       default: {"ids":[...],"tokens":[...]} (tokens in vocabulary form, e.g. "Ġworld");
//       --ids: just the JSON array of ids; --no-control: CONTROL tokens in TEXT stay plain text.
//   deltaserve-tokenize --model F.gguf [--hide-control] --detokenize 1,2,3
//   deltaserve-tokenize --model F.gguf --chat FILE.json
//       FILE.json: {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool,
//       "enable_thinking"?: bool}; prints {"text": rendered prompt, "ids": [...]}.
//       prints the decoded text followed by a newline.
// Errors go to stderr with a non-zero exit status.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <charconv>
#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/gguf.h"
#include "coordinator/chat_template/chat_input.h"
#include "coordinator/chat_template/chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace {

struct Args {
  std::string model;
  std::optional<std::string> text;
  std::optional<std::string> detokenize;
  std::optional<std::string> chat;  // --chat FILE.json
  std::optional<ds::PreTokenizerKind> pre;
  bool ids_only = false;
  bool parse_control = true;
  bool render_control = true;
};

void usage() {
  std::fputs(
      "usage: deltaserve-tokenize --model F.gguf [--ids] [--no-control] [--pre qwen2|qwen35] TEXT\n"
      "       deltaserve-tokenize --model F.gguf [--hide-control] --detokenize ID,ID,...\n"
      "       deltaserve-tokenize --model F.gguf --chat FILE.json\n",
      stderr);
}

std::string take_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
  return argv[++i];
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--model") {
      a.model = take_value(argc, argv, i);
    } else if (arg == "--ids") {
      a.ids_only = true;
    } else if (arg == "--no-control") {
      a.parse_control = false;
    } else if (arg == "--hide-control") {
      a.render_control = false;
    } else if (arg == "--detokenize") {
      a.detokenize = take_value(argc, argv, i);
    } else if (arg == "--chat") {
      a.chat = take_value(argc, argv, i);
    } else if (arg == "--pre") {
      const std::string name = take_value(argc, argv, i);
      a.pre = ds::pre_tokenizer_from_name(name);
      if (!a.pre) throw std::invalid_argument("unknown pre-tokenizer '" + name + "' (expected qwen2 or qwen35)");
    } else if (arg == "--" && i + 1 < argc && !a.text) {
      a.text = argv[++i];
    } else if (arg.starts_with("--")) {
      throw std::invalid_argument("unknown option " + std::string(arg));
    } else if (!a.text) {
      a.text = std::string(arg);
    } else {
      throw std::invalid_argument("more than one TEXT argument");
    }
  }
  if (a.model.empty()) throw std::invalid_argument("--model is required");
  if (int(a.text.has_value()) + int(a.detokenize.has_value()) + int(a.chat.has_value()) != 1) {
    throw std::invalid_argument("give exactly one of TEXT, --detokenize, --chat");
  }
  return a;
}

// "1, 2,3" -> {1, 2, 3}.
std::vector<int32_t> parse_id_list(std::string_view s) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t id = 0;
    const auto r = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size()) {
      throw std::invalid_argument("bad token id '" + std::string(item) + "' in --detokenize");
    }
    ids.push_back(id);
    pos = end + 1;
  }
  return ids;
}

std::string ids_json(const ds::Tokenizer& tok, const std::vector<int32_t>& ids, bool ids_only) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  auto write_ids = [&] {
    w.StartArray();
    for (int32_t id : ids) w.Int(id);
    w.EndArray();
  };
  if (ids_only) {
    write_ids();
  } else {
    w.StartObject();
    w.Key("ids");
    write_ids();
    w.Key("tokens");
    w.StartArray();
    for (int32_t id : ids) {
      const std::string_view t = tok.token_text(id);
      w.String(t.data(), static_cast<rapidjson::SizeType>(t.size()));
    }
    w.EndArray();
    w.EndObject();
  }
  return std::string(buf.GetString(), buf.GetSize());
}

// Renders a chat file with the GGUF's template and tokenizes it with provenance.
int run_chat(const ds::Tokenizer& tok, const Args& a) {
  std::ifstream in(*a.chat);
  if (!in) throw std::invalid_argument("cannot read " + *a.chat);
  std::stringstream ss;
  ss << in.rdbuf();
  rapidjson::Document file;
  file.Parse(ss.str().c_str());
  if (file.HasParseError() || !file.IsObject()) throw std::invalid_argument(*a.chat + ": not a JSON object");
  rapidjson::Document req(rapidjson::kObjectType);
  auto& al = req.GetAllocator();
  for (const char* key : {"messages", "tools", "add_generation_prompt"}) {
    if (file.HasMember(key)) req.AddMember(rapidjson::StringRef(key), rapidjson::Value(file[key], al), al);
  }
  if (file.HasMember("enable_thinking")) {
    rapidjson::Value kwargs(rapidjson::kObjectType);
    kwargs.AddMember("enable_thinking", rapidjson::Value(file["enable_thinking"], al), al);
    req.AddMember("chat_template_kwargs", kwargs, al);
  }
  const ds::GgufFile gguf = ds::GgufFile::open(a.model);
  const ds::PromptText prompt = ds::ChatTemplate::from_gguf(gguf).render(ds::chat_input_from_request(req));
  const std::vector<int32_t> ids = tok.encode(prompt);
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("text");
  w.String(prompt.text.data(), static_cast<rapidjson::SizeType>(prompt.text.size()));
  w.Key("ids");
  w.StartArray();
  for (int32_t id : ids) w.Int(id);
  w.EndArray();
  w.EndObject();
  std::puts(buf.GetString());
  return 0;
}

int run(const Args& a) {
  ds::TokenizerOptions options;
  options.pre_tokenizer = a.pre;
  const ds::Tokenizer tok = ds::Tokenizer::from_file(a.model, options);
  if (a.chat) return run_chat(tok, a);
  if (a.detokenize) {
    const std::string text = tok.decode(parse_id_list(*a.detokenize), a.render_control);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  const std::vector<int32_t> ids = tok.encode(*a.text, a.parse_control);
  std::puts(ids_json(tok, ids, a.ids_only).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-tokenize: %s\n", e.what());
    usage();
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltaserve-tokenize: %s\n", e.what());
    return 1;
  }
}
