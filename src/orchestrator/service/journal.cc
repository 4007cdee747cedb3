#include "orchestrator/service/journal.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace sluice::orchestrator {
namespace {

Status SqlError(sqlite3* db, std::string_view what) {
  return UnavailableError("journal: " + std::string(what) + ": " + sqlite3_errmsg(db),
                          FailureScope::kEndpoint);
}

// Statement with automatic finalize.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

std::string PipelineText(const std::vector<std::string>& p) {
  std::string out;
  for (const std::string& s : p) {
    out += (out.empty() ? "" : ",") + s;
  }
  return out;
}

// Column `col` of the current row as text ("" for NULL).
std::string ColumnText(sqlite3_stmt* s, int col) {
  const unsigned char* t = sqlite3_column_text(s, col);
  return t == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(t));
}

}  // namespace

std::int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<JobStatus> StoredFinalStatus(std::string_view word, std::string_view journal,
                                           JobId id) {
  Result<JobStatus> s =
      ParseFinalStatus(word, std::string(journal) + ": job " + std::to_string(id));
  if (!s.ok()) {
    SLUICE_LOG(error, "{}; left out of the finished jobs served", s.status().ToString());
    return std::nullopt;
  }
  return *s;
}

bool KeepsCheckpoints(const std::string& request_json) {
  if (request_json.find("\"keep_checkpoints\"") == std::string::npos) {
    return false;
  }
  const auto j = nlohmann::json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("keep_checkpoints") && j["keep_checkpoints"].is_boolean() &&
         j["keep_checkpoints"].get<bool>();
}

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& path) {
  // Every tenant's prompts live here: a new journal is its owner's only
  // (SQLite gives its -wal and -shm files the same mode).
  if (const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600); fd >= 0) {
    ::close(fd);
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    Status s = UnavailableError("journal: cannot open '" + path +
                                    "': " + (db != nullptr ? sqlite3_errmsg(db) : "out of memory"),
                                FailureScope::kEndpoint);
    sqlite3_close(db);
    return s;
  }
  std::unique_ptr<Journal> j(new Journal(db));
  SLUICE_RETURN_IF_ERROR(j->Exec("PRAGMA journal_mode=WAL"));
  SLUICE_RETURN_IF_ERROR(j->Exec("PRAGMA synchronous=NORMAL"));
  SLUICE_RETURN_IF_ERROR(
      j->Exec("CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
              "request TEXT NOT NULL, pipeline TEXT NOT NULL, priority INTEGER NOT NULL, "
              "deadline_unix_ms INTEGER, affinity TEXT NOT NULL, status TEXT NOT NULL, "
              "created_unix_ms INTEGER NOT NULL)"));
  SLUICE_RETURN_IF_ERROR(j->Exec("CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status)"));
  // Added later: a journal from before gets the columns (rows without a
  // name keep the "job-<id>" their clients were given; rows without a
  // model run on the default model).
  for (const char* column :
       {"name", "tenant", "model", "model_stages", "error", "error_type", "result_type"}) {
    SLUICE_ASSIGN_OR_RETURN(bool has, j->HasColumn("jobs", column));
    if (!has) {
      SLUICE_RETURN_IF_ERROR(j->Exec(
          (std::string("ALTER TABLE jobs ADD COLUMN ") + column + " TEXT NOT NULL DEFAULT ''")
              .c_str()));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(bool has_finished, j->HasColumn("jobs", "finished_unix_s"));
  if (!has_finished) {
    SLUICE_RETURN_IF_ERROR(
        j->Exec("ALTER TABLE jobs ADD COLUMN finished_unix_s INTEGER NOT NULL DEFAULT 0"));
  }
  // A succeeded job's final output, while it is kept.
  SLUICE_RETURN_IF_ERROR(j->Exec(
      "CREATE TABLE IF NOT EXISTS results (job_id INTEGER PRIMARY KEY, bytes BLOB NOT NULL)"));
  // One row per unfinished job that got somewhere; keys is a JSON array.
  SLUICE_RETURN_IF_ERROR(
      j->Exec("CREATE TABLE IF NOT EXISTS progress (job_id INTEGER PRIMARY KEY, done_stage TEXT, "
              "output BLOB NOT NULL, keys TEXT NOT NULL, checkpoint_step INTEGER NOT NULL)"));
  // Steps kept for edit and resume, while their checkpoints are retained.
  SLUICE_RETURN_IF_ERROR(
      j->Exec("CREATE TABLE IF NOT EXISTS kept (job_id INTEGER NOT NULL, step INTEGER NOT NULL, "
              "unix_ms INTEGER NOT NULL, PRIMARY KEY (job_id, step))"));
  return j;
}

Journal::~Journal() {
  sqlite3_close(db_);
}

Status Journal::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    Status s = UnavailableError(std::string("journal: ") + (err != nullptr ? err : "error"),
                                FailureScope::kEndpoint);
    sqlite3_free(err);
    return s;
  }
  return Status::Ok();
}

Result<bool> Journal::HasColumn(const char* table, const char* column) {
  Stmt st;
  const std::string sql =
      std::string("SELECT 1 FROM pragma_table_info('") + table + "') WHERE name = '" + column + "'";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare table_info");
  }
  return sqlite3_step(st.s) == SQLITE_ROW;
}

Status Journal::Add(JobId id, const JobRequest& r, const std::vector<StageDecl>& model_stages) {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO jobs (id, kind, request, pipeline, priority, "
                         "deadline_unix_ms, affinity, status, created_unix_ms, name, tenant, "
                         "model, model_stages) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, 'accepted', ?, ?, ?, ?, ?)",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare insert");
  }
  const std::string pipeline = PipelineText(r.pipeline);
  const std::string stages = FormatPipeline(model_stages);
  const std::int64_t now = NowUnixMs();
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(id));
  sqlite3_bind_text(st.s, 2, r.kind.data(), static_cast<int>(r.kind.size()), SQLITE_STATIC);
  sqlite3_bind_text(st.s, 3, r.request_json.data(), static_cast<int>(r.request_json.size()),
                    SQLITE_STATIC);
  sqlite3_bind_text(st.s, 4, pipeline.data(), static_cast<int>(pipeline.size()), SQLITE_STATIC);
  sqlite3_bind_int(st.s, 5, static_cast<int>(r.priority));
  if (r.deadline.has_value()) {
    sqlite3_bind_int64(st.s, 6, now + r.deadline->count());
  } else {
    sqlite3_bind_null(st.s, 6);
  }
  sqlite3_bind_text(st.s, 7, r.affinity.data(), static_cast<int>(r.affinity.size()), SQLITE_STATIC);
  sqlite3_bind_int64(st.s, 8, now);
  sqlite3_bind_text(st.s, 9, r.name.data(), static_cast<int>(r.name.size()), SQLITE_STATIC);
  sqlite3_bind_text(st.s, 10, r.tenant.data(), static_cast<int>(r.tenant.size()), SQLITE_STATIC);
  sqlite3_bind_text(st.s, 11, r.model.data(), static_cast<int>(r.model.size()), SQLITE_STATIC);
  sqlite3_bind_text(st.s, 12, stages.data(), static_cast<int>(stages.size()), SQLITE_STATIC);
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return SqlError(db_, "insert job " + std::to_string(id));
  }
  return Status::Ok();
}

Status Journal::SaveProgress(JobId id, const JobProgress& p) {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO progress (job_id, done_stage, output, keys, "
                         "checkpoint_step) VALUES (?, ?, ?, ?, ?)",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare progress");
  }
  // Keys come from workers: invalid UTF-8 is replaced (such a key then
  // never matches a stored object, and the job runs from its first stage).
  const std::string keys =
      nlohmann::json(p.keys).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(id));
  if (p.done.has_value()) {
    const std::string& stage = *p.done;
    sqlite3_bind_text(st.s, 2, stage.data(), static_cast<int>(stage.size()), SQLITE_STATIC);
  } else {
    sqlite3_bind_null(st.s, 2);
  }
  sqlite3_bind_blob(st.s, 3, p.output.data(), static_cast<int>(p.output.size()), SQLITE_STATIC);
  sqlite3_bind_text(st.s, 4, keys.data(), static_cast<int>(keys.size()), SQLITE_STATIC);
  sqlite3_bind_int(st.s, 5, p.checkpoint_step);
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return SqlError(db_, "save progress of job " + std::to_string(id));
  }
  return Status::Ok();
}

Status Journal::Finish(JobId id, const JobOutcome& o) {
  MutexLock lock(mu_);
  Stmt st, gone, result;
  if (sqlite3_prepare_v2(db_,
                         "UPDATE jobs SET status = ?, error = ?, error_type = ?, result_type = ?, "
                         "finished_unix_s = ? WHERE id = ?",
                         -1, &st.s, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db_, "DELETE FROM progress WHERE job_id = ?", -1, &gone.s, nullptr) !=
          SQLITE_OK ||
      sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO results (job_id, bytes) VALUES (?, ?)", -1,
                         &result.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare update");
  }
  auto text = [](sqlite3_stmt* s, int col, std::string_view v) {
    sqlite3_bind_text(s, col, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  };
  text(st.s, 1, JobStatusName(o.status));
  text(st.s, 2, o.error);
  text(st.s, 3, o.error_type);
  text(st.s, 4, o.result_type);
  sqlite3_bind_int64(st.s, 5, static_cast<sqlite3_int64>(o.finished_unix_s));
  sqlite3_bind_int64(st.s, 6, static_cast<sqlite3_int64>(id));
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return SqlError(db_, "update job " + std::to_string(id));
  }
  sqlite3_bind_int64(gone.s, 1, static_cast<sqlite3_int64>(id));
  if (sqlite3_step(gone.s) != SQLITE_DONE) {
    return SqlError(db_, "drop the progress of job " + std::to_string(id));
  }
  if (o.status == JobStatus::kSucceeded) {
    sqlite3_bind_int64(result.s, 1, static_cast<sqlite3_int64>(id));
    sqlite3_bind_blob64(result.s, 2, o.result.data(), o.result.size(), SQLITE_STATIC);
    if (sqlite3_step(result.s) != SQLITE_DONE) {
      return SqlError(db_, "keep the result of job " + std::to_string(id));
    }
  }
  return Status::Ok();
}

Result<std::vector<FinishedRecord>> Journal::Finished(std::size_t keep, std::int64_t since_unix_s) {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "SELECT * FROM (SELECT id, kind, request, name, tenant, model, status, "
                         "error, error_type, result_type, created_unix_ms, finished_unix_s, "
                         "bytes FROM jobs LEFT JOIN results ON results.job_id = jobs.id "
                         "WHERE status != 'accepted' AND finished_unix_s >= ? "
                         "ORDER BY finished_unix_s DESC, id DESC LIMIT ?) "
                         "ORDER BY finished_unix_s, id",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare select finished");
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(since_unix_s));
  sqlite3_bind_int64(st.s, 2, static_cast<sqlite3_int64>(keep));
  std::vector<FinishedRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    auto text = [&](int col) { return ColumnText(st.s, col); };
    FinishedRecord f;
    f.id = static_cast<JobId>(sqlite3_column_int64(st.s, 0));
    f.request.kind = text(1);
    f.request.request_json = text(2);
    f.request.keep_checkpoints = KeepsCheckpoints(f.request.request_json);
    f.request.name = text(3);
    f.request.tenant = text(4);
    f.request.model = text(5);
    const std::optional<JobStatus> status = StoredFinalStatus(text(6), "journal", f.id);
    if (!status.has_value()) {
      continue;
    }
    f.status = *status;
    f.error = text(7);
    f.error_type = text(8);
    f.result_type = text(9);
    f.created_unix_s = sqlite3_column_int64(st.s, 10) / 1000;
    f.finished_unix_s = sqlite3_column_int64(st.s, 11);
    if (const auto* blob = static_cast<const char*>(sqlite3_column_blob(st.s, 12));
        blob != nullptr) {
      f.result.assign(blob, static_cast<std::size_t>(sqlite3_column_bytes(st.s, 12)));
    }
    out.push_back(std::move(f));
  }
  if (rc != SQLITE_DONE) {
    return SqlError(db_, "select finished");
  }
  return out;
}

Status Journal::Keep(const KeptCheckpoint& k) {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR IGNORE INTO kept (job_id, step, unix_ms) VALUES (?, ?, ?)",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare keep");
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(k.job));
  sqlite3_bind_int64(st.s, 2, k.step);
  sqlite3_bind_int64(st.s, 3, k.unix_ms);
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return SqlError(db_, "keep checkpoint");
  }
  return Status::Ok();
}

Result<std::vector<KeptCheckpoint>> Journal::Kept() {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "SELECT job_id, step, unix_ms FROM kept WHERE job_id IN "
                         "(SELECT id FROM jobs) ORDER BY job_id, step",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare kept");
  }
  std::vector<KeptCheckpoint> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    out.push_back({static_cast<JobId>(sqlite3_column_int64(st.s, 0)), sqlite3_column_int(st.s, 1),
                   sqlite3_column_int64(st.s, 2)});
  }
  if (rc != SQLITE_DONE) {
    return SqlError(db_, "select kept");
  }
  return out;
}

Status Journal::Prune(std::size_t keep, std::int64_t since_unix_s,
                      std::int64_t kept_since_unix_ms) {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "DELETE FROM jobs WHERE status != 'accepted' AND (finished_unix_s < ? OR "
                         "id NOT IN (SELECT id FROM jobs WHERE status != 'accepted' ORDER BY "
                         "finished_unix_s DESC, id DESC LIMIT ?))",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare prune");
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(since_unix_s));
  sqlite3_bind_int64(st.s, 2, static_cast<sqlite3_int64>(keep));
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return SqlError(db_, "prune finished jobs");
  }
  SLUICE_RETURN_IF_ERROR(Exec("DELETE FROM results WHERE job_id NOT IN (SELECT id FROM jobs)"));
  Stmt kept;
  if (sqlite3_prepare_v2(
          db_, "DELETE FROM kept WHERE unix_ms < ? OR job_id NOT IN (SELECT id FROM jobs)", -1,
          &kept.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare prune kept");
  }
  sqlite3_bind_int64(kept.s, 1, kept_since_unix_ms);
  if (sqlite3_step(kept.s) != SQLITE_DONE) {
    return SqlError(db_, "prune kept checkpoints");
  }
  return Status::Ok();
}

Result<std::vector<JournaledJob>> Journal::Unfinished() {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(
          db_,
          "SELECT id, kind, request, pipeline, priority, deadline_unix_ms, "
          "affinity, done_stage, output, keys, checkpoint_step, name, tenant, model, "
          "model_stages "
          "FROM jobs LEFT JOIN "
          "progress ON progress.job_id = jobs.id WHERE status = 'accepted' "
          "ORDER BY id",
          -1, &st.s, nullptr) != SQLITE_OK) {
    return SqlError(db_, "prepare select");
  }
  std::vector<JournaledJob> out;
  const std::int64_t now = NowUnixMs();
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    JobRequest r;
    const JobId id = static_cast<JobId>(sqlite3_column_int64(st.s, 0));
    auto text = [&](int col) { return ColumnText(st.s, col); };
    r.kind = text(1);
    r.request_json = text(2);
    r.keep_checkpoints = KeepsCheckpoints(r.request_json);
    Result<std::vector<StageDecl>> pipe = ParsePipeline(text(3));
    if (!pipe.ok()) {
      return pipe.status().WithContext("journal row " + std::to_string(id));
    }
    for (StageDecl& d : *pipe) {
      r.pipeline.push_back(std::move(d.name));
    }
    const int prio = sqlite3_column_int(st.s, 4);
    r.priority = static_cast<PriorityClass>(std::clamp(prio, 0, kClassCount - 1));
    if (sqlite3_column_type(st.s, 5) != SQLITE_NULL) {
      r.deadline =
          std::chrono::milliseconds(std::max<std::int64_t>(1, sqlite3_column_int64(st.s, 5) - now));
    }
    r.affinity = text(6);
    r.name = text(11);
    r.tenant = text(12);
    r.model = text(13);
    JournaledJob job{id, std::move(r), {}, {}};
    if (const std::string stages = text(14); !stages.empty()) {
      Result<std::vector<StageDecl>> decl = ParsePipeline(stages);
      if (!decl.ok()) {
        return decl.status().WithContext("journal row " + std::to_string(id) + ": model_stages");
      }
      job.model_stages = std::move(*decl);
    }
    if (sqlite3_column_type(st.s, 7) != SQLITE_NULL) {
      // A row this journal wrote; anything unreadable in it only costs the
      // job its progress (it runs from its first stage).
      const std::string done = text(7);
      const auto* blob = static_cast<const char*>(sqlite3_column_blob(st.s, 8));
      const auto keys = nlohmann::json::parse(text(9), nullptr, /*allow_exceptions=*/false);
      if (ValidateStageName(done).ok() && keys.is_array() &&
          std::all_of(keys.begin(), keys.end(), [](const auto& k) { return k.is_string(); })) {
        job.progress.done = done;
        job.progress.output.assign(blob == nullptr ? "" : blob,
                                   static_cast<std::size_t>(sqlite3_column_bytes(st.s, 8)));
        job.progress.keys = keys.get<std::vector<std::string>>();
      }
    }
    if (sqlite3_column_type(st.s, 10) != SQLITE_NULL) {
      job.progress.checkpoint_step = std::max(0, sqlite3_column_int(st.s, 10));
    }
    out.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) {
    return SqlError(db_, "select unfinished");
  }
  return out;
}

Result<JobId> Journal::MaxId() {
  MutexLock lock(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT COALESCE(MAX(id), 0) FROM jobs", -1, &st.s, nullptr) !=
          SQLITE_OK ||
      sqlite3_step(st.s) != SQLITE_ROW) {
    return SqlError(db_, "max id");
  }
  return static_cast<JobId>(sqlite3_column_int64(st.s, 0));
}

}  // namespace sluice::orchestrator
