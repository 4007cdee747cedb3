#include "common/metrics_text.h"

#include <cmath>
#include <cstdio>

namespace sluice::internal {
namespace {

void AppendEscaped(std::string& out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

void AppendNumber(std::string& out, double v) {
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  char buf[32];
  const int n = std::snprintf(buf, sizeof(buf), "%.15g", v);
  out.append(buf, static_cast<std::size_t>(n));
}

}  // namespace

void MetricsText::Family(std::string_view name, std::string_view help, std::string_view type) {
  if (openmetrics_ && type == "counter" && name.ends_with("_total")) {
    name.remove_suffix(6);  // OpenMetrics names the family; its sample is name_total.
  }
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void MetricsText::Line(std::string_view name, std::string_view suffix, MetricLabels labels,
                       std::string_view extra_label, std::string_view extra_value, double value,
                       const MetricExemplar* exemplar) {
  out_ += name;
  out_ += suffix;
  if (labels.size() > 0 || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      out_ += first ? "" : ",";
      first = false;
      out_ += k;
      out_ += "=\"";
      AppendEscaped(out_, v);
      out_ += '"';
    }
    if (!extra_label.empty()) {
      out_ += first ? "" : ",";
      out_ += extra_label;
      out_ += "=\"";
      out_ += extra_value;
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  AppendNumber(out_, value);
  if (openmetrics_ && exemplar != nullptr && !exemplar->value.empty()) {
    out_ += " # {";
    out_ += exemplar->label;
    out_ += "=\"";
    AppendEscaped(out_, exemplar->value);
    out_ += "\"} ";
    AppendNumber(out_, exemplar->observed);
  }
  out_ += '\n';
}

void MetricsText::Sample(std::string_view name, MetricLabels labels, double value) {
  Line(name, "", labels, "", "", value);
}

void MetricsText::Counter(std::string_view name, std::string_view help, double value) {
  Family(name, help, "counter");
  Sample(name, {}, value);
}

void MetricsText::Gauge(std::string_view name, std::string_view help, double value) {
  Family(name, help, "gauge");
  Sample(name, {}, value);
}

void MetricsText::Histogram(std::string_view name, MetricLabels labels,
                            std::span<const double> bounds, std::span<const std::uint64_t> counts,
                            std::uint64_t count, double sum,
                            std::span<const MetricExemplar> exemplars) {
  auto exemplar = [&](std::size_t i) { return i < exemplars.size() ? &exemplars[i] : nullptr; };
  std::uint64_t cumulative = 0;
  std::string le;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += i < counts.size() ? counts[i] : 0;
    le.clear();
    AppendNumber(le, bounds[i]);
    Line(name, "_bucket", labels, "le", le, static_cast<double>(cumulative), exemplar(i));
  }
  Line(name, "_bucket", labels, "le", "+Inf", static_cast<double>(count), exemplar(bounds.size()));
  Line(name, "_sum", labels, "", "", sum);
  Line(name, "_count", labels, "", "", static_cast<double>(count));
}

}  // namespace sluice::internal
