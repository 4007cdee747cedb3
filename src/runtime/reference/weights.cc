#include "runtime/reference/weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

namespace sluice::reference {
std::string ShapeText(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

namespace {

using nlohmann::json;

// Elements beyond this in one tensor are refused (no product overflows).
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 34;

Status Bad(const std::string& where, const std::string& what) {
  return InvalidArgumentError(where + ": " + what);
}

bool NonNegativeInt(const json& j) {
  return j.is_number_unsigned() || (j.is_number_integer() && j.get<std::int64_t>() >= 0);
}

}  // namespace

WeightsFile::~WeightsFile() {
  if (map_ != nullptr) {
    munmap(map_, map_size_);
  }
}

Result<std::shared_ptr<const WeightsFile>> WeightsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string why = path + ": " + std::strerror(err);
    return err == ENOENT ? NotFoundError(why) : InvalidArgumentError(why);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + ": not a regular file");
  }
  std::shared_ptr<WeightsFile> file(new WeightsFile());
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > 0) {
    void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return InvalidArgumentError(path + ": mmap: " + std::strerror(err));
    }
    file->map_ = map;
    file->map_size_ = size;
  }
  ::close(fd);
  SLUICE_RETURN_IF_ERROR(file->Load(static_cast<const std::uint8_t*>(file->map_), size, path));
  return std::shared_ptr<const WeightsFile>(std::move(file));
}

Result<std::shared_ptr<const WeightsFile>> WeightsFile::Parse(std::string bytes) {
  std::shared_ptr<WeightsFile> file(new WeightsFile());
  file->owned_bytes_ = std::move(bytes);
  SLUICE_RETURN_IF_ERROR(
      file->Load(reinterpret_cast<const std::uint8_t*>(file->owned_bytes_.data()),
                 file->owned_bytes_.size(), "weights"));
  return std::shared_ptr<const WeightsFile>(std::move(file));
}

std::shared_ptr<const WeightsFile> WeightsFile::FromTensors(
    std::vector<std::pair<TensorSpec, std::vector<float>>> tensors,
    std::map<std::string, std::string> metadata) {
  std::shared_ptr<WeightsFile> file(new WeightsFile());
  std::size_t total = 0;
  for (const auto& [spec, values] : tensors) {
    total += values.size();
  }
  file->owned_.reserve(total);
  std::vector<std::size_t> starts;
  for (const auto& [spec, values] : tensors) {
    starts.push_back(file->owned_.size());
    file->owned_.insert(file->owned_.end(), values.begin(), values.end());
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    Tensor t;
    t.data = file->owned_.data() + starts[i];
    t.shape = tensors[i].first.shape;
    t.elements = tensors[i].second.size();
    file->tensors_.emplace(tensors[i].first.name, std::move(t));
  }
  file->metadata_ = std::move(metadata);
  return file;
}

Status WeightsFile::Load(const std::uint8_t* bytes, std::size_t size, const std::string& where) {
  if (size < 8) {
    return Bad(where, "truncated: " + std::to_string(size) +
                          " bytes, shorter than the 8-byte header length");
  }
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | bytes[i];
  }
  if (header_len > kMaxWeightsHeaderBytes) {
    return Bad(where, "header of " + std::to_string(header_len) + " bytes is over the " +
                          std::to_string(kMaxWeightsHeaderBytes) + "-byte cap");
  }
  if (8 + header_len > size) {
    return Bad(where, "truncated: the header of " + std::to_string(header_len) +
                          " bytes runs past the end of the " + std::to_string(size) + "-byte file");
  }
  const json header = json::parse(bytes + 8, bytes + 8 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(where, "the header is not a JSON object");
  }
  const std::uint8_t* body = bytes + 8 + header_len;
  const std::size_t body_size = size - 8 - header_len;
  // An empty body has nothing to align (and nothing a tensor may point at).
  if (body_size > 0 && reinterpret_cast<std::uintptr_t>(body) % alignof(float) != 0) {
    owned_.resize((body_size + sizeof(float) - 1) / sizeof(float));
    std::memcpy(owned_.data(), body, body_size);
    body = reinterpret_cast<const std::uint8_t*>(owned_.data());
  }
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return Bad(where, "__metadata__ is not a JSON object");
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Bad(where, "__metadata__." + key + " is not a string");
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string at = where + ": tensor " + name;
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string()) {
      return InvalidArgumentError(at + ": no string dtype");
    }
    if (entry["dtype"] != "F32") {
      return InvalidArgumentError(at + ": dtype " + entry["dtype"].get<std::string>() +
                                  ", the reference models take F32");
    }
    if (!entry.contains("shape") || !entry["shape"].is_array()) {
      return InvalidArgumentError(at + ": no shape array");
    }
    Tensor t;
    std::uint64_t elements = 1;
    for (const json& dim : entry["shape"]) {
      if (!NonNegativeInt(dim)) {
        return InvalidArgumentError(at + ": shape holds other than non-negative integers");
      }
      const std::uint64_t d = dim.get<std::uint64_t>();
      if (d > kMaxElements || (d != 0 && elements > kMaxElements / d)) {
        return InvalidArgumentError(at + ": shape has too many elements");
      }
      elements *= d;
      t.shape.push_back(static_cast<std::int64_t>(d));
    }
    const json* offsets = entry.contains("data_offsets") ? &entry["data_offsets"] : nullptr;
    if (offsets == nullptr || !offsets->is_array() || offsets->size() != 2 ||
        !NonNegativeInt((*offsets)[0]) || !NonNegativeInt((*offsets)[1])) {
      return InvalidArgumentError(at + ": data_offsets is not two non-negative integers");
    }
    const std::uint64_t begin = (*offsets)[0].get<std::uint64_t>();
    const std::uint64_t end = (*offsets)[1].get<std::uint64_t>();
    const std::string range =
        "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (begin > end) {
      return InvalidArgumentError(at + ": " + range + " end before they begin");
    }
    if (end > body_size) {
      return InvalidArgumentError(at + ": " + range + " run past the end of the " +
                                  std::to_string(body_size) + " data bytes");
    }
    if (end - begin != elements * sizeof(float)) {
      return InvalidArgumentError(at + ": " + range + " hold " + std::to_string(end - begin) +
                                  " bytes, shape " + ShapeText(t.shape) + " needs " +
                                  std::to_string(elements * sizeof(float)));
    }
    if (begin % sizeof(float) != 0) {
      return InvalidArgumentError(at + ": " + range + " do not start on a 4-byte boundary");
    }
    t.data = reinterpret_cast<const float*>(body + begin);
    t.elements = static_cast<std::size_t>(elements);
    for (std::size_t i = 0; i < t.elements; ++i) {
      if (!std::isfinite(t.data[i])) {
        return InvalidArgumentError(at + ": element " + std::to_string(i) + " is not finite");
      }
    }
    ranges.push_back({begin, end, name});
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return Bad(where, "tensors " + ranges[i - 1].name + " and " + ranges[i].name +
                            " overlap in the data");
    }
  }
  return Status::Ok();
}

Status WeightsFile::Check(const std::vector<TensorSpec>& spec) const {
  std::map<std::string_view, const TensorSpec*> want;
  for (const TensorSpec& s : spec) {
    want.emplace(s.name, &s);
  }
  for (const auto& [name, tensor] : tensors_) {
    if (want.find(name) == want.end()) {
      return InvalidArgumentError("unexpected tensor " + name + " (shape " +
                                  ShapeText(tensor.shape) + "): not part of the architecture");
    }
  }
  for (const TensorSpec& s : spec) {
    const Tensor* t = Find(s.name);
    if (t == nullptr) {
      return InvalidArgumentError("missing tensor " + s.name + " (shape " + ShapeText(s.shape) +
                                  ")");
    }
    if (t->shape != s.shape) {
      return InvalidArgumentError("tensor " + s.name + ": shape " + ShapeText(t->shape) +
                                  ", the architecture needs " + ShapeText(s.shape));
    }
  }
  return Status::Ok();
}

const WeightsFile::Tensor* WeightsFile::Find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const float* WeightsFile::Data(std::string_view name) const {
  const Tensor* t = Find(name);
  return t == nullptr ? nullptr : t->data;
}

}  // namespace sluice::reference
