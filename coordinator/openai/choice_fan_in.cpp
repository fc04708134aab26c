#include "coordinator/openai/choice_fan_in.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "coordinator/http/sse.h"

namespace ds::openai {

namespace {

std::string to_json(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return std::string(sb.GetString(), sb.GetSize());
}

uint64_t member_u64(const rapidjson::Value& v, const char* name) {
  const auto it = v.FindMember(name);
  return it != v.MemberEnd() && it->value.IsUint64() ? it->value.GetUint64() : 0;
}

void set_u64(rapidjson::Value& v, const char* name, uint64_t x, rapidjson::Document::AllocatorType& a) {
  const auto it = v.FindMember(name);
  if (it != v.MemberEnd()) {
    it->value.SetUint64(x);
  } else {
    v.AddMember(rapidjson::Value(name, a), rapidjson::Value(x), a);
  }
}

// The JSON of one SSE event "data: {...}\n\n"; nullopt when it is not an object.
std::optional<rapidjson::Document> event_json(const std::string& event) {
  const size_t start = event.find('{');
  if (start == std::string::npos) return std::nullopt;
  rapidjson::Document d;
  d.Parse(event.c_str() + start, event.size() - start);
  if (d.HasParseError() || !d.IsObject()) return std::nullopt;
  return d;
}

}  // namespace

class ChoiceFanIn::Choice final : public ResponseChannel {
 public:
  Choice(std::shared_ptr<ChoiceFanIn> fan, uint32_t index) : fan_(std::move(fan)), index_(index) {}
  void respond(HttpResponse response) override { fan_->respond(index_, std::move(response)); }
  void begin_stream(int status, std::string content_type) override {
    fan_->begin_stream(status, std::move(content_type));
  }
  void stream_data(std::string bytes) override { fan_->stream_data(std::move(bytes)); }
  void end_stream() override { fan_->end_stream(); }

 private:
  std::shared_ptr<ChoiceFanIn> fan_;
  uint32_t index_;
};

ChoiceFanIn::ChoiceFanIn(std::shared_ptr<ResponseChannel> out, uint32_t n_choices, bool stream,
                         std::function<void()> on_failure)
    : out_(std::move(out)), n_(n_choices), stream_(stream), on_failure_(std::move(on_failure)), bodies_(n_choices) {}

std::shared_ptr<ResponseChannel> ChoiceFanIn::channel(uint32_t index) {
  return std::make_shared<Choice>(shared_from_this(), index);
}

bool ChoiceFanIn::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void ChoiceFanIn::fail_all(HttpResponse response) {
  failed_ = true;
  out_->respond(std::move(response));
  if (on_failure_) on_failure_();  // defers the cancels: never calls back into this object
}

void ChoiceFanIn::respond(uint32_t index, HttpResponse response) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_ || index >= n_ || bodies_[index]) return;
  if (response.status != 200) {
    if (!stream_begun_) return fail_all(std::move(response));
    // The stream is under way: this choice's error goes in-band, the others go on.
    out_->stream_data(sse_event(response.body));
    if (++ended_ == n_) end_stream_locked();
    return;
  }
  bodies_[index] = std::move(response);
  for (const auto& b : bodies_) {
    if (!b) return;
  }
  std::string body = merged_body();
  HttpResponse merged = std::move(*bodies_[0]);
  merged.body = std::move(body);
  out_->respond(std::move(merged));
}

void ChoiceFanIn::begin_stream(int status, std::string content_type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_ || stream_begun_) return;
  stream_begun_ = true;
  out_->begin_stream(status, std::move(content_type));
}

void ChoiceFanIn::stream_data(std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_ || !stream_begun_ || bytes == sse_done()) return;
  // A usage chunk is the one with no choices: summed, sent once at the end.
  if (bytes.find(R"("choices":[])") != std::string::npos) {
    if (auto d = event_json(bytes); d && d->HasMember("usage") && (*d)["usage"].IsObject()) {
      if (!usage_) {
        usage_ = std::move(*d);
      } else {
        add_usage((*d)["usage"]);
      }
      return;
    }
  }
  out_->stream_data(std::move(bytes));
}

void ChoiceFanIn::end_stream() {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_ || !stream_begun_) return;
  if (++ended_ == n_) end_stream_locked();
}

void ChoiceFanIn::end_stream_locked() {
  if (usage_) out_->stream_data(sse_event(to_json(*usage_)));
  out_->stream_data(sse_done());
  out_->end_stream();
}

// Adds one more choice's usage to usage_ (completion tokens and speculation counts summed; the
// prompt is the first choice's, counted once).
void ChoiceFanIn::add_usage(const rapidjson::Value& more) {
  auto& a = usage_->GetAllocator();
  rapidjson::Value& u = (*usage_)["usage"];
  const uint64_t completion = member_u64(u, "completion_tokens") + member_u64(more, "completion_tokens");
  set_u64(u, "completion_tokens", completion, a);
  set_u64(u, "total_tokens", member_u64(u, "prompt_tokens") + completion, a);
  const auto mine = u.FindMember("speculative");
  const auto theirs = more.FindMember("speculative");
  if (mine != u.MemberEnd() && theirs != more.MemberEnd() && mine->value.IsObject() && theirs->value.IsObject()) {
    for (const char* k : {"drafted_tokens", "accepted_tokens"}) {
      set_u64(mine->value, k, member_u64(mine->value, k) + member_u64(theirs->value, k), a);
    }
  }
}

// Choice 0's body with every choice's `choices` entry, in index order, and the summed usage.
std::string ChoiceFanIn::merged_body() {
  rapidjson::Document first;
  first.Parse(bodies_[0]->body.c_str());
  if (first.HasParseError() || !first.IsObject() || !first.HasMember("choices")) return bodies_[0]->body;
  auto& a = first.GetAllocator();
  usage_.emplace();
  usage_->SetObject();
  if (first.HasMember("usage"))
    usage_->AddMember("usage", rapidjson::Value(first["usage"], usage_->GetAllocator()), usage_->GetAllocator());
  for (uint32_t i = 1; i < n_; ++i) {
    rapidjson::Document d;
    d.Parse(bodies_[i]->body.c_str());
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("choices") || !d["choices"].IsArray()) continue;
    for (auto& c : d["choices"].GetArray()) first["choices"].PushBack(rapidjson::Value(c, a), a);
    if (d.HasMember("usage") && usage_->HasMember("usage")) add_usage(d["usage"]);
  }
  if (usage_->HasMember("usage")) first["usage"] = rapidjson::Value((*usage_)["usage"], a);
  return to_json(first);
}

}  // namespace ds::openai
