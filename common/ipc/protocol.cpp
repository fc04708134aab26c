// Envelope codec (see protocol.h).
#include "common/ipc/protocol.h"

#include <limits>
#include <stdexcept>

namespace ds::ipc {

std::string encode_envelope(v1::Envelope env) {
  env.set_protocol_version(kProtocolVersion);
  std::string out;
  env.SerializeToString(&out);
  return out;
}

bool decode_envelope(const void* data, size_t size, v1::Envelope* out, std::string* why) {
  if (size > static_cast<size_t>(std::numeric_limits<int>::max())) {
    *why = "frame too large";
    return false;
  }
  if (!out->ParseFromArray(data, static_cast<int>(size))) {
    *why = "frame is not a valid Envelope (" + std::to_string(size) + " bytes)";
    return false;
  }
  if (out->protocol_version() != kProtocolVersion) {
    *why = "protocol version " + std::to_string(out->protocol_version()) + ", expected " +
           std::to_string(kProtocolVersion);
    return false;
  }
  if (out->body_case() == v1::Envelope::BODY_NOT_SET) {
    *why = "envelope without a body";
    return false;
  }
  return true;
}

const char* body_name(const v1::Envelope& env) {
  switch (env.body_case()) {
    case v1::Envelope::kHello:
      return "hello";
    case v1::Envelope::kAssign:
      return "assign";
    case v1::Envelope::kReady:
      return "ready";
    case v1::Envelope::kHeartbeat:
      return "heartbeat";
    case v1::Envelope::kDropSequences:
      return "drop_sequences";
    case v1::Envelope::kDropSequencesDone:
      return "drop_sequences_done";
    case v1::Envelope::kShutdown:
      return "shutdown";
    case v1::Envelope::kStepPlan:
      return "step_plan";
    case v1::Envelope::kStageForward:
      return "stage_forward";
    case v1::Envelope::kStepResult:
      return "step_result";
    case v1::Envelope::kStepError:
      return "step_error";
    case v1::Envelope::kStepMasks:
      return "step_masks";
    case v1::Envelope::BODY_NOT_SET:
      break;
  }
  return "none";
}

void set_assign_kv_types(v1::Assign* a, KvType k, KvType v) {
  a->set_kv_cache_type_k(kv_type_name(k));
  a->set_kv_cache_type_v(kv_type_name(v));
}

std::optional<KvType> assign_kv_type(const char* field, const std::string& wire) {
  if (wire.empty()) return std::nullopt;
  const std::optional<KvType> t = parse_kv_type(wire);
  if (!t) {
    throw std::runtime_error(std::string("Assign.") + field + " = '" + wire + "' is not a KV cache type (" +
                             kKvTypeNames + ")");
  }
  return t;
}

}  // namespace ds::ipc
