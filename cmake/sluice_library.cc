// libsluice.so: every object comes from the layers' static libraries,
// linked whole (cmake/SluiceInstall.cmake); this file gives the target a
// source of its own.
namespace sluice::internal {
const char* LibraryName() {
  return "sluice";
}
}  // namespace sluice::internal
