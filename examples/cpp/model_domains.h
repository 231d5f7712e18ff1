// The ONNX domains a model file asks for, with the version of each, read
// before ONNX Runtime loads the model: the opset imports and opbridge's
// "opbridge.domain_version.<domain>" metadata (the higher of the two per
// domain, as opbridge.runtimes.onnxruntime.check_domain_version takes them).
//
// ONNX Runtime does not compare a custom domain's version with the
// library's (a model of a newer domain version loads, and runs the older
// kernels), so a host checks them itself; reading the file here, rather
// than the session's metadata, refuses the model before a kernel of the
// wrong version sees it.
//
// Only the top level of the ModelProto is read (fields 8, opset_import,
// and 14, metadata_props, in onnx.proto3); the graph and its weights are
// skipped unread, so the cost does not grow with the model.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace opbridge_host {

inline constexpr const char kDomainVersionKey[] = "opbridge.domain_version.";

namespace detail {

// A protobuf varint from the stream; false at the end of the stream or on
// one longer than 10 bytes.
inline bool ReadVarint(std::istream& in, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    const int byte = in.get();
    if (byte == std::char_traits<char>::eof()) return false;
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The fields of one embedded message (its bytes in `body`): string fields 1
// and 2, and field 2 as a varint (OperatorSetIdProto.version).
struct Pair {
  std::string first;
  std::string second;
  int64_t number = 0;
};

inline bool ReadPair(const std::string& body, Pair* pair) {
  std::istringstream in(body);
  uint64_t key = 0;
  while (ReadVarint(in, &key)) {
    const uint64_t field = key >> 3;
    const uint64_t wire = key & 7;
    uint64_t value = 0;
    if (wire == 0) {
      if (!ReadVarint(in, &value)) return false;
      if (field == 2) pair->number = static_cast<int64_t>(value);
    } else if (wire == 2) {
      if (!ReadVarint(in, &value) || value > body.size()) return false;
      std::string text(value, '\0');
      if (!in.read(text.data(), static_cast<std::streamsize>(value))) return false;
      if (field == 1) pair->first = text;
      if (field == 2) pair->second = text;
    } else if (wire == 1 || wire == 5) {
      in.ignore(wire == 1 ? 8 : 4);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace detail

// domain -> the version the model needs. False, with `error` set, when the
// file cannot be read as a ModelProto.
inline bool ReadModelDomains(const std::string& path, std::map<std::string, int64_t>* domains,
                             std::string* error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    *error = "cannot open " + path;
    return false;
  }
  const std::streamoff size = in.tellg();
  in.seekg(0);
  const std::string damaged = path + " is not a readable ONNX model (a truncated or damaged ModelProto)";
  std::map<std::string, int64_t> opsets;
  std::map<std::string, int64_t> metadata;
  while (static_cast<std::streamoff>(in.tellg()) < size) {
    uint64_t key = 0;
    if (!detail::ReadVarint(in, &key)) {
      *error = damaged;
      return false;
    }
    const uint64_t field = key >> 3;
    const uint64_t wire = key & 7;
    uint64_t value = 0;
    bool ok = true;
    if (wire == 0) {
      ok = detail::ReadVarint(in, &value);
    } else if (wire == 1 || wire == 5) {
      ok = static_cast<bool>(in.ignore(wire == 1 ? 8 : 4));
    } else if (wire == 2) {
      ok = detail::ReadVarint(in, &value) &&
           static_cast<std::streamoff>(value) <= size - static_cast<std::streamoff>(in.tellg());
      if (ok && (field == 8 || field == 14)) {
        std::string body(value, '\0');
        detail::Pair pair;
        ok = in.read(body.data(), static_cast<std::streamsize>(value)) && detail::ReadPair(body, &pair);
        if (ok && field == 8) opsets[pair.first] = pair.number;
        if (ok && field == 14 && pair.first.rfind(kDomainVersionKey, 0) == 0) {
          const std::string domain = pair.first.substr(sizeof(kDomainVersionKey) - 1);
          char* end = nullptr;
          const long long version = std::strtoll(pair.second.c_str(), &end, 10);
          // A value that is not a number is not a version (as in Python).
          if (!pair.second.empty() && *end == '\0') metadata[domain] = version;
        }
      } else if (ok) {
        ok = static_cast<bool>(in.seekg(static_cast<std::streamoff>(value), std::ios::cur));
      }
    } else {
      ok = false;
    }
    if (!ok || !in) {
      *error = damaged;
      return false;
    }
  }
  *domains = opsets;
  for (const auto& [domain, version] : metadata) {
    auto found = domains->find(domain);
    if (found == domains->end() || found->second < version) (*domains)[domain] = version;
  }
  return true;
}

}  // namespace opbridge_host
