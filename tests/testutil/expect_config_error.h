// A gtest check shared by the model and tower tests: running `f` throws ds::ConfigError and its
// message names `needle` (the key, tensor or input at fault).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/model_config.h"  // ConfigError

namespace ds::test {

inline void expect_config_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a ConfigError naming '" << needle << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace ds::test
