// Latency and loss on a test host's link where the kernel has no netem:
// the host's outgoing packets are queued to this process (an nftables
// `queue` rule, see NetnsHosts::Impair), which holds each one for the
// delay and then lets it go, or drops it with the given probability. Only
// the packets' metadata crosses to user space; their bytes stay in the
// kernel, and GSO packets are queued whole. Packets keep their order.
//
//   link_impair --queue N --delay-us D [--loss-permille P] [--seed S]
//
// Prints "link_impair ready ..." once bound to the queue, then runs until
// SIGTERM or SIGINT, lets go of what it holds and prints
// "link_impair passed N dropped M". If it dies, the rule's `bypass` lets
// packets through.
#include <endian.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;

struct Held {
  std::uint32_t id;
  Clock::time_point due;
};

struct State {
  nfq_q_handle* queue = nullptr;
  std::chrono::microseconds delay{0};
  std::uint32_t loss_permille = 0;
  std::mt19937 rng;
  std::deque<Held> held;
  Clock::time_point now;
  std::uint64_t passed = 0, dropped = 0;
};

int OnPacket(nfq_q_handle* queue, nfgenmsg*, nfq_data* data, void* arg) {
  auto* state = static_cast<State*>(arg);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(data);
  if (header == nullptr) {
    return 0;
  }
  const std::uint32_t id = be32toh(header->packet_id);
  if (state->loss_permille > 0 && state->rng() % 1000 < state->loss_permille) {
    ++state->dropped;
    return nfq_set_verdict(queue, id, NF_DROP, 0, nullptr);
  }
  state->held.push_back({id, state->now + state->delay});
  return 0;
}

bool ParseArgs(int argc, char** argv, int* queue, long* delay_us, long* loss, long* seed) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    char* end = nullptr;
    const long value = std::strtol(argv[i + 1], &end, 10);
    if (*end != '\0' || value < 0) {
      std::fprintf(stderr, "link_impair: %s wants a non-negative integer, not '%s'\n", flag.c_str(),
                   argv[i + 1]);
      return false;
    }
    if (flag == "--queue" && value <= 65535) {
      *queue = static_cast<int>(value);
    } else if (flag == "--delay-us" && value <= 10'000'000) {
      *delay_us = value;
    } else if (flag == "--loss-permille" && value <= 1000) {
      *loss = value;
    } else if (flag == "--seed") {
      *seed = value;
    } else {
      std::fprintf(stderr, "link_impair: unknown flag or value out of range: %s %s\n", flag.c_str(),
                   argv[i + 1]);
      return false;
    }
  }
  if (argc % 2 != 1 || *queue < 0) {
    std::fprintf(stderr,
                 "usage: link_impair --queue N --delay-us D [--loss-permille P] [--seed S]\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int queue_num = -1;
  long delay_us = 0, loss = 0, seed = 1;
  if (!ParseArgs(argc, argv, &queue_num, &delay_us, &loss, &seed)) {
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = 1; };
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  ::prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 µs: the delays are tens of µs and up.

  State state;
  state.delay = std::chrono::microseconds(delay_us);
  state.loss_permille = static_cast<std::uint32_t>(loss);
  state.rng.seed(static_cast<std::uint32_t>(seed));
  nfq_handle* handle = nfq_open();
  if (handle == nullptr) {
    std::perror("link_impair: nfq_open");
    return 1;
  }
  state.queue = nfq_create_queue(handle, static_cast<std::uint16_t>(queue_num), &OnPacket, &state);
  if (state.queue == nullptr || nfq_set_mode(state.queue, NFQNL_COPY_META, 0) < 0 ||
      nfq_set_queue_maxlen(state.queue, 65536) < 0 ||
      nfq_set_queue_flags(state.queue, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO) < 0) {
    std::fprintf(stderr, "link_impair: cannot bind queue %d: %s\n", queue_num,
                 std::strerror(errno));
    return 1;
  }
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 16u << 20);
  const int fd = nfq_fd(handle);
  std::printf("link_impair ready queue %d delay_us %ld loss_permille %ld\n", queue_num, delay_us,
              loss);
  std::fflush(stdout);

  alignas(8) static char buffer[1 << 16];
  while (g_stop == 0) {
    state.now = Clock::now();
    timespec timeout{0, 100'000'000};
    if (!state.held.empty()) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::nanoseconds>(state.held.front().due - state.now);
      const long ns = wait.count() > 0 ? static_cast<long>(wait.count()) : 0;
      timeout = {ns / 1'000'000'000, ns % 1'000'000'000};
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::ppoll(&p, 1, &timeout, nullptr);
    if (ready < 0 && errno != EINTR) {
      std::perror("link_impair: ppoll");
      return 1;
    }
    state.now = Clock::now();
    for (;;) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) {
        nfq_handle_packet(handle, buffer, static_cast<int>(n));
        continue;
      }
      // ENOBUFS: notices were lost; their packets wait in the kernel and
      // go with the next batch verdict, which covers every earlier id.
      if (n < 0 && errno == ENOBUFS) {
        continue;
      }
      break;
    }
    std::uint32_t last = 0;
    bool any = false;
    while (!state.held.empty() && state.held.front().due <= state.now) {
      last = state.held.front().id;
      any = true;
      state.held.pop_front();
      ++state.passed;
    }
    if (any) {
      nfq_set_verdict_batch(state.queue, last, NF_ACCEPT);
    }
  }
  if (!state.held.empty()) {
    nfq_set_verdict_batch(state.queue, state.held.back().id, NF_ACCEPT);
    state.passed += state.held.size();
  }
  nfq_destroy_queue(state.queue);
  nfq_close(handle);
  // Last, so a caller that read it may bind the queue again at once.
  std::printf("link_impair passed %llu dropped %llu\n",
              static_cast<unsigned long long>(state.passed),
              static_cast<unsigned long long>(state.dropped));
  std::fflush(stdout);
  return 0;
}
