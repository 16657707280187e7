#pragma once
// expect_error<E>(body, needles): `body` must throw E (or a subclass) whose message holds
// every string of `needles` (the key, the value, the file: what the error must name).

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace tessera::testing {

template <class E>
void expect_error(const std::function<void()>& body, const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

}  // namespace tessera::testing
