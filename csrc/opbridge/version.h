// The library version, stamped into every exported model as opbridge.version.
#pragma once

#ifndef OPBRIDGE_VERSION
#error "OPBRIDGE_VERSION must be defined by the build"
#endif

namespace opbridge {
inline constexpr const char* kVersion = OPBRIDGE_VERSION;
}  // namespace opbridge
