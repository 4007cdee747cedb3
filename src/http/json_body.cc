#include "http/json_body.h"

namespace sluice::http {
namespace {

using nlohmann::json;

// Counts nesting; stops the parse past the limit or at a syntax error.
class DepthCheck final : public nlohmann::json_sax<json> {
 public:
  explicit DepthCheck(std::size_t max_depth) : max_(max_depth) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Enter(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception&) override {
    error_at_ = position;
    return false;
  }

  bool too_deep() const { return too_deep_; }
  std::size_t error_at() const { return error_at_; }

 private:
  bool Enter() {
    too_deep_ = ++depth_ > max_;
    return !too_deep_;
  }
  bool Leave() {
    --depth_;
    return true;
  }
  std::size_t max_;
  std::size_t depth_ = 0;
  bool too_deep_ = false;
  std::size_t error_at_ = 0;
};

}  // namespace

Result<json> ParseJsonBody(std::string_view body, std::size_t max_depth) {
  DepthCheck check(max_depth);
  if (!json::sax_parse(body, &check)) {
    if (check.too_deep()) {
      return InvalidArgumentError("body: JSON nested deeper than " + std::to_string(max_depth) +
                                  " levels");
    }
    return InvalidArgumentError("body: not valid JSON (at byte " +
                                std::to_string(check.error_at()) + ")");
  }
  return json::parse(body, nullptr, /*allow_exceptions=*/false);
}

}  // namespace sluice::http
