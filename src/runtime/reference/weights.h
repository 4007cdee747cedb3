// Weights of the reference models in the safetensors format: an 8-byte
// little-endian header length N, N bytes of a JSON object naming each
// tensor's dtype, shape and byte range ("data_offsets", from the end of the
// header) plus an optional "__metadata__" object of strings, then the
// tensors' bytes. The reference models take little-endian float32 ("F32")
// tensors only.
//
// A file is mapped read-only and validated whole before any tensor is
// handed out; tensors point into the mapping (no copy), which lives as long
// as the WeightsFile. Thread safety: immutable after Open / Parse.
#ifndef SLUICE_RUNTIME_REFERENCE_WEIGHTS_H_
#define SLUICE_RUNTIME_REFERENCE_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::reference {

// The largest header accepted (ours is ~12 KiB).
inline constexpr std::size_t kMaxWeightsHeaderBytes = std::size_t{1} << 20;

// One tensor's name and shape, as an architecture expects it.
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
};

// "[a, b, ...]": a shape in error messages.
std::string ShapeText(const std::vector<std::int64_t>& shape);

class WeightsFile {
 public:
  struct Tensor {
    const float* data = nullptr;  // Points into the file's bytes.
    std::vector<std::int64_t> shape;
    std::size_t elements = 0;
  };

  // Maps `path` and validates it (Parse's checks). Errors: kNotFound (no
  // such file), kInvalidArgument naming the path and what is wrong.
  static Result<std::shared_ptr<const WeightsFile>> Open(const std::string& path);

  // Validates the bytes of a file (copied once when not 4-byte aligned).
  // Refused with kInvalidArgument naming the tensor and the problem: fewer
  // than 8 bytes; a header over kMaxWeightsHeaderBytes or past the end; a
  // header that is not a JSON object; an entry without a string dtype, an
  // integer shape or two integer data_offsets; a dtype other than F32;
  // offsets past the end of the data, out of order, or holding other than
  // 4 × the shape's elements bytes; two tensors' bytes overlapping; a
  // "__metadata__" that is not an object of strings; a value that is not
  // finite (NaN or infinity).
  static Result<std::shared_ptr<const WeightsFile>> Parse(std::string bytes);

  // An in-memory file holding `tensors` (name, shape, values), for random
  // weights. REQUIRES each value count to match its shape.
  static std::shared_ptr<const WeightsFile> FromTensors(
      std::vector<std::pair<TensorSpec, std::vector<float>>> tensors,
      std::map<std::string, std::string> metadata = {});

  // OK when the file holds exactly the tensors of `spec` with those
  // shapes. Errors: kInvalidArgument naming the first missing or
  // unexpected tensor or the first shape that disagrees.
  Status Check(const std::vector<TensorSpec>& spec) const;

  // The tensor `name`, or null. The pointer lives as long as this file.
  const Tensor* Find(std::string_view name) const;
  // Find's data. REQUIRES the tensor to exist (Check passed).
  const float* Data(std::string_view name) const;

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::size_t tensor_count() const { return tensors_.size(); }

  ~WeightsFile();
  WeightsFile(const WeightsFile&) = delete;
  WeightsFile& operator=(const WeightsFile&) = delete;

 private:
  WeightsFile() = default;
  // Validates the file of `size` bytes at `bytes` (4-byte aligned) and
  // fills tensors_ and metadata_. `where` names the file in errors.
  Status Load(const std::uint8_t* bytes, std::size_t size, const std::string& where);

  void* map_ = nullptr;  // The mapping (Open), unmapped on destruction.
  std::size_t map_size_ = 0;
  std::vector<float> owned_;  // FromTensors' values, or an aligned copy.
  std::string owned_bytes_;   // Parse's bytes.
  std::map<std::string, Tensor, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace sluice::reference

#endif  // SLUICE_RUNTIME_REFERENCE_WEIGHTS_H_
