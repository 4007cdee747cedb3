// sluice/units.h
//
// Byte sizes as people type them on command lines and in config files.

#ifndef SLUICE_UNITS_H_
#define SLUICE_UNITS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice {

// Parses "4096", "64KiB", "16MiB", "2GiB", "1TiB" (binary units; also "K",
// "M", "G", "KB", "MB", "GB" meaning the same powers of 1024).
// Errors: kInvalidArgument naming the text, for an empty or non-numeric
// value, an unknown unit, or overflow.
Result<std::uint64_t> ParseByteSize(std::string_view text);

// "16MiB", "1.5GiB", "512B": the largest unit that keeps the value >= 1.
std::string FormatByteSize(std::uint64_t bytes);

}  // namespace sluice

#endif  // SLUICE_UNITS_H_
