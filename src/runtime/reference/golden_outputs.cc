// Golden outputs of the reference pipeline: the SHA-256 of a fixed image
// (PNG), a short video (frames archive) and one denoise checkpoint (the
// latent after step 6 of 12, the bytes a checkpoint stores) from one set
// of weights, checked against committed values. Every end-to-end test
// compares a served result with GenerateAll from the same library; these
// hashes are what pins GenerateAll itself, so a deterministic change to
// the networks, the sampler, the decoder or the PNG encoding fails here.
//
//   reference_golden --weights W --check tests/golden/FILE   (exit 1 on a mismatch)
//   reference_golden --weights W --write tests/golden/FILE   (refresh, on an intended change)
//
// W: a safetensors file or random:SEED (models.h). FILE lines: "NAME SHA256".
#include <openssl/evp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/reference/models.h"
#include "runtime/reference/pipeline.h"

namespace sluice::reference {
namespace {

std::string Sha256Hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

Result<Request> Parse(std::string_view json) {
  return ParseRequest(json, 12, 4.0f);
}

// NAME → SHA-256 of each golden output.
Result<std::map<std::string, std::string>> Compute() {
  std::map<std::string, std::string> out;
  SLUICE_ASSIGN_OR_RETURN(
      Request image, Parse(R"({"prompt":"a large red circle on the left on a blue background",)"
                           R"("size":"128x128","seed":1,"steps":12,"guidance":4})"));
  SLUICE_ASSIGN_OR_RETURN(auto png, GenerateAll(image));
  out["image_png"] = Sha256Hex(png.first);

  SLUICE_ASSIGN_OR_RETURN(
      Request video,
      Parse(R"({"prompt":"a small yellow circle moving right on a black background",)"
            R"("size":"64x64","frames":5,"seed":7,"steps":6,"guidance":4})"));
  SLUICE_ASSIGN_OR_RETURN(auto frames, GenerateAll(video));
  out["video_frames"] = Sha256Hex(frames.first);

  // The checkpoint of step 6: what the denoise stage stores (raw floats).
  const std::vector<float> cond = EncodeCondition(image);
  std::vector<float> x = InitialNoise(image);
  for (int step = 0; step < 6; ++step) {
    DenoiseStep(image, cond.data(), step, x);
  }
  out["checkpoint_step6"] = Sha256Hex(
      std::string_view(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
  return out;
}

Result<std::map<std::string, std::string>> ReadGolden(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return NotFoundError("cannot read " + path);
  }
  std::map<std::string, std::string> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty() || line[0] == '#') {
      continue;
    }
    std::istringstream in(line);
    std::string name, sha, extra;
    if (!(in >> name >> sha) || (in >> extra) || sha.size() != 64) {
      return InvalidArgumentError(path + ":" + std::to_string(n) + ": want \"NAME SHA256\"");
    }
    out[name] = sha;
  }
  return out;
}

int Main(int argc, char** argv) {
  CLI::App app{"Golden SHA-256 of the reference pipeline's outputs"};
  std::string weights, check, write;
  app.add_option("--weights", weights, "safetensors file or random:SEED")->required();
  auto* c = app.add_option("--check", check, "compare with this file; exit 1 on a mismatch");
  auto* w = app.add_option("--write", write, "write this file (on an intended change)");
  c->excludes(w);
  w->excludes(c);
  CLI11_PARSE(app, argc, argv);
  if (check.empty() && write.empty()) {
    std::fprintf(stderr, "reference_golden: give --check FILE or --write FILE\n");
    return 2;
  }
  if (Status s = LoadReferenceModels(weights); !s.ok()) {
    std::fprintf(stderr, "reference_golden: --weights: %s\n", s.ToString().c_str());
    return 2;
  }
  auto got = Compute();
  if (!got.ok()) {
    std::fprintf(stderr, "reference_golden: %s\n", got.status().ToString().c_str());
    return 1;
  }
  if (!write.empty()) {
    std::ofstream f(write);
    f << "# SHA-256 of the reference pipeline's outputs (src/runtime/reference/golden_outputs.cc)\n"
      << "# weights: " << weights << "\n";
    for (const auto& [name, sha] : *got) {
      f << name << " " << sha << "\n";
    }
    f.close();
    if (!f) {
      std::fprintf(stderr, "reference_golden: cannot write %s\n", write.c_str());
      return 1;
    }
    std::printf("golden: wrote %zu hashes to %s\n", got->size(), write.c_str());
    return 0;
  }
  auto want = ReadGolden(check);
  if (!want.ok()) {
    std::fprintf(stderr, "reference_golden: --check: %s\n", want.status().ToString().c_str());
    return 2;
  }
  int bad = 0;
  for (const auto& [name, sha] : *got) {
    auto it = want->find(name);
    if (it == want->end()) {
      std::printf("golden: %s missing from %s (got %s)\n", name.c_str(), check.c_str(),
                  sha.c_str());
      ++bad;
    } else if (it->second != sha) {
      std::printf("golden: %s differs: want %s, got %s\n", name.c_str(), it->second.c_str(),
                  sha.c_str());
      ++bad;
    }
  }
  if (want->size() != got->size()) {
    std::printf("golden: %s holds %zu hashes, computed %zu\n", check.c_str(), want->size(),
                got->size());
    ++bad;
  }
  if (bad > 0) {
    std::printf(
        "golden: %d mismatch(es). If the change is intended, refresh with\n"
        "  reference_golden --weights %s --write %s\n",
        bad, weights.c_str(), check.c_str());
    return 1;
  }
  std::printf("golden: %zu outputs match %s\n", got->size(), check.c_str());
  return 0;
}

}  // namespace
}  // namespace sluice::reference

int main(int argc, char** argv) {
  return sluice::reference::Main(argc, argv);
}
