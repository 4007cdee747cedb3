// The HTTP front's flags, shared by `sluice orchestrator` and `sluice serve`.
#ifndef SLUICE_TOOLS_HTTP_FLAGS_H_
#define SLUICE_TOOLS_HTTP_FLAGS_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sluice/orchestrator/server.h"

namespace sluice::cli {

// Declares the flags on `cmd`; the returned function writes their values
// into `*config` (call it after parsing; `config` must outlive it).
std::function<void()> AddHttpFrontFlags(CLI::App* cmd, HttpFrontConfig* config);
// Declares --max-steps, --max-images, --max-frames and --max-pixel-frames,
// writing straight into `*limits` (which must outlive the parse).
void AddRequestLimitFlags(CLI::App* cmd, RequestLimits* limits);
// Declares --http-tls-cert FILE and --http-tls-key FILE (HTTPS on the HTTP
// front); the returned function reads them into `*config` (after parsing;
// `config` must outlive it). Errors: kInvalidArgument naming the flag (one
// without the other, an unreadable file, a key others can read).
std::function<Status()> AddHttpTlsFlags(CLI::App* cmd, HttpFrontConfig* config);
// Declares --api-keys FILE; the returned function loads it into `*access`
// (after parsing). Errors: the file's (kInvalidArgument naming it).
std::function<Status()> AddApiKeysFlag(CLI::App* cmd, AccessConfig* access);
// A client's API key, never from argv (where every user sees it in the
// process list): declares --api-key-file FILE (its owner's only; the key
// trimmed) and a --api-key that is refused, naming the ways that work; the
// returned function sets `*key` from the file, else from $SLUICE_API_KEY.
// Errors: kInvalidArgument naming the flag or file.
std::function<Status()> AddApiKeyFlags(CLI::App* cmd, std::string* key);
// Declares --lora NAME[:SCALE] (repeatable): a LoRA adapter every request
// of a client command names; the returned function writes them into
// `*lora` (after parsing). Errors: kInvalidArgument naming the flag (a
// bad name, a scale outside -4..4).
std::function<Status()> AddLoraFlag(CLI::App* cmd,
                                    std::vector<std::pair<std::string, double>>* lora);

}  // namespace sluice::cli

#endif  // SLUICE_TOOLS_HTTP_FLAGS_H_
