#include "orchestrator/service/result_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <system_error>

namespace sluice::orchestrator {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kSuffix = ".result";
constexpr std::string_view kPartSuffix = ".part";

Status FileError(const std::string& what, const std::string& path, int err) {
  return UnavailableError("result dir: " + what + " '" + path + "': " + ::strerror(err),
                          FailureScope::kEndpoint);
}

// Closes on scope exit. (Directory walks below use the error_code forms:
// the iterator's operator++ would throw.)
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

}  // namespace

Result<std::unique_ptr<ResultDir>> ResultDir::Open(const std::string& dir) {
  if (dir.empty()) {
    return InvalidArgumentError("result dir: the path is empty");
  }
  std::error_code ec;
  const bool created = fs::create_directories(dir, ec);
  if (ec) {
    return FileError("cannot create", dir, ec.value());
  }
  if (created) {
    ::chmod(dir.c_str(), 0700);  // Users' content. (A given dir keeps its mode.)
  }
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return FileError("cannot use", dir, errno);
  }
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().extension() == kPartSuffix) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);  // A write a crash cut short.
    }
  }
  return std::unique_ptr<ResultDir>(new ResultDir(dir));
}

std::string ResultDir::FileOf(JobId id) const {
  return dir_ + "/" + std::to_string(id) + std::string(kSuffix);
}

Status ResultDir::Write(JobId id, std::string_view bytes) {
  const std::string path = FileOf(id);
  const std::string part = path + std::string(kPartSuffix);
  Status s = [&]() -> Status {
    Fd f{::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)};
    if (f.fd < 0) {
      return FileError("cannot create", part, errno);
    }
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        return FileError("cannot write", part, n < 0 ? errno : EIO);
      }
      done += static_cast<std::size_t>(n);
    }
    if (::rename(part.c_str(), path.c_str()) != 0) {
      return FileError("cannot rename into place", part, errno);
    }
    return Status::Ok();
  }();
  if (!s.ok()) {
    ::unlink(part.c_str());
  }
  return s;
}

Result<std::string> ResultDir::Read(JobId id) const {
  const std::string path = FileOf(id);
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    if (errno == ENOENT) {
      return NotFoundError("result of job " + std::to_string(id) + " is no longer kept ('" + path +
                           "' is gone)");
    }
    return FileError("cannot open", path, errno);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    return FileError("cannot stat", path, errno);
  }
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(f.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return FileError("cannot read", path, errno);
    }
    if (n == 0) {
      break;  // Shorter than it said: replaced under us; what it holds now.
    }
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

void ResultDir::Remove(JobId id) {
  ::unlink(FileOf(id).c_str());
}

std::vector<JobId> ResultDir::List() const {
  std::vector<JobId> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) {
      continue;
    }
    JobId id = 0;
    const char* end = name.data() + name.size() - kSuffix.size();
    auto [p, err] = std::from_chars(name.data(), end, id);
    if (err == std::errc() && p == end) {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace sluice::orchestrator
