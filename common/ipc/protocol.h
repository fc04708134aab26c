// The deltaserve.v1 envelope codec: encodes a message into one transport frame and decodes a
// received frame, rejecting wrong-version or malformed frames with a reason (never throwing).
// Helpers about the contract live here, never in proto/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/kv_format.h"
#include "deltaserve/v1/envelope.pb.h"  // generated: Envelope and every message it carries

namespace ds::ipc {

namespace v1 = ::deltaserve::v1;

// Version of the deltaserve.v1 contract this build speaks (Envelope.protocol_version).
constexpr uint32_t kProtocolVersion = 1;

// Serializes `env` after stamping the protocol version into it.
std::string encode_envelope(v1::Envelope env);

// Parses one frame. Returns false (with `why`) when the bytes do not parse, the version differs
// or no body is set.
bool decode_envelope(const void* data, size_t size, v1::Envelope* out, std::string* why);

// Name of the envelope's body ("step_plan", ...) for logs.
const char* body_name(const v1::Envelope& env);

// Assign's KV cache types (kv_cache_type_k / _v) as kv_type_name writes them.
void set_assign_kv_types(v1::Assign* assign, KvType k, KvType v);

// One of those fields read back: nullopt when empty (the worker keeps its own flag); any other
// name not a KV type throws std::runtime_error naming the field and the valid types.
std::optional<KvType> assign_kv_type(const char* field, const std::string& wire);

}  // namespace ds::ipc
