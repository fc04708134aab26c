// Command line of `deltaserve serve`, parsed in one place into the engine's options.
#pragma once

#include <string>

#include "coordinator/engine/engine.h"

namespace ds {

struct ServeOptions {
  EngineOptions engine;
};

// Parses the arguments after "serve". Returns false with `error` (usage included) on bad
// flags; `help` is set when --help was asked for.
bool parse_serve_options(int argc, char** argv, ServeOptions* out, std::string* error, bool* help);

std::string describe(const ServeOptions& options);

}  // namespace ds
