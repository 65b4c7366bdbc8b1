// The e2e cc_test: plain asserts, exit status 1 on the first mismatch.
#include <cstdio>
#include <string>

#include "cc/calc.h"

namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

}  // namespace

int main() {
  Expect(calc::DigitSum(0) == 0, "DigitSum(0) == 0");
  Expect(calc::DigitSum(12345) == 15, "DigitSum(12345) == 15");
  Expect(calc::Rot13("Hello, clonestage!") == "Uryyb, pybarfgntr!", "Rot13 rotates letters only");
  Expect(calc::Rot13(calc::Rot13("round trip")) == "round trip", "Rot13 twice is the identity");
  return failures == 0 ? 0 : 1;
}
