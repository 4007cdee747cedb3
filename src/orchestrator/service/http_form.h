// A multipart/form-data body (OpenAI's SDKs: images.edit, videos.create)
// as the JSON body it stands for, so forms and JSON requests go through
// one validation (http_request.h).
#ifndef SLUICE_ORCHESTRATOR_SERVICE_HTTP_FORM_H_
#define SLUICE_ORCHESTRATOR_SERVICE_HTTP_FORM_H_

#include <cstddef>
#include <string>
#include <vector>

#include "sluice/status.h"

#include "http/multipart.h"

namespace sluice::orchestrator {

// The largest picture a form may carry.
inline constexpr std::size_t kMaxFormPictureBytes = 4 << 20;

// `parts` as a JSON object. Every field is text: sluice's integer fields,
// strength and guidance become numbers, async a boolean. The object
// fields take either form a client sends: JSON text (`step_cache` =
// `{"threshold":0.2}`, `lora` = `[{"name":"mirror","scale":1}]`), or the
// brackets OpenAI's SDKs write for nested values (`step_cache[threshold]`,
// and per adapter `lora[][name]`, `lora[][scale]`, a new adapter starting
// where a name or scale repeats); their values are checked where JSON
// bodies' are. The one file part named `picture_field` (images.edit also
// sends "image[]"), if any, moves to `*picture` (at most
// kMaxFormPictureBytes); `job` names the request in errors ("edit",
// "video"). Errors: kInvalidArgument naming the field (a mask, a second
// picture, a file where text belongs, a field given twice, malformed JSON
// or brackets).
Result<std::string> FormAsJson(std::vector<http::FormPart> parts, const std::string& picture_field,
                               const std::string& job, std::string* picture);

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_HTTP_FORM_H_
