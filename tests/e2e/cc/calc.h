// A tiny library for the e2e cc_test: compiled, archived and linked through clonestage.
#ifndef CLONESTAGE_E2E_CC_CALC_H_
#define CLONESTAGE_E2E_CC_CALC_H_

#include <string>

namespace calc {

// Sum of the decimal digits of n (n >= 0).
int DigitSum(long long n);

// ROT13 of s: letters rotated by 13, everything else unchanged.
std::string Rot13(const std::string& s);

}  // namespace calc

#endif  // CLONESTAGE_E2E_CC_CALC_H_
