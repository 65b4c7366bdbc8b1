// model.h: the edges of the XNU emulation (tests/cc/xnu): what it does with
// a call it does not model, and the trace that tells a test which modelled
// behaviour a run went through.
//
// Contract: NotModelled() writes "xnu emulation: <what> is not modelled" to
// stderr and aborts, so a wrapper that starts using XNU beyond this model
// fails its tests loudly instead of getting Linux semantics silently.
// Trace() appends one line to the file named by $CLONESTAGE_XNU_TRACE (if
// set), so a test can check that a run took, say, the EPERM path of kill()
// rather than passing without it. Both are async-signal-safe.

#ifndef CLONESTAGE_TESTS_CC_XNU_MODEL_H_
#define CLONESTAGE_TESTS_CC_XNU_MODEL_H_

namespace clonestage {
namespace xnu {

[[noreturn]] void NotModelled(const char* what);

// Appends `line` and a newline to $CLONESTAGE_XNU_TRACE.
void Trace(const char* line);

}  // namespace xnu
}  // namespace clonestage

#endif  // CLONESTAGE_TESTS_CC_XNU_MODEL_H_
