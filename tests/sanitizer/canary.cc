// Sanitizer canaries: each mode commits one error on purpose and then
// prints "canary: survived" and exits 0. In the sanitizer build each must
// be caught -- the process halts with the sanitizer's report -- which
// proves that an error of that kind anywhere in a test would fail it
// (tests/sanitizer/CMakeLists.txt).
// Usage: sanitizer_canary ub|leak|heap
#include <climits>
#include <cstdio>
#include <cstring>

namespace {

// Read through volatile so the compiler cannot fold or drop the errors.
volatile int g_max = INT_MAX;
int* volatile g_leak = nullptr;

int SignedOverflow() {
  int v = g_max;
  return v + 1;  // Undefined: signed overflow.
}

void Leak() {
  g_leak = new int[1024];
  g_leak[0] = 1;
  g_leak = nullptr;  // The only pointer is gone: a leak at exit.
}

int HeapOverflow() {
  char* p = new char[16];
  std::memset(p, 0, 16);
  volatile int i = 16;
  const int v = p[i];  // One past the end.
  delete[] p;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sanitizer_canary ub|leak|heap\n");
    return 2;
  }
  int sink = 0;
  if (std::strcmp(argv[1], "ub") == 0) {
    sink = SignedOverflow();
  } else if (std::strcmp(argv[1], "leak") == 0) {
    Leak();
  } else if (std::strcmp(argv[1], "heap") == 0) {
    sink = HeapOverflow();
  } else {
    std::fprintf(stderr, "sanitizer_canary: unknown mode '%s' (ub, leak, heap)\n", argv[1]);
    return 2;
  }
  std::printf("canary: survived (%d)\n", sink);
  return 0;
}
