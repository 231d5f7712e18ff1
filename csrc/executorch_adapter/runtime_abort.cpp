// ExecuTorch's header-inline checks (ET_CHECK, in EValue::toTensor() and the
// like) end in executorch::runtime::runtime_abort(), which the wheel's
// runtime does not export. The kernels check every value's kind before they
// read it (kernels.cpp), so these checks cannot fail; this definition, hidden
// in the library (exports.map), gives them the runtime's own behavior: the
// process aborts.
#include <executorch/runtime/platform/abort.h>

#include <cstdlib>

namespace executorch {
namespace runtime {

void runtime_abort() { std::abort(); }

}  // namespace runtime
}  // namespace executorch
