#include "tests/testutil/reference.h"

#include <rapidjson/document.h>

#include <map>
#include <memory>
#include <stdexcept>

#include "tests/testutil/testutil.h"

namespace ds::test {
namespace {

const rapidjson::Document& manifest(const std::string& fixture) {
  static std::map<std::string, std::unique_ptr<rapidjson::Document>> docs;
  std::unique_ptr<rapidjson::Document>& doc = docs[fixture];
  if (!doc) {
    const std::string file = fixture == "qwen35" ? "reference/manifest.json" : "reference/" + fixture + ".json";
    std::vector<uint8_t> bytes = read_file(data_path(file));
    doc = std::make_unique<rapidjson::Document>();
    doc->Parse(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (doc->HasParseError()) throw std::runtime_error("reference manifest " + file + " does not parse");
  }
  return *doc;
}

template <typename T>
std::vector<T> array_of(const rapidjson::Value& v) {
  std::vector<T> out;
  for (const auto& x : v.GetArray()) out.push_back(static_cast<T>(x.GetDouble()));
  return out;
}

template <typename T>
std::vector<std::vector<T>> matrix_of(const rapidjson::Value& v) {
  std::vector<std::vector<T>> out;
  for (const auto& row : v.GetArray()) out.push_back(array_of<T>(row));
  return out;
}

LogitsSummary summary_of(const rapidjson::Value& v) {
  LogitsSummary s;
  s.topk_ids = matrix_of<int32_t>(v["topk_ids"]);
  s.topk_logits = matrix_of<float>(v["topk_logits"]);
  s.logsumexp = array_of<double>(v["logsumexp"]);
  s.probe_ids = array_of<int32_t>(v["probe_ids"]);
  s.probe_logits = matrix_of<float>(v["probe_logits"]);
  return s;
}

std::vector<float> f32_file(const rapidjson::Value& v) {
  return read_f32(data_path(std::string("reference/") + v["file"].GetString()));
}

}  // namespace

ReferencePrompt load_reference_prompt(const std::string& name, const std::string& fixture) {
  const rapidjson::Value& p = manifest(fixture)["fixtures"][fixture.c_str()]["prompts"][name.c_str()];
  ReferencePrompt r;
  r.name = name;
  r.ids = array_of<int32_t>(p["ids"]);
  r.logits = summary_of(p["logits_summary"]);
  if (p.HasMember("last_logits")) r.last_logits = f32_file(p["last_logits"]);
  for (const char* greedy : {"greedy_32", "greedy_16"}) {
    if (!p.HasMember(greedy)) continue;
    r.greedy_tokens = array_of<int32_t>(p[greedy]["tokens"]);
    r.greedy_margins = array_of<double>(p[greedy]["margins"]);
  }
  if (p.HasMember("hidden_states")) r.hidden_states = f32_file(p["hidden_states"]);
  if (p.HasMember("final_normed_hidden")) r.final_normed = f32_file(p["final_normed_hidden"]);
  if (p.HasMember("mtp_logits_summary")) {
    r.has_mtp = true;
    r.mtp_logits = summary_of(p["mtp_logits_summary"]);
    r.mtp_last_logits = f32_file(p["mtp_last_logits"]);
  }
  return r;
}

}  // namespace ds::test
