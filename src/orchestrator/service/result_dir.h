// Finished jobs' result bytes as files, one per job, so a restarted
// orchestrator still serves them and its memory holds none of them. Lives
// beside the journal (a job's row names its result; the file holds it).
// Thread-safe: every call works on one job's own file; a read racing the
// removal of the same job answers kNotFound.
#ifndef SLUICE_ORCHESTRATOR_SERVICE_RESULT_DIR_H_
#define SLUICE_ORCHESTRATOR_SERVICE_RESULT_DIR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

#include "orchestrator/core/policy.h"

namespace sluice::orchestrator {

class ResultDir {
 public:
  // Opens `dir`, creating it (mode 0700, parents included) if missing, and
  // removes the partial files a crash left. Only files named
  // "<job id>.result" (and ".result.part") are ever touched. Errors: kUnavailable naming the
  // path and the system's reason (not a directory, no permission).
  static Result<std::unique_ptr<ResultDir>> Open(const std::string& dir);

  // Writes job `id`'s result (replacing an earlier one): to a partial file,
  // then renamed into place, so a reader sees all of it or none. Not
  // synced: like the journal, it survives a crash of the process, not
  // necessarily a power loss. Errors: kUnavailable naming the file and the
  // reason (disk full); no file is left behind then.
  Status Write(JobId id, std::string_view bytes);
  // Job `id`'s result. Errors: kNotFound (no file: never written, removed,
  // or deleted by hand); kUnavailable (unreadable), naming the file.
  Result<std::string> Read(JobId id) const;
  // Removes job `id`'s result; a missing file is not an error.
  void Remove(JobId id);
  // Every job that has a result here, in no order.
  std::vector<JobId> List() const;
  const std::string& path() const { return dir_; }

 private:
  explicit ResultDir(std::string dir) : dir_(std::move(dir)) {}
  std::string FileOf(JobId id) const;
  std::string dir_;
};

}  // namespace sluice::orchestrator

#endif  // SLUICE_ORCHESTRATOR_SERVICE_RESULT_DIR_H_
